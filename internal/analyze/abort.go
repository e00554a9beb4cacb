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
	queue []event.Event
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
	if len(j.queue) == 0 && !mayBeAbort(ev) {
		return emit(ev)
	}
	j.queue = append(j.queue, *ev)
	return j.drain(emit, false)
}

// Flush emits everything still waiting: no abort came for them.
func (j *abortJoiner) Flush(emit func(*event.Event) error) error {
	return j.drain(emit, true)
}

func (j *abortJoiner) drain(emit func(*event.Event) error, final bool) error {
	for len(j.queue) > 0 {
		head := &j.queue[0]
		if mayBeAbort(head) {
			aborted := false
			for i := 1; i < len(j.queue) && !aborted; i++ {
				aborted = answersAbort(&j.queue[i], head.Socket.Sock)
			}
			if aborted {
				j.queue = j.queue[1:]
				continue
			}
			if !final && j.queue[len(j.queue)-1].Time-head.Time < abortWait {
				return nil
			}
		}
		if err := emit(head); err != nil {
			return err
		}
		j.queue = j.queue[1:]
	}
	j.queue = j.queue[:0:0]
	return nil
}
