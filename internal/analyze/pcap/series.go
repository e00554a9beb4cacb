package pcap

import "fmt"

// series is a flow direction's downsampled history for the graphs: a fixed
// number of time bins whose width doubles (merging neighbours) whenever the
// capture outgrows them, so a flow of ten million packets draws from at most
// maxBins points per line.
type series struct {
	start int64
	width int64 // ns per bin
	bins  []bin
}

type bin struct {
	used           bool
	seqMin, seqMax uint32 // relative sequence numbers of data sent
	ack, win       uint32 // the peer's last ACK and ACK+window, relative
	haveAck        bool
	bytes          uint64
	packets        uint64
	retrans, sacks uint32
	retransSeq     uint32
	rttSum         float64
	rttN           uint32
	sizeMax        uint32
}

const maxBins = 1024

// A direction outgrows the smallest graphed one, and takes its series, at
// twice its payload: two flows of about one size do not trade places.
const evictRatio = 2

func (d *Dir) graph(ts int64, seqEnd, payload uint32, retrans bool, a *Analyzer) {
	if !a.opts.Graphs {
		return
	}
	if d.series == nil && !a.startSeries(d, ts) {
		return
	}
	b := d.series.at(ts)
	if !b.used || seqLess(seqEnd-payload, b.seqMin) {
		b.seqMin = seqEnd - payload
	}
	if !b.used || seqLess(b.seqMax, seqEnd) {
		b.seqMax = seqEnd
	}
	b.used = true
	b.bytes += uint64(payload)
	b.packets++
	b.sizeMax = max(b.sizeMax, payload)
	if retrans {
		b.retrans++
		b.retransSeq = seqEnd - payload
	}
}

// startSeries gives d a series: from its first packet while fewer than
// maxSeries directions have one, else from now in place of the smallest
// when d has outgrown it.
func (a *Analyzer) startSeries(d *Dir, ts int64) bool {
	if len(a.graphed) < maxSeries {
		d.series = &series{start: d.First, width: 1e6}
		a.graphed = append(a.graphed, d)
		return true
	}
	// Graphed directions only grow: below the last floor is below it now,
	// and the scan runs only when a direction passes it.
	if d.PayloadBytes < a.graphFloor {
		return false
	}
	smallest := 0
	for i, g := range a.graphed {
		if g.PayloadBytes < a.graphed[smallest].PayloadBytes {
			smallest = i
		}
	}
	a.graphFloor = evictRatio * a.graphed[smallest].PayloadBytes
	if d.PayloadBytes < a.graphFloor {
		return false
	}
	a.graphed[smallest].series = nil
	a.graphed[smallest] = d
	d.series = &series{start: ts, width: 1e6}
	return true
}

func (s *series) ackAt(ts int64, ack, window uint32, sack bool) {
	b := s.at(ts)
	b.ack, b.win, b.haveAck = ack, ack+window, true
	if sack {
		b.sacks++
	}
}

// at finds the bin of a time, widening the bins as needed.
func (s *series) at(ts int64) *bin {
	if ts < s.start {
		ts = s.start
	}
	for (ts-s.start)/s.width >= maxBins {
		s.widen()
	}
	i := int((ts - s.start) / s.width)
	for len(s.bins) <= i {
		s.bins = append(s.bins, bin{})
	}
	return &s.bins[i]
}

// widen doubles the bin width, merging pairs of bins.
func (s *series) widen() {
	merged := s.bins[:0]
	for i := 0; i < len(s.bins); i += 2 {
		b := s.bins[i]
		if i+1 < len(s.bins) {
			b = mergeBins(b, s.bins[i+1])
		}
		merged = append(merged, b)
	}
	s.bins = merged
	s.width *= 2
}

func mergeBins(a, b bin) bin {
	if !a.used {
		a.seqMin, a.seqMax, a.used = b.seqMin, b.seqMax, b.used
	} else if b.used {
		if seqLess(b.seqMin, a.seqMin) {
			a.seqMin = b.seqMin
		}
		if seqLess(a.seqMax, b.seqMax) {
			a.seqMax = b.seqMax
		}
	}
	if b.haveAck {
		a.ack, a.win, a.haveAck = b.ack, b.win, true
	}
	a.bytes += b.bytes
	a.packets += b.packets
	a.retrans += b.retrans
	a.sacks += b.sacks
	if b.retrans > 0 {
		a.retransSeq = b.retransSeq
	}
	a.rttSum += b.rttSum
	a.rttN += b.rttN
	a.sizeMax = max(a.sizeMax, b.sizeMax)
	return a
}

// FlowGraph is a flow direction's downsampled series, ready to draw. Times
// are seconds from the capture's start; sequence numbers are relative to the
// flow's first.
type FlowGraph struct {
	Title  string
	Points []GraphPoint
}

// GraphPoint is one bin.
type GraphPoint struct {
	T              float64
	HasData        bool
	SeqMin, SeqMax float64
	HasAck         bool
	Ack, Win       float64
	Retrans, SACKs uint32
	RetransSeq     float64
	Bps            float64
	RTTus          float64 // 0: no sample in the bin
	MaxPayload     uint32
}

// Graphs returns the series of the n busiest flow directions that have one.
func (a *Analyzer) Graphs(n int) []FlowGraph {
	var out []FlowGraph
	for _, d := range a.Flows() {
		if len(out) == n {
			break
		}
		s := d.series
		if s == nil {
			continue
		}
		g := FlowGraph{Title: fmt.Sprintf("%s -> %s", d.Key.Src, d.Key.Dst)}
		if s.start > d.First {
			g.Title += fmt.Sprintf(" (drawn from %.3f s: it outgrew a flow among the %d kept before it)", float64(s.start-a.First)/1e9, maxSeries)
		}
		width := float64(s.width) / 1e9
		base := float64(s.start-a.First) / 1e9
		for i, b := range s.bins {
			p := GraphPoint{T: base + float64(i)*width, HasData: b.used, SeqMin: float64(b.seqMin), SeqMax: float64(b.seqMax),
				HasAck: b.haveAck, Ack: float64(b.ack), Win: float64(b.win), Retrans: b.retrans, SACKs: b.sacks,
				RetransSeq: float64(b.retransSeq), Bps: float64(b.bytes) * 8 / width, MaxPayload: b.sizeMax}
			if b.rttN > 0 {
				p.RTTus = b.rttSum / float64(b.rttN)
			}
			g.Points = append(g.Points, p)
		}
		out = append(out, g)
	}
	return out
}
