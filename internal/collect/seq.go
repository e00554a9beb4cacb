package collect

import (
	"encoding/binary"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// sequencer numbers events. Where the kernel can count (atomic fetch and
// syscall programs), its counter numbers every event, the recorder's own
// included, so gaps reveal loss. Elsewhere the recorder numbers them in the
// order it writes them: kernel events in ring-buffer order, a total order
// across CPUs (the ring's reservation lock), so order stays exact and loss
// is counted by the per-CPU counters alone.
type sequencer struct {
	sess   *probe.Session
	kernel bool
	next   uint64
}

func newSequencer(sess *probe.Session) *sequencer {
	return &sequencer{sess: sess, kernel: sess.Features().KernelSeq}
}

var seqOffset = unsafe.Offsetof(wire.EventHeader{}.Seq)

// ring numbers an event as read from the ring buffer (in native byte order).
func (q *sequencer) ring(sample []byte) {
	if q.kernel || len(sample) < int(seqOffset)+8 {
		return
	}
	binary.NativeEndian.PutUint64(sample[seqOffset:], q.next)
	q.next++
}

// reserve takes n consecutive numbers for events the recorder writes, and returns the first.
func (q *sequencer) reserve(n uint64) (uint64, error) {
	if q.kernel {
		return q.sess.ReserveSeq(n)
	}
	first := q.next
	q.next += n
	return first, nil
}

// end is the number the next event would take; once the programs are
// detached, it bounds every number given.
func (q *sequencer) end() (uint64, error) {
	if q.kernel {
		return q.sess.NextSeq()
	}
	return q.next, nil
}
