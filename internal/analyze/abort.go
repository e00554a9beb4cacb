package analyze

import "github.com/skbtrace/skbtrace/internal/event"

// abortWait is how long a received reset waits for the reset that would make
// it an abort on data. The kernel sends that one at once, in the same
// softirq; the margin covers slow (emulated) machines.
const abortWait = 50_000_000 // ns

// abortJoiner makes one event of an abort on data. The kernel's tcp_reset()
// fires the "reset received" tracepoint both for the peer's RST and when it
// aborts a socket because data arrived after the socket closed; then it
// answers that data with a reset, which the recorder marks abort_on_data. A
// received reset of a socket in FIN_WAIT1/2 (where aborts on data happen)
// waits for such a reset of its socket and is dropped when one comes. Events
// behind a waiting one wait too, so order is kept.
type abortJoiner struct {
	// queue[start:] wait; popped events leave room at the front, reused
	// once it is half the queue (no allocation per event while a reset
	// waits).
	queue []event.Event
	start int
	// queued counts the events queued since the queue was last empty:
	// queue[start+i] is the queued-(len(queue)-start)+i-th.
	queued uint64
	// lastAnswer is, per socket, the place in that count of its latest
	// abort's reset still queued. A waiting reset looks its socket up
	// here instead of scanning the queue behind it: a churn of servers
	// that close first queues thousands of events behind each reset in
	// its 50 ms, and rescanning them on every push took parse 46 s for
	// 850,000 events.
	lastAnswer map[uint64]uint64
}

func mayBeAbort(ev *event.Event) bool {
	if ev.Type != event.TypeTCPReset {
		return false
	}
	r := &ev.Reset
	state := event.TCPState(r.State)
	return r.Dir == event.ResetReceived && event.ResetPath(r.Path) == event.ResetPathPeer &&
		(state == event.TCPFinWait1 || state == event.TCPFinWait2)
}

func answersAbort(ev *event.Event, sock uint64) bool {
	return ev.Type == event.TypeTCPReset && ev.Reset.Dir == event.ResetSent &&
		event.ResetPath(ev.Reset.Path) == event.ResetPathAbortOnData && ev.Socket.Sock == sock
}

// Push takes the next event in sequence order and emits what is decided.
func (j *abortJoiner) Push(ev *event.Event, emit func(*event.Event) error) error {
	if len(j.queue) == j.start && !mayBeAbort(ev) {
		return emit(ev)
	}
	if j.start > 0 && j.start >= len(j.queue)/2 {
		j.queue = j.queue[:copy(j.queue, j.queue[j.start:])]
		j.start = 0
	}
	j.queue = append(j.queue, *ev)
	j.queued++
	if answersAbort(ev, ev.Socket.Sock) {
		if j.lastAnswer == nil {
			j.lastAnswer = map[uint64]uint64{}
		}
		j.lastAnswer[ev.Socket.Sock] = j.queued
	}
	return j.drain(emit, false)
}

// Flush emits everything still waiting: no abort came for them.
func (j *abortJoiner) Flush(emit func(*event.Event) error) error {
	return j.drain(emit, true)
}

func (j *abortJoiner) drain(emit func(*event.Event) error, final bool) error {
	for j.start < len(j.queue) {
		head := &j.queue[j.start]
		place := j.queued - uint64(len(j.queue)-j.start) + 1
		if mayBeAbort(head) {
			if answer, ok := j.lastAnswer[head.Socket.Sock]; ok && answer > place {
				j.start++
				continue
			}
			if !final && j.queue[len(j.queue)-1].Time-head.Time < abortWait {
				return nil
			}
		}
		if err := emit(head); err != nil {
			return err
		}
		if answer, ok := j.lastAnswer[head.Socket.Sock]; ok && answer == place {
			delete(j.lastAnswer, head.Socket.Sock)
		}
		j.start++
	}
	j.queue, j.start, j.queued = j.queue[:0], 0, 0
	return nil
}
