package analyze

import (
	"cmp"
	"slices"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// A trace can have hundreds of thousands of connections, every one kept to
// the end: their per-connection tallies are small fixed arrays and short
// sorted lists, not maps or full histograms.

// StageHists is a connection's tcp_stage histograms, kept sparse: its bytes
// fall in a few of a stage's buckets, and the full histograms (9 KB a
// connection) were most of a big trace's stat memory.
type StageHists struct {
	Count, SumNs [wire.TcpStageSTAGE_MAX]uint64
	buckets      []stageBucket // by stage, then bucket
}

type stageBucket struct {
	stage, bucket uint8
	n             uint64
}

func (b stageBucket) key() uint16 { return uint16(b.stage)<<8 | uint16(b.bucket) }

// Add adds a tcp_stage event's histograms.
func (s *StageHists) Add(h *[wire.TcpStageSTAGE_MAX]wire.StageHist) {
	for st := range h {
		s.Count[st] += h[st].Count
		s.SumNs[st] += h[st].SumNs
		for k, n := range h[st].Hist {
			if n == 0 {
				continue
			}
			b := stageBucket{uint8(st), uint8(k), n}
			i, found := slices.BinarySearchFunc(s.buckets, b, func(a, b stageBucket) int { return cmp.Compare(a.key(), b.key()) })
			if found {
				s.buckets[i].n += n
			} else {
				s.buckets = slices.Insert(s.buckets, i, b)
			}
		}
	}
}

// Hist is one stage's histogram (an event.StageNames index), in full.
func (s *StageHists) Hist(stage int) wire.StageHist {
	h := wire.StageHist{Count: s.Count[stage], SumNs: s.SumNs[stage]}
	for _, b := range s.buckets {
		if int(b.stage) == stage {
			h.Hist[b.bucket] += b.n
		}
	}
	return h
}

// AddTo adds the histograms to a.
func (s *StageHists) AddTo(a *[wire.TcpStageSTAGE_MAX]wire.StageHist) {
	for st := range a {
		a[st].Count += s.Count[st]
		a[st].SumNs += s.SumNs[st]
	}
	for _, b := range s.buckets {
		a[b.stage].Hist[b.bucket] += b.n
	}
}

// caStates is how many congestion states event.TCPCaState names (Open to Loss).
const caStates = 5

// CongCounts counts a connection's tcp_cong events by congestion state
// (event.TCPCaState); the last entry counts the states it does not name.
type CongCounts [caStates + 1]uint32

func (c *CongCounts) add(s event.TCPCaState) { c[min(int(s), caStates)]++ }

// Map is the counts by state name, nil without any.
func (c *CongCounts) Map() map[string]int {
	var m map[string]int
	for s, n := range c {
		if n == 0 {
			continue
		}
		if m == nil {
			m = map[string]int{}
		}
		m[event.TCPCaState(s).String()] = int(n)
	}
	return m
}
