package analyze

import (
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
)

func resetEvent(seq uint64, t int64, sock uint64, dir uint8, path event.ResetPath, state event.TCPState) event.Event {
	ev := event.Event{Type: event.TypeTCPReset, Seq: seq, Time: t, Socket: event.Socket{Sock: sock}}
	ev.Reset.Dir, ev.Reset.Path, ev.Reset.State = dir, uint8(path), uint8(state)
	return ev
}

func joinAll(t *testing.T, evs []event.Event) []uint64 {
	t.Helper()
	var j abortJoiner
	var got []uint64
	emit := func(e *event.Event) error { got = append(got, e.Seq); return nil }
	for i := range evs {
		if err := j.Push(&evs[i], emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Flush(emit); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestAbortOnDataLeavesOneReset(t *testing.T) {
	closed := event.Event{Type: event.TypeTCPConn, Seq: 1, Time: 1_000_010}
	evs := []event.Event{
		resetEvent(0, 1_000_000, 0xa, event.ResetReceived, event.ResetPathPeer, event.TCPFinWait2),
		closed,
		resetEvent(2, 1_000_020, 0xa, event.ResetSent, event.ResetPathAbortOnData, 7),
		{Type: event.TypeTCPConn, Seq: 3, Time: 1_000_030},
	}
	if got := joinAll(t, evs); !equalSeqs(got, []uint64{1, 2, 3}) {
		t.Errorf("emitted %v, want the state change and the abort's reset, not a received reset", got)
	}
}

func TestPeerResetInFinWaitIsKeptInOrder(t *testing.T) {
	evs := []event.Event{
		resetEvent(0, 0, 0xa, event.ResetReceived, event.ResetPathPeer, event.TCPFinWait1),
		{Type: event.TypeTCPConn, Seq: 1, Time: 10},
		// Another socket's abort does not take this one's reset.
		resetEvent(2, 20, 0xb, event.ResetSent, event.ResetPathAbortOnData, 7),
		{Type: event.TypeTCPConn, Seq: 3, Time: abortWait + 1},
		{Type: event.TypeTCPConn, Seq: 4, Time: abortWait + 2},
	}
	if got := joinAll(t, evs); !equalSeqs(got, []uint64{0, 1, 2, 3, 4}) {
		t.Errorf("emitted %v, want every event in order", got)
	}
}

func TestWaitingResetIsFlushedAtTheEnd(t *testing.T) {
	evs := []event.Event{
		resetEvent(0, 0, 0xa, event.ResetReceived, event.ResetPathPeer, event.TCPFinWait1),
		{Type: event.TypeTCPConn, Seq: 1, Time: 10},
	}
	if got := joinAll(t, evs); !equalSeqs(got, []uint64{0, 1}) {
		t.Errorf("emitted %v", got)
	}
}

func TestResetOutsideFinWaitPassesAtOnce(t *testing.T) {
	var j abortJoiner
	ev := resetEvent(0, 0, 0xa, event.ResetReceived, event.ResetPathPeer, event.TCPEstablished)
	n := 0
	if err := j.Push(&ev, func(*event.Event) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("emitted %d events (err %v), want the reset at once", n, err)
	}
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAnAbortBeforeTheWaitingResetDoesNotTakeIt(t *testing.T) {
	evs := []event.Event{
		resetEvent(0, 0, 0xa, event.ResetReceived, event.ResetPathPeer, event.TCPFinWait1),
		resetEvent(1, 10, 0xb, event.ResetSent, event.ResetPathAbortOnData, 7),
		// Socket b's reset comes after b's abort: it waits and is kept.
		resetEvent(2, 20, 0xb, event.ResetReceived, event.ResetPathPeer, event.TCPFinWait1),
		resetEvent(3, 30, 0xa, event.ResetSent, event.ResetPathAbortOnData, 7),
		{Type: event.TypeTCPConn, Seq: 4, Time: abortWait + 100},
	}
	if got := joinAll(t, evs); !equalSeqs(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("emitted %v, want a's received reset taken by a's later abort and b's kept", got)
	}
}

// BenchmarkAbortJoinerChurn is a churn whose servers close first: a
// received reset in FIN_WAIT1 every tenth event, each followed by the
// events of 50 ms. Its cost per event stays flat as the queue grows.
func BenchmarkAbortJoinerChurn(b *testing.B) {
	var j abortJoiner
	emit := func(*event.Event) error { return nil }
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ev := event.Event{Type: event.TypeTCPConn, Seq: uint64(i), Time: int64(i) * 1000}
		if i%10 == 0 {
			ev = resetEvent(uint64(i), int64(i)*1000, uint64(i), event.ResetReceived, event.ResetPathPeer, event.TCPFinWait1)
		}
		if err := j.Push(&ev, emit); err != nil {
			b.Fatal(err)
		}
	}
	if err := j.Flush(emit); err != nil {
		b.Fatal(err)
	}
}
