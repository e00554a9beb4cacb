// Package timeline turns a run into series over time for the HTML reports:
// per flow throughput, cwnd, bytes in flight, srtt, the send-limit reason,
// retransmits and drops; per CPU its time split; per device packets/s and
// segments per skb. Events (a trace) and samples (the doctor's tcp_info and
// /proc/stat readings) go into bins that double in width whenever the run
// outgrows MaxBins, so memory and the page stay bounded whatever the length.
package timeline

import (
	"math"
	"net/netip"
	"sort"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// MaxBins bounds the bins per series.
const MaxBins = 2048

// MaxFlows is how many flows a timeline keeps: the busiest senders.
const MaxFlows = 8

// minFlowShare leaves out senders that moved under this share of the
// busiest one's bytes (a receiver's few bytes of requests, a control
// connection): they would draw empty charts.
const minFlowShare = 0.01

// Point is a value at a time, in seconds from the timeline's start; NaN is
// a gap (nothing measured in that bin).
type Point struct{ T, V float64 }

// Span is a stretch of a sender's time held by one send-limit reason.
type Span struct {
	From, To float64
	Reason   string
}

// Mark is a count of events (retransmitted segments, drops) in one bin.
type Mark struct {
	T float64
	N uint64
}

// Timeline is the run's series.
type Timeline struct {
	Seconds float64 `json:"seconds"`
	// BinSeconds is the width of one bin.
	BinSeconds float64   `json:"bin_seconds"`
	Flows      []*Flow   `json:"flows,omitempty"`
	CPUs       []*CPU    `json:"cpus,omitempty"`
	Devices    []*Device `json:"devices,omitempty"`
	// OtherFlows counts the senders left out: beyond MaxFlows, or moving
	// under 1 % of the busiest one's bytes. Each life of a socket address
	// is a flow of its own.
	OtherFlows int `json:"other_flows,omitempty"`
}

// Flow is one TCP connection seen from its sending end.
type Flow struct {
	Netns       string         `json:"netns,omitempty"`
	Local, Peer netip.AddrPort `json:"-"`
	// Bytes is the whole life's, drawn or not.
	Bytes float64 `json:"bytes"`
	// DrawnFrom, when Partial, is where the series start: the flow moved
	// UndrawnBytes (or only waited) before it was among the MaxCandidates
	// busiest, whose bins alone are kept.
	Partial      bool    `json:"partial,omitempty"`
	DrawnFrom    float64 `json:"drawn_from,omitempty"`
	UndrawnBytes float64 `json:"undrawn_bytes,omitempty"`
	// ThroughputFrom says what the throughput counts: bytes the peer
	// acknowledged (tcp_info, tcp_rtt) or segments sent (tcp_sendlim).
	ThroughputFrom string  `json:"throughput_from"`
	Throughput     []Point `json:"throughput"` // bit/s
	Cwnd           []Point `json:"cwnd"`       // segments
	InFlight       []Point `json:"inflight"`   // segments
	SRTT           []Point `json:"srtt"`       // µs
	Limits         []Span  `json:"limits,omitempty"`
	// LimitShare is each reason's share of the sender's recorded time.
	LimitShare map[string]float64 `json:"limit_share,omitempty"`
	Retrans    []Mark             `json:"retrans,omitempty"`
	Drops      []Mark             `json:"drops,omitempty"`
	// StageUs is where the bytes tcp_stage timed spent their time, per bin:
	// each stage's mean wait (event.StageNames), 0 in a direction the
	// socket did not time.
	StageUs []StagePoint `json:"stage_us,omitempty"`
}

// StagePoint is a bin's mean wait in each stage of tcp_stage, in µs.
type StagePoint struct {
	T  float64                         `json:"t"`
	Us [wire.TcpStageSTAGE_MAX]float64 `json:"us"`
}

// Label names the flow.
func (f *Flow) Label() string {
	s := f.Local.String() + " -> " + f.Peer.String()
	if f.Netns != "" {
		s += " (netns " + f.Netns + ")"
	}
	return s
}

// CPU is how one CPU spent each bin, as shares: from /proc/stat when the
// doctor sampled it, else only the network softirq time a trace measured.
type CPU struct {
	CPU     int     `json:"cpu"`
	User    []Point `json:"user,omitempty"`
	System  []Point `json:"system,omitempty"`
	Softirq []Point `json:"softirq"`
	IRQ     []Point `json:"irq,omitempty"`
	Idle    []Point `json:"idle,omitempty"`
	// FromProcStat: all five are measured; else Softirq is NET_RX+NET_TX
	// softirq time from the softirq family and the rest unknown.
	FromProcStat bool `json:"from_proc_stat"`
}

// Device is one device's traffic: packets (segments on the wire) per second
// and segments per skb, at transmit and receive.
type Device struct {
	Name      string  `json:"name"`
	Netns     string  `json:"netns,omitempty"`
	TxPps     []Point `json:"tx_pps,omitempty"`
	RxPps     []Point `json:"rx_pps,omitempty"`
	TxSegsSkb []Point `json:"tx_segs_per_skb,omitempty"`
	RxSegsSkb []Point `json:"rx_segs_per_skb,omitempty"`
	TotalSegs uint64  `json:"total_segs"`
}

// CPUTicks is one CPU's time over a sampling interval, in any unit.
type CPUTicks struct {
	User, System, Softirq, IRQ, Idle float64
}

type flowBin struct {
	limitNs        [event.SendlimCount]int64
	sentBytes      float64
	ackedBytes     float64
	cwnd, inFlight float64
	hasWindow      bool
	srttSum        float64
	srttN          float64
	retrans        uint64
	drops          uint64
	// tcp_stage: the waits of the bytes timed, by stage, and how many.
	stageNs [wire.TcpStageSTAGE_MAX]float64
	stageN  [wire.TcpStageSTAGE_MAX]float64 // bytes timed through each stage
}

type cpuBin struct {
	ticks   CPUTicks
	sampled bool
	// NET_TX and NET_RX softirq time and the time their events covered.
	softNs, coverNs [2]float64
}

type devBin struct {
	txSegs, txSkbs, txNs float64
	rxSegs, rxSkbs, rxNs float64
}

// bins is a series of bins starting at bin index off.
type bins[T any] struct {
	off int
	b   []T
}

func (s *bins[T]) at(i int) *T {
	if len(s.b) == 0 {
		s.off = i
	}
	if i < s.off {
		grown := make([]T, s.off-i+len(s.b))
		copy(grown[s.off-i:], s.b)
		s.b, s.off = grown, i
	}
	for i-s.off >= len(s.b) {
		var zero T
		s.b = append(s.b, zero)
	}
	return &s.b[i-s.off]
}

// halve merges pairs of bins after the width doubled.
func halve[T any](s *bins[T], merge func(into, from *T)) {
	if len(s.b) == 0 {
		return
	}
	out := bins[T]{}
	for j := range s.b {
		merge(out.at((s.off+j)/2), &s.b[j])
	}
	*s = out
}

// Builder collects events and samples; Build makes the Timeline.
type Builder struct {
	start, end int64 // wall ns
	width      int64 // ns per bin
	// flows are the current life of each socket, bySock them by socket.
	flows  map[flowKey]*flowAcc
	bySock map[uint64]*flowAcc
	// cands are the flows whose bins are kept (live or ended), byPair
	// them by their addresses for drops; floor is at most the least
	// candidate's score, so most flows are turned away without a look.
	cands  []*flowAcc
	byPair map[pairKey][]*flowAcc
	floor  float64
	// spare are an evicted candidate's arrays, for the next one.
	spare      []flowBin
	spareDrops []uint64
	// otherFlows counts the senders whose lives ended without a place
	// among the candidates.
	otherFlows int
	cpus       map[int]*bins[cpuBin]
	devs       map[devKey]*bins[devBin]
}

type devKey struct {
	netns uint32
	name  string
}

// NewBuilder starts a timeline at start (wall-clock ns); zero takes the
// first event's time.
func NewBuilder(start int64) *Builder {
	return &Builder{start: start, width: int64(1e6), flows: map[flowKey]*flowAcc{}, bySock: map[uint64]*flowAcc{},
		byPair: map[pairKey][]*flowAcc{}, cpus: map[int]*bins[cpuBin]{}, devs: map[devKey]*bins[devBin]{}}
}

// index is the bin of a wall-clock time, widening the bins as needed.
func (b *Builder) index(t int64) int {
	if b.start == 0 {
		b.start = t
	}
	if t < b.start {
		t = b.start
	}
	b.end = max(b.end, t)
	for (t-b.start)/b.width >= MaxBins {
		b.widen()
	}
	return int((t - b.start) / b.width)
}

func (b *Builder) widen() {
	b.width *= 2
	for _, f := range b.cands {
		halve(&f.bins, func(into, from *flowBin) {
			for r := range into.limitNs {
				into.limitNs[r] += from.limitNs[r]
			}
			into.sentBytes += from.sentBytes
			into.ackedBytes += from.ackedBytes
			if from.hasWindow {
				into.cwnd, into.inFlight, into.hasWindow = from.cwnd, from.inFlight, true
			}
			into.srttSum += from.srttSum
			into.srttN += from.srttN
			into.retrans += from.retrans
			into.drops += from.drops
			for st := range into.stageNs {
				into.stageNs[st] += from.stageNs[st]
			}
			for st := range into.stageN {
				into.stageN[st] += from.stageN[st]
			}
		})
	}
	for _, f := range b.cands {
		halve(&f.drops, func(into, from *uint64) { *into += *from })
	}
	for _, c := range b.cpus {
		halve(c, func(into, from *cpuBin) {
			into.ticks.User += from.ticks.User
			into.ticks.System += from.ticks.System
			into.ticks.Softirq += from.ticks.Softirq
			into.ticks.IRQ += from.ticks.IRQ
			into.ticks.Idle += from.ticks.Idle
			into.sampled = into.sampled || from.sampled
			for v := range into.softNs {
				into.softNs[v] += from.softNs[v]
				into.coverNs[v] += from.coverNs[v]
			}
		})
	}
	for _, d := range b.devs {
		halve(d, func(into, from *devBin) {
			into.txSegs += from.txSegs
			into.txSkbs += from.txSkbs
			into.txNs += from.txNs
			into.rxSegs += from.rxSegs
			into.rxSkbs += from.rxSkbs
			into.rxNs += from.rxNs
		})
	}
}

// spread calls add for each bin [from, to) overlaps, with the overlap's
// share of the whole span.
func (b *Builder) spread(from, to int64, add func(i int, share float64, ns int64)) {
	if from < b.start && b.start != 0 {
		from = b.start
	}
	if to <= from {
		add(b.index(to), 1, 0)
		return
	}
	b.index(from)
	last := b.index(to)
	// index may have widened the bins for to: take first after it.
	first := b.index(from)
	for i := first; i <= last; i++ {
		lo := max(from, b.start+int64(i)*b.width)
		hi := min(to, b.start+int64(i+1)*b.width)
		if hi > lo {
			add(i, float64(hi-lo)/float64(to-from), hi-lo)
		}
	}
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// Add takes one event.
func (b *Builder) Add(ev *event.Event) {
	switch ev.Type {
	case event.TypeTCPConn:
		b.lifeChange(&ev.Conn)
	case event.TypeTCPSendlim:
		s := &ev.Sendlim
		f := b.flow(s.Sock, s.Netns, s.Local, s.Peer)
		bytes := float64(s.SentPkts) * float64(s.MSS)
		reason := int(s.Reason)
		if reason < len(f.runNs) && ev.Time > s.Begin {
			f.runNs[reason] += ev.Time - s.Begin
		}
		// The totals first: they decide whether the bins are kept.
		moved, before := f.moved(), f.score()
		b.spread(s.Begin, ev.Time, func(_ int, share float64, ns int64) {
			f.sentBytes += bytes * share
			if reason < event.SendlimCount {
				f.limitNs += ns
			}
		})
		b.consider(f, s.Begin, moved, before)
		if !f.kept {
			return
		}
		b.spread(s.Begin, ev.Time, func(i int, share float64, ns int64) {
			bin := f.bins.at(i)
			if reason < len(bin.limitNs) {
				bin.limitNs[reason] += ns
			}
			bin.sentBytes += bytes * share
		})
		bin := f.bins.at(b.index(ev.Time))
		bin.cwnd, bin.inFlight, bin.hasWindow = float64(s.Cwnd), float64(s.InFlight), true
	case event.TypeTCPRTT:
		r, s := &ev.RTT, &ev.Socket
		b.socketSample(b.flow(s.Sock, s.Netns, s.Local, s.Peer), ev.Time, r.BytesAcked, r.Cwnd, r.InFlight, r.SrttUs)
	case event.TypeTCPStage:
		f := b.kept(&ev.Socket, ev.Time)
		if f == nil {
			return
		}
		st := ev.Stage
		b.spread(ev.Begin, ev.Time, func(i int, share float64, _ int64) {
			bin := f.bins.at(i)
			for k := range bin.stageNs {
				bin.stageNs[k] += float64(st.Stage[k].SumNs) * share
				bin.stageN[k] += float64(st.Stage[k].Count) * share
			}
		})
	case event.TypeTCPCong:
		if f := b.kept(&ev.Socket, ev.Time); f != nil {
			bin := f.bins.at(b.index(ev.Time))
			bin.cwnd, bin.hasWindow = float64(ev.Cong.Cwnd), true
		}
	case event.TypeTCPRetrans:
		if f := b.kept(&ev.Socket, ev.Time); f != nil {
			f.bins.at(b.index(ev.Time)).retrans += uint64(ev.Retrans.Cnt)
		}
	case event.TypeSkbDrop:
		b.addDrops(ev.Socket.Local, ev.Socket.Peer, ev.Time, ev.Drop.Cnt)
	case event.TypeSoftirq:
		if ev.Softirq.Vec != 2 && ev.Softirq.Vec != 3 {
			return
		}
		c, v := b.cpu(int(ev.CPU)), ev.Softirq.Vec-2
		busy := float64(ev.Softirq.TimeNs)
		b.spread(ev.Begin, ev.Time, func(i int, share float64, ns int64) {
			bin := c.at(i)
			bin.softNs[v] += busy * share
			bin.coverNs[v] += float64(ns)
		})
	case event.TypeDevXmit, event.TypeDevRecv:
		d := &ev.Dev
		name, netns, _ := ev.Device()
		k := devKey{netns, string(name)}
		acc := b.devs[k]
		if acc == nil {
			acc = &bins[devBin]{}
			b.devs[k] = acc
		}
		segs, skbs := float64(d.Segs), float64(d.Skbs)
		tx := ev.Type == event.TypeDevXmit
		b.spread(ev.Begin, ev.Time, func(i int, share float64, ns int64) {
			bin := acc.at(i)
			if tx {
				bin.txSegs, bin.txSkbs, bin.txNs = bin.txSegs+segs*share, bin.txSkbs+skbs*share, bin.txNs+float64(ns)
			} else {
				bin.rxSegs, bin.rxSkbs, bin.rxNs = bin.rxSegs+segs*share, bin.rxSkbs+skbs*share, bin.rxNs+float64(ns)
			}
		})
	}
}

func (b *Builder) cpu(n int) *bins[cpuBin] {
	c := b.cpus[n]
	if c == nil {
		c = &bins[cpuBin]{}
		b.cpus[n] = c
	}
	return c
}

// ackedSample spreads the bytes acknowledged since the flow's previous
// sample over the time between them.
func (b *Builder) ackedSample(f *flowAcc, t int64, acked uint64) {
	if f.acked && acked >= f.lastAcked && t > f.lastAckedT {
		delta := float64(acked - f.lastAcked)
		moved, before := f.moved(), f.score()
		f.ackedBytes += delta
		b.consider(f, f.lastAckedT, moved, before)
		if f.kept {
			b.spread(f.lastAckedT, t, func(i int, share float64, _ int64) { f.bins.at(i).ackedBytes += delta * share })
		}
	}
	f.acked, f.lastAcked, f.lastAckedT = true, acked, t
}

// kept is the socket's flow when its bins are kept (while there is room,
// any flow's are), else nil; t extends the timeline either way.
func (b *Builder) kept(s *event.Socket, t int64) *flowAcc {
	b.index(t)
	f := b.flow(s.Sock, s.Netns, s.Local, s.Peer)
	b.consider(f, t, f.moved(), f.score())
	if f.kept {
		return f
	}
	return nil
}

// AddSocketSample takes one tcp_info reading of a socket (the doctor's
// poller): cumulative bytes acknowledged, cwnd and unacknowledged segments,
// smoothed RTT.
func (b *Builder) AddSocketSample(t int64, netns uint32, local, peer netip.AddrPort, bytesAcked uint64, cwnd, inFlight, srttUs uint32) {
	b.socketSample(b.flow(0, netns, local, peer), t, bytesAcked, cwnd, inFlight, srttUs)
}

func (b *Builder) socketSample(f *flowAcc, t int64, bytesAcked uint64, cwnd, inFlight, srttUs uint32) {
	b.ackedSample(f, t, bytesAcked)
	if !f.kept {
		b.index(t) // the timeline's end
		return
	}
	bin := f.bins.at(b.index(t))
	bin.cwnd, bin.inFlight, bin.hasWindow = float64(cwnd), float64(inFlight), true
	if srttUs > 0 {
		bin.srttSum += float64(srttUs)
		bin.srttN++
	}
}

// AddCPUSample takes one CPU's time since its previous sample, read at t.
func (b *Builder) AddCPUSample(t int64, cpu int, d CPUTicks) {
	bin := b.cpu(cpu).at(b.index(t))
	bin.ticks.User += d.User
	bin.ticks.System += d.System
	bin.ticks.Softirq += d.Softirq
	bin.ticks.IRQ += d.IRQ
	bin.ticks.Idle += d.Idle
	bin.sampled = true
}

// Build makes the timeline; netnsName names namespaces by inode.
func (b *Builder) Build(netnsName func(uint32) string) *Timeline {
	tl := &Timeline{Seconds: float64(b.end-b.start) / 1e9, BinSeconds: float64(b.width) / 1e9}
	if tl.Seconds <= 0 {
		tl.Seconds = tl.BinSeconds
	}
	center := func(i int) float64 { return (float64(i) + 0.5) * tl.BinSeconds }
	// Only candidates have bins; the rest are counted.
	others := b.otherFlows
	for _, acc := range b.flows {
		if !acc.kept && acc.moved() {
			others++
		}
	}
	for _, acc := range b.cands {
		f := b.buildFlow(acc, center)
		if f == nil {
			continue
		}
		if netnsName != nil {
			f.Netns = netnsName(acc.key.netns)
		}
		tl.Flows = append(tl.Flows, f)
	}
	sort.Slice(tl.Flows, func(i, j int) bool {
		if tl.Flows[i].Bytes != tl.Flows[j].Bytes {
			return tl.Flows[i].Bytes > tl.Flows[j].Bytes
		}
		return tl.Flows[i].Label() < tl.Flows[j].Label()
	})
	keep := 0
	for _, f := range tl.Flows {
		if keep < MaxFlows && f.Bytes >= minFlowShare*tl.Flows[0].Bytes {
			keep++
		}
	}
	tl.OtherFlows = others + len(tl.Flows) - keep
	tl.Flows = tl.Flows[:keep]
	for n, c := range b.cpus {
		tl.CPUs = append(tl.CPUs, buildCPU(n, c, center))
	}
	sort.Slice(tl.CPUs, func(i, j int) bool { return tl.CPUs[i].CPU < tl.CPUs[j].CPU })
	for k, acc := range b.devs {
		d := buildDevice(k, acc, center)
		if d.TotalSegs == 0 {
			continue
		}
		if netnsName != nil {
			d.Netns = netnsName(k.netns)
		}
		tl.Devices = append(tl.Devices, d)
	}
	sort.Slice(tl.Devices, func(i, j int) bool {
		if tl.Devices[i].TotalSegs != tl.Devices[j].TotalSegs {
			return tl.Devices[i].TotalSegs > tl.Devices[j].TotalSegs
		}
		return tl.Devices[i].Netns+tl.Devices[i].Name < tl.Devices[j].Netns+tl.Devices[j].Name
	})
	return tl
}

func (b *Builder) buildFlow(acc *flowAcc, center func(int) float64) *Flow {
	if !acc.moved() {
		return nil // a receiver, or a socket that moved nothing
	}
	f := &Flow{Local: acc.key.local, Peer: acc.key.peer}
	useAcked := acc.ackedBytes > 0
	f.Bytes, f.ThroughputFrom = acc.sentBytes, "segments sent (tcp_sendlim)"
	if useAcked {
		f.Bytes, f.ThroughputFrom = acc.ackedBytes, "bytes acknowledged (tcp_info)"
	}
	if acc.partial {
		f.Partial, f.DrawnFrom, f.UndrawnBytes = true, float64(max(acc.keptFrom-b.start, 0))/1e9, acc.undrawn
	}
	width := float64(b.width) / 1e9
	var open *Span
	for j, bin := range acc.bins.b {
		i := acc.bins.off + j
		t := center(i)
		bytes := bin.sentBytes
		if useAcked {
			bytes = bin.ackedBytes
		}
		f.Throughput = append(f.Throughput, Point{t, bytes * 8 / width})
		if bin.hasWindow {
			f.Cwnd = append(f.Cwnd, Point{t, bin.cwnd})
			f.InFlight = append(f.InFlight, Point{t, bin.inFlight})
		}
		if bin.srttN > 0 {
			f.SRTT = append(f.SRTT, Point{t, bin.srttSum / bin.srttN})
		}
		if bin.stageN != [wire.TcpStageSTAGE_MAX]float64{} {
			sp := StagePoint{T: t}
			for k, ns := range bin.stageNs {
				if bin.stageN[k] > 0 {
					sp.Us[k] = ns / bin.stageN[k] / 1e3
				}
			}
			f.StageUs = append(f.StageUs, sp)
		}
		if bin.retrans > 0 {
			f.Retrans = append(f.Retrans, Mark{t, bin.retrans})
		}
		// The bin's reason is the one that held most of its time.
		best, bestNs := -1, int64(0)
		for r, ns := range bin.limitNs {
			if ns > bestNs {
				best, bestNs = r, ns
			}
		}
		if best < 0 {
			open = nil
			continue
		}
		reason := event.SendlimReason(best).String()
		from, to := float64(i)*width, float64(i+1)*width
		if open != nil && open.Reason == reason && open.To == from {
			open.To = to
			continue
		}
		f.Limits = append(f.Limits, Span{from, to, reason})
		open = &f.Limits[len(f.Limits)-1]
	}
	// The shares stat's tables give, from the same runs.
	runNs := map[string]int64{}
	for r, ns := range acc.runNs {
		if ns > 0 {
			runNs[event.SendlimReason(r).String()] = ns
		}
	}
	if len(runNs) > 0 {
		f.LimitShare = analyze.LimitShares(runNs)
	}
	// The drops of the flow's data and of its ACKs.
	for j, n := range acc.drops.b {
		if n > 0 {
			f.Drops = append(f.Drops, Mark{center(acc.drops.off + j), n})
		}
	}
	return f
}

func buildCPU(n int, c *bins[cpuBin], center func(int) float64) *CPU {
	out := &CPU{CPU: n}
	for _, bin := range c.b {
		if bin.sampled {
			out.FromProcStat = true
			break
		}
	}
	for j, bin := range c.b {
		t := center(c.off + j)
		if out.FromProcStat {
			tk := bin.ticks
			total := tk.User + tk.System + tk.Softirq + tk.IRQ + tk.Idle
			if !bin.sampled || total <= 0 {
				continue
			}
			out.User = append(out.User, Point{t, tk.User / total})
			out.System = append(out.System, Point{t, tk.System / total})
			out.Softirq = append(out.Softirq, Point{t, tk.Softirq / total})
			out.IRQ = append(out.IRQ, Point{t, tk.IRQ / total})
			out.Idle = append(out.Idle, Point{t, tk.Idle / total})
			continue
		}
		share, covered := 0.0, false
		for v := range bin.softNs {
			if bin.coverNs[v] > 0 {
				share, covered = share+bin.softNs[v]/bin.coverNs[v], true
			}
		}
		if covered {
			out.Softirq = append(out.Softirq, Point{t, math.Min(1, share)})
		}
	}
	return out
}

func buildDevice(k devKey, acc *bins[devBin], center func(int) float64) *Device {
	d := &Device{Name: k.name}
	for j, bin := range acc.b {
		t := center(acc.off + j)
		if bin.txNs > 0 {
			d.TxPps = append(d.TxPps, Point{t, bin.txSegs / (bin.txNs / 1e9)})
			if bin.txSkbs > 0 {
				d.TxSegsSkb = append(d.TxSegsSkb, Point{t, bin.txSegs / bin.txSkbs})
			}
		}
		if bin.rxNs > 0 {
			d.RxPps = append(d.RxPps, Point{t, bin.rxSegs / (bin.rxNs / 1e9)})
			if bin.rxSkbs > 0 {
				d.RxSegsSkb = append(d.RxSegsSkb, Point{t, bin.rxSegs / bin.rxSkbs})
			}
		}
		d.TotalSegs += uint64(bin.txSegs + bin.rxSegs)
	}
	return d
}
