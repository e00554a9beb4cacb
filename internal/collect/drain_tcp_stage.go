package collect

import (
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// drainTCPStage writes what each socket life's stage histograms added in
// the interval, and takes out of the map the lives that added nothing (a
// closed socket's after its last samples, an idle one's until its next).
func drainTCPStage(d *drainer) error {
	prev := prevOf[wire.TcpStageKey, wire.TcpStageStats](d, wire.EventFamilyFAMILY_TCP_STAGE)
	m := d.sess.Map(wire.MapTcpStages)
	var idle []wire.TcpStageKey
	err := entries(m, func(k wire.TcpStageKey, sum wire.TcpStageStats) error {
		p, seen := prev[k]
		prev[k] = sum
		if !stageGrew(&sum, &p) {
			if seen {
				idle = append(idle, k)
			}
			return nil
		}
		return emitStage(d, k, &sum, &p)
	})
	if err != nil {
		return err
	}
	return expire(d, m, idle, prev, func(k wire.TcpStageKey, sum, p wire.TcpStageStats) error {
		if !stageGrew(&sum, &p) {
			return nil
		}
		return emitStage(d, k, &sum, &p)
	})
}

// stageGrew says whether a life's totals moved since p.
func stageGrew(sum, p *wire.TcpStageStats) bool {
	return sum.Stage[wire.TcpStageSTAGE_ACK].Count != p.Stage[wire.TcpStageSTAGE_ACK].Count ||
		sum.Stage[wire.TcpStageSTAGE_RX_QUEUE].Count != p.Stage[wire.TcpStageSTAGE_RX_QUEUE].Count
}

// emitStage writes sum less p. A total below p's is a new count (its
// entry was taken out and made anew), never a negative difference.
func emitStage(d *drainer, k wire.TcpStageKey, sum, p *wire.TcpStageStats) error {
	for i := range sum.Stage {
		if sum.Stage[i].Count < p.Stage[i].Count {
			p = &wire.TcpStageStats{}
			break
		}
	}
	ev := wire.TcpStageEvent{BeginNs: d.begin, Sock: k.Sock, Addrs: sum.Addrs}
	for i := range ev.Stage {
		subStageHist(&ev.Stage[i], &sum.Stage[i], &p.Stage[i])
	}
	return d.emit(event.TypeTCPStage, 0, &ev)
}

// subStageHist sets a to b less c, c being b's earlier value.
func subStageHist(a, b, c *wire.StageHist) {
	a.Count = b.Count - c.Count
	a.SumNs = b.SumNs - c.SumNs
	for i := range a.Hist {
		a.Hist[i] = b.Hist[i] - c.Hist[i]
	}
}
