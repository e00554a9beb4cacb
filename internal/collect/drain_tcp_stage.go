package collect

import (
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// drainTCPStage writes what each socket's stage histograms added in the
// interval.
func drainTCPStage(d *drainer) error {
	prev := prevOf[uint64, wire.TcpStageStats](d, wire.EventFamilyFAMILY_TCP_STAGE)
	var ev wire.TcpStageEvent
	return entries(d.sess.Map(wire.MapTcpStages), func(sock uint64, sum wire.TcpStageStats) error {
		p := prev[sock]
		prev[sock] = sum
		if sum.Stage[wire.TcpStageSTAGE_ACK].Count == p.Stage[wire.TcpStageSTAGE_ACK].Count &&
			sum.Stage[wire.TcpStageSTAGE_RX_QUEUE].Count == p.Stage[wire.TcpStageSTAGE_RX_QUEUE].Count {
			return nil
		}
		ev = wire.TcpStageEvent{BeginNs: d.begin, Sock: sock, Addrs: sum.Addrs}
		for i := range ev.Stage {
			addStageHist(&ev.Stage[i], &sum.Stage[i], 1)
			addStageHist(&ev.Stage[i], &p.Stage[i], ^uint64(0))
		}
		return d.emit(event.TypeTCPStage, 0, &ev)
	})
}

// addStageHist adds sign times b to a: sign is 1, or all ones to subtract
// (the counts are cumulative, so a difference never goes below zero).
func addStageHist(a, b *wire.StageHist, sign uint64) {
	a.Count += sign * b.Count
	a.SumNs += sign * b.SumNs
	for i := range a.Hist {
		a.Hist[i] += sign * b.Hist[i]
	}
}
