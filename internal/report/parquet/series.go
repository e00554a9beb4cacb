package parquet

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
)

// intervalNs is the width of the series' intervals. They are aligned to
// whole wall-clock seconds since the Unix epoch, so that the series of
// hosts whose clocks agree line up row for row.
const intervalNs = int64(time.Second)

func intervalOf(t int64) int64 {
	i := t / intervalNs
	if t%intervalNs < 0 {
		i--
	}
	return i
}

// span is what an event accounts for over time: the wall-clock ns
// [from, to) of a send-limit run or an aggregation interval, spread over
// the intervals it overlaps in proportion; a span of no length falls
// wholly in the interval of to.
type span struct{ from, to int64 }

func (s span) first() int64 {
	if s.to <= s.from {
		return intervalOf(s.to)
	}
	return intervalOf(s.from)
}

func (s span) last() int64 {
	if s.to <= s.from {
		return intervalOf(s.to)
	}
	return intervalOf(s.to - 1)
}

// share is the span's overlap with interval i: in ns and as a fraction of the span.
func (s span) share(i int64) (int64, float64) {
	if s.to <= s.from {
		return 0, 1
	}
	lo, hi := max(s.from, i*intervalNs), min(s.to, (i+1)*intervalNs)
	return hi - lo, float64(hi-lo) / float64(s.to-s.from)
}

// flowID is a flow as its events name it.
type flowID struct {
	sock        uint64
	netns       uint32
	local, peer netip.AddrPort
}

type flowAcc struct {
	id flowID
	// The previous tcp_rtt sample's totals: the bytes since then are spread
	// over the time between the two samples.
	sampled                 bool
	lastAcked, lastReceived uint64
	lastSample              int64
	// The latest send-limit run's begin: the next begins after it.
	ran      bool
	lastRun  int64
	active   bool // bins held, listed in series.active
	bins     []flowBin
	firstBin int64 // the interval of bins[0]
}

// at is the flow's bin of an interval, made when missing; an interval
// before the first held (a late event's, already written) is held anew.
func (f *flowAcc) at(interval int64) *flowBin {
	if len(f.bins) == 0 {
		f.firstBin = interval
	}
	if interval < f.firstBin {
		grown := make([]flowBin, f.firstBin-interval+int64(len(f.bins)))
		copy(grown[f.firstBin-interval:], f.bins)
		f.bins, f.firstBin = grown, interval
	}
	for interval-f.firstBin >= int64(len(f.bins)) {
		f.bins = append(f.bins, flowBin{})
	}
	b := &f.bins[interval-f.firstBin]
	b.used = true
	return b
}

// horizon is the first interval a flow's future events may still add to:
// the bytes of its next tcp_rtt sample are spread from its last one, its
// next run begins after its last began, and any other event lands at its
// own time, a second of disorder allowed.
func (f *flowAcc) horizon(now int64) int64 {
	h := now - 1
	if f.sampled {
		h = min(h, intervalOf(f.lastSample))
	}
	if f.ran {
		h = min(h, intervalOf(f.lastRun))
	}
	return h
}

type devID struct {
	name  [16]int8
	netns uint32
}

// binKey is one series' interval: series indexes flows or devs.
type binKey struct {
	series   int32
	interval int64
}

type flowBin struct {
	used                  bool // an interval the flow did something in
	limitNs               [event.SendlimCount]int64
	segsSent, bytesSent   float64
	bytesAcked, bytesRecv float64
	retrans               int64
	cwnd, inFlight        int64 // the last reported in the interval
	hasWindow             bool
	srttSumUs, rttSamples int64
}

// devBin counts per direction: 0 is transmit, 1 receive.
type devBin struct {
	skbs, segs, bytes, coveredNs [2]float64
}

// series accumulates the per-interval series of flows and devices. A
// flow's bins are held until no later event can add to them (its horizon)
// and then written: memory grows with the flows, not with their seconds
// (a 684 MB trace took 1.97 GB, issue 45). Devices, few, hold one bin per
// second that saw activity.
type series struct {
	// start is the recording's: spans are counted from it at the earliest,
	// so that no begin time before it (a run's that wrapped around the boot
	// clock) walks the series back over years of empty intervals.
	start   int64
	flowIdx map[flowID]int32
	flows   []flowAcc
	// bySock is each socket's latest flow, whose tcp_rtt totals restart
	// with the socket's new life.
	bySock map[uint64]int32
	// active are the flows holding bins, in the order they took them; now
	// is the latest event's interval, flushed the one last flushed at.
	active       []int32
	now, flushed int64
	spare        [][]flowBin // the arrays of flows that hold no bins
	devIdx       map[devID]int32
	devs         []devID
	devBins      map[binKey]int32
	dbins        []devBin
}

