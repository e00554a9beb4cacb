package collect

import (
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// drainQdiscDelay sums each qdisc's per-CPU waits and writes what the
// interval added: packets, total and histogram, and the interval's longest.
func drainQdiscDelay(d *drainer) error {
	prev := prevOf[wire.QdiscKey, wire.QdiscDelayStats](d, wire.EventFamilyFAMILY_QDISC_DELAY)
	return perCPU(d.sess.Map(wire.MapQdiscDelays), func(k wire.QdiscKey, vs []wire.QdiscDelayStats) error {
		var sum wire.QdiscDelayStats
		var maxNs uint64
		for _, v := range vs {
			sum.Packets += v.Packets
			sum.Unstamped += v.Unstamped
			sum.SumNs += v.SumNs
			for i := range sum.Hist {
				sum.Hist[i] += v.Hist[i]
			}
			if v.Dev[0] != 0 {
				sum.Dev, sum.Kind = v.Dev, v.Kind
			}
			if v.Gen == d.gen {
				maxNs = max(maxNs, v.MaxNs)
			}
		}
		p := prev[k]
		prev[k] = sum
		if sum.Packets == p.Packets && sum.Unstamped == p.Unstamped {
			return nil
		}
		ev := wire.QdiscDelayEvent{
			BeginNs: d.begin, Dev: sum.Dev, Kind: sum.Kind, Ifindex: k.Ifindex, Netns: k.Netns, Handle: k.Handle, Parent: k.Parent,
			Packets: sum.Packets - p.Packets, Unstamped: sum.Unstamped - p.Unstamped, SumNs: sum.SumNs - p.SumNs, MaxNs: maxNs,
		}
		for i := range ev.Hist {
			ev.Hist[i] = sum.Hist[i] - p.Hist[i]
		}
		return d.emit(event.TypeQdiscDelay, 0, &ev)
	})
}
