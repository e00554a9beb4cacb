package collect

import (
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// lossCounts follows one kind of the kernel's loss counters (per family
// and CPU, cumulative): what was seen, and the recording's total.
type lossCounts struct {
	seen  [wire.EventFamilyFAMILY_MAX][]uint64
	total [wire.EventFamilyFAMILY_MAX]uint64
}

// add records in the trace, as loss of the family, what each counter
// gained since the last call.
func (c *lossCounts) add(w *trace.Writer, counts [][]uint64, bootNs uint64) error {
	for fam, perCPU := range counts {
		if fam >= len(c.seen) {
			break
		}
		if c.seen[fam] == nil {
			c.seen[fam] = make([]uint64, len(perCPU))
		}
		for cpu, n := range perCPU {
			if d := n - c.seen[fam][cpu]; d > 0 {
				if err := w.AppendLoss(trace.Loss{Family: uint16(fam), CPU: uint32(cpu), Count: d, BootNs: bootNs}); err != nil {
					return err
				}
				c.total[fam] += d
				c.seen[fam][cpu] = n
			}
		}
	}
	return nil
}

// pollLoss writes what the kernel lost since the last poll: events the
// ring buffer had no room for, and samples a map could not keep. Both
// are the family's loss in the trace; the totals keep them apart, as
// their remedies differ.
func (st *recorderState) pollLoss() error {
	ring, err := st.sess.Lost()
	if err != nil {
		return err
	}
	full, err := st.sess.LostFull()
	if err != nil {
		return err
	}
	now := host.BootNow()
	if err := st.ring.add(st.w, ring, now); err != nil {
		return err
	}
	return st.full.add(st.w, full, now)
}