func newSeries(start int64) *series {
	return &series{start: start, flowIdx: map[flowID]int32{}, bySock: map[uint64]int32{},
		devIdx: map[devID]int32{}, devBins: map[binKey]int32{}}
}

func (s *series) flow(sock *event.Socket) int32 {
	id := flowID{sock.Sock, sock.Netns, sock.Local, sock.Peer}
	i, ok := s.flowIdx[id]
	if !ok {
		i = int32(len(s.flows))
		s.flowIdx[id] = i
		s.flows = append(s.flows, flowAcc{id: id})
		s.bySock[sock.Sock] = i
	}
	return i
}

// flowBin is valid until the next call: the bins may move as they grow.
func (s *series) flowBin(flow int32, interval int64) *flowBin {
	f := &s.flows[flow]
	if !f.active {
		f.active = true
		s.active = append(s.active, flow)
		if n := len(s.spare); n > 0 {
			f.bins, s.spare = s.spare[n-1], s.spare[:n-1]
		}
	}
	return f.at(interval)
}

// flush writes the bins no later event can add to; all writes every bin,
// at the end. emit takes them flow by flow, in time order.
func (s *series) flush(all bool, emit func(f *flowAcc, interval int64, b *flowBin) error) error {
	s.flushed = s.now
	kept := s.active[:0]
	for _, i := range s.active {
		f := &s.flows[i]
		h := f.horizon(s.now)
		n := 0
		for n < len(f.bins) && (all || f.firstBin+int64(n) < h) {
			if b := &f.bins[n]; b.used {
				if err := emit(f, f.firstBin+int64(n), b); err != nil {
					return err
				}
			}
			n++
		}
		// The bins left move to the front; a flow with none left gives its
		// array back for the next flow to take (rows point into none).
		f.firstBin += int64(n)
		f.bins = f.bins[:copy(f.bins, f.bins[n:])]
		if len(f.bins) == 0 {
			s.spare = append(s.spare, f.bins)
			f.bins, f.active = nil, false
			continue
		}
		kept = append(kept, i)
	}
	s.active = kept
	return nil
}

func (s *series) devBin(dev int32, interval int64) *devBin {
	k := binKey{dev, interval}
	i, ok := s.devBins[k]
	if !ok {
		i = int32(len(s.dbins))
		s.devBins[k] = i
		s.dbins = append(s.dbins, devBin{})
	}
	return &s.dbins[i]
}

// add takes one event; the semantics follow analyze/timeline's.
func (s *series) add(ev *event.Event) {
	s.now = max(s.now, intervalOf(ev.Time))
	switch ev.Type {
	case event.TypeTCPConn:
		// A new life's bytes acknowledged count from 0 again.
		if c := &ev.Conn; c.Old == tcpClose || c.Old == event.TCPListen && c.New != tcpClose {
			if i, ok := s.bySock[c.Sock]; ok {
				s.flows[i].sampled = false
			}
		}
	case event.TypeTCPSendlim:
		l := &ev.Sendlim
		f := s.flow(&l.Socket)
		s.flows[f].ran, s.flows[f].lastRun = true, max(s.flows[f].lastRun, l.Begin)
		sp := span{max(l.Begin, s.start), ev.Time}
		segs := float64(l.SentPkts)
		bytes := segs * float64(l.MSS)
		for i := sp.first(); i <= sp.last(); i++ {
			ns, frac := sp.share(i)
			b := s.flowBin(f, i)
			if int(l.Reason) < event.SendlimCount {
				b.limitNs[l.Reason] += ns
			}
			b.segsSent += segs * frac
			b.bytesSent += bytes * frac
		}
		b := s.flowBin(f, intervalOf(ev.Time))
		b.cwnd, b.inFlight, b.hasWindow = int64(l.Cwnd), int64(l.InFlight), true
	case event.TypeTCPRTT:
		r := &ev.RTT
		f := s.flow(&ev.Socket)
		if acc := s.flows[f]; acc.sampled && r.BytesAcked >= acc.lastAcked && r.BytesReceived >= acc.lastReceived {
			acked, recv := float64(r.BytesAcked-acc.lastAcked), float64(r.BytesReceived-acc.lastReceived)
			sp := span{max(acc.lastSample, s.start), ev.Time}
			for i := sp.first(); i <= sp.last(); i++ {
				_, frac := sp.share(i)
				b := s.flowBin(f, i)
				b.bytesAcked += acked * frac
				b.bytesRecv += recv * frac
			}
		}
		acc := &s.flows[f]
		acc.sampled, acc.lastAcked, acc.lastReceived, acc.lastSample = true, r.BytesAcked, r.BytesReceived, ev.Time
		b := s.flowBin(f, intervalOf(ev.Time))
		b.cwnd, b.inFlight, b.hasWindow = int64(r.Cwnd), int64(r.InFlight), true
		b.srttSumUs += int64(r.SrttUs)
		b.rttSamples++
	case event.TypeTCPCong:
		b := s.flowBin(s.flow(&ev.Socket), intervalOf(ev.Time))
		b.cwnd = int64(ev.Cong.Cwnd)
	case event.TypeTCPRetrans:
		// Counted where the report ends, as the timeline does: a report
		// folds at most one recording interval.
		s.flowBin(s.flow(&ev.Socket), intervalOf(ev.Time)).retrans += int64(ev.Retrans.Cnt)
	case event.TypeDevXmit, event.TypeDevRecv:
		d := &ev.Dev
		id := devID{d.Name, d.Netns}
		dev, ok := s.devIdx[id]
		if !ok {
			dev = int32(len(s.devs))
			s.devIdx[id] = dev
			s.devs = append(s.devs, id)
		}
		dir := 0
		if ev.Type == event.TypeDevRecv {
			dir = 1
		}
		sp := span{max(ev.Begin, s.start), ev.Time}
		for i := sp.first(); i <= sp.last(); i++ {
			ns, frac := sp.share(i)
			b := s.devBin(dev, i)
			b.skbs[dir] += float64(d.Skbs) * frac
			b.segs[dir] += float64(d.Segs) * frac
			b.bytes[dir] += float64(d.Bytes) * frac
			b.coveredNs[dir] += float64(ns)
		}
	}
}

