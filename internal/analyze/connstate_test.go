package analyze_test

import (
	"math/rand/v2"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// A connection's sparse tcp_stage histograms give back what adding the
// events' full ones gives, bucket by bucket.
func TestStageHistsKeepEveryBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var sparse analyze.StageHists
	var full [wire.TcpStageSTAGE_MAX]wire.StageHist
	for range 50 {
		var ev [wire.TcpStageSTAGE_MAX]wire.StageHist
		for st := range ev {
			for range rng.IntN(4) {
				k, n := rng.IntN(len(ev[st].Hist)), uint64(1+rng.IntN(1000))
				ev[st].Hist[k] += n
				ev[st].Count += n
				ev[st].SumNs += n * uint64(k)
			}
		}
		sparse.Add(&ev)
		for st := range full {
			full[st].Count += ev[st].Count
			full[st].SumNs += ev[st].SumNs
			for k, n := range ev[st].Hist {
				full[st].Hist[k] += n
			}
		}
	}
	for st := range full {
		if h := sparse.Hist(st); h != full[st] {
			t.Errorf("stage %s: the sparse histogram differs from the full one", event.StageNames[st])
		}
	}
	var sum [wire.TcpStageSTAGE_MAX]wire.StageHist
	sparse.AddTo(&sum)
	sparse.AddTo(&sum)
	for st := range full {
		for k := range full[st].Hist {
			if sum[st].Hist[k] != 2*full[st].Hist[k] {
				t.Fatalf("stage %s bucket %d: added twice %d, want %d", event.StageNames[st], k, sum[st].Hist[k], 2*full[st].Hist[k])
			}
		}
		if sum[st].Count != 2*full[st].Count || sum[st].SumNs != 2*full[st].SumNs {
			t.Errorf("stage %s: added twice count %d sum %d, want %d %d", event.StageNames[st], sum[st].Count, sum[st].SumNs, 2*full[st].Count, 2*full[st].SumNs)
		}
	}
}

// Congestion states are counted by name, a state skbtrace does not name
// as "unknown"; none is a nil map.
func TestCongCountsByName(t *testing.T) {
	st := analyze.NewStat()
	st.Add(connEvent(1, 0xa, local, peer, event.TCPEstablished))
	if m := st.Connections[0].CongStates.Map(); m != nil {
		t.Fatalf("no tcp_cong event, counts %v", m)
	}
	for i, state := range []uint8{2, 2, 4, 9} {
		ev := &event.Event{Type: event.TypeTCPCong, Time: int64(2 + i), Socket: event.Socket{Sock: 0xa, Local: local, Peer: peer}}
		ev.Cong.State = state
		st.Add(ev)
	}
	m := st.Connections[0].CongStates.Map()
	if len(m) != 3 || m["CWR"] != 2 || m["Loss"] != 1 || m["unknown"] != 1 {
		t.Errorf("counts %v, want CWR 2, Loss 1, unknown 1", m)
	}
}