// tcpClose is TCP_CLOSE: a state change from it starts a socket's life.
const tcpClose event.TCPState = 7

// sortedKeys are a bin map's keys by series, then time.
func sortedKeys(m map[binKey]int32) []binKey {
	keys := make([]binKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b binKey) int {
		return cmp.Or(cmp.Compare(a.series, b.series), cmp.Compare(a.interval, b.interval))
	})
	return keys
}

// reasons holds one value per send-limit reason, written as a Parquet group
// (a STRUCT in SQL: limit_ns.sndbuf).
type reasons[V int64 | float64] struct {
	OK       V `parquet:"ok"`
	Cwnd     V `parquet:"cwnd"`
	Swnd     V `parquet:"swnd"`
	Nagle    V `parquet:"nagle"`
	Pacing   V `parquet:"pacing"`
	TSQ      V `parquet:"tsq"`
	Sndbuf   V `parquet:"sndbuf"`
	App      V `parquet:"app"`
	Cork     V `parquet:"cork"`
	XmitFail V `parquet:"xmit_fail"`
	RTO      V `parquet:"rto"`
}

func (r *reasons[V]) set(v *[event.SendlimCount]V) {
	r.OK, r.Cwnd, r.Swnd, r.Nagle = v[event.SendlimOK], v[event.SendlimCwnd], v[event.SendlimSwnd], v[event.SendlimNagle]
	r.Pacing, r.TSQ, r.Sndbuf, r.App = v[event.SendlimPacing], v[event.SendlimTSQ], v[event.SendlimSndbuf], v[event.SendlimApp]
	r.Cork, r.XmitFail, r.RTO = v[event.SendlimCork], v[event.SendlimXmitFail], v[event.SendlimRTO]
}

// byName takes the values stat reports by reason name.
func byName[V int64 | float64 | uint64, W int64 | float64](m map[string]V) *[event.SendlimCount]W {
	var out [event.SendlimCount]W
	for name, v := range m {
		if r, ok := event.ParseSendlimReason(name); ok {
			out[r] = W(v)
		}
	}
	return &out
}

type flowSeriesRow struct {
	meta
	IntervalStartNs int64          `parquet:"interval_start_ns,delta"`
	Sock            string         `parquet:"sock,dict"`
	Local           string         `parquet:"local,dict"`
	Peer            string         `parquet:"peer,dict"`
	Netns           int64          `parquet:"netns"`
	NetnsName       string         `parquet:"netns_name,dict"`
	SegsSent        float64        `parquet:"segs_sent"`
	BytesSent       float64        `parquet:"bytes_sent"`
	BytesAcked      float64        `parquet:"bytes_acked"`
	BytesReceived   float64        `parquet:"bytes_received"`
	LimitNs         reasons[int64] `parquet:"limit_ns"`
	RetransSegs     int64          `parquet:"retrans_segs"`
	// Null where no event of the interval reported them; they point into
	// the row (the bins are reused once written), so a row costs no
	// allocation.
	Cwnd           *int64   `parquet:"cwnd"`
	InFlight       *int64   `parquet:"inflight"`
	SrttAvgUs      *float64 `parquet:"srtt_avg_us"`
	RTTSamples     int64    `parquet:"rtt_samples"`
	srtt           float64
	cwnd, inFlight int64
}

type deviceSeriesRow struct {
	meta
	IntervalStartNs int64   `parquet:"interval_start_ns,delta"`
	Dev             string  `parquet:"dev,dict"`
	Netns           int64   `parquet:"netns"`
	NetnsName       string  `parquet:"netns_name,dict"`
	XmitSkbs        float64 `parquet:"xmit_skbs"`
	XmitSegs        float64 `parquet:"xmit_segs"`
	XmitBytes       float64 `parquet:"xmit_bytes"`
	// Null where the direction reported nothing in the interval (the
	// non-null values are never zero).
	XmitSegsPerSkb float64 `parquet:"xmit_segs_per_skb,optional"`
	XmitPPS        float64 `parquet:"xmit_packets_per_s,optional"`
	RecvSkbs       float64 `parquet:"recv_skbs"`
	RecvSegs       float64 `parquet:"recv_segs"`
	RecvBytes      float64 `parquet:"recv_bytes"`
	RecvSegsPerSkb float64 `parquet:"recv_segs_per_skb,optional"`
	RecvPPS        float64 `parquet:"recv_packets_per_s,optional"`
}

// flushSeries writes the flows' finished seconds, once a second of the
// trace, or every second held (all, at Close).
func (x *Exporter) flushSeries(all bool) error {
	if !all && x.series.now <= x.series.flushed {
		return nil
	}
	if x.flowSeries == nil {
		t, err := createTable[flowSeriesRow](x.dir, flowSeriesTable)
		if err != nil {
			return err
		}
		x.flowSeries = t
	}
	return x.series.flush(all, x.writeFlowBin)
}

func (x *Exporter) writeFlowBin(f *flowAcc, interval int64, b *flowBin) error {
	r, err := x.flowSeries.next()
	if err != nil {
		return err
	}
	id := &f.id
	r.meta, r.IntervalStartNs = x.meta, interval*intervalNs
	r.Sock, r.Local, r.Peer = x.str.hex(id.sock), x.str.addr(id.local), x.str.addr(id.peer)
	r.Netns, r.NetnsName = int64(id.netns), x.sum.Names.NetnsName(id.netns)
	r.SegsSent, r.BytesSent, r.BytesAcked, r.BytesReceived = b.segsSent, b.bytesSent, b.bytesAcked, b.bytesRecv
	r.LimitNs.set(&b.limitNs)
	r.RetransSegs, r.RTTSamples = b.retrans, b.rttSamples
	if b.hasWindow {
		r.cwnd, r.inFlight = b.cwnd, b.inFlight
		r.Cwnd, r.InFlight = &r.cwnd, &r.inFlight
	}
	if b.rttSamples > 0 {
		r.srtt = float64(b.srttSumUs) / float64(b.rttSamples)
		r.SrttAvgUs = &r.srtt
	}
	return nil
}

func (x *Exporter) writeDeviceSeries() error {
	s := x.series
	t, err := createTable[deviceSeriesRow](x.dir, deviceSeriesTable)
	if err != nil {
		return err
	}
	perSkb := func(segs, skbs float64) float64 {
		if skbs == 0 {
			return 0
		}
		return segs / skbs
	}
	pps := func(segs, ns float64) float64 {
		if ns == 0 {
			return 0
		}
		return segs / (ns / 1e9)
	}
	for _, k := range sortedKeys(s.devBins) {
		r, err := t.next()
		if err != nil {
			t.close()
			return err
		}
		b, id := &s.dbins[s.devBins[k]], &s.devs[k.series]
		r.meta, r.IntervalStartNs = x.meta, k.interval*intervalNs
		r.Dev, r.Netns, r.NetnsName = x.str.name(&id.name), int64(id.netns), x.sum.Names.NetnsName(id.netns)
		r.XmitSkbs, r.XmitSegs, r.XmitBytes = b.skbs[0], b.segs[0], b.bytes[0]
		r.XmitSegsPerSkb, r.XmitPPS = perSkb(b.segs[0], b.skbs[0]), pps(b.segs[0], b.coveredNs[0])
		r.RecvSkbs, r.RecvSegs, r.RecvBytes = b.skbs[1], b.segs[1], b.bytes[1]
		r.RecvSegsPerSkb, r.RecvPPS = perSkb(b.segs[1], b.skbs[1]), pps(b.segs[1], b.coveredNs[1])
	}
	return t.close()
}
