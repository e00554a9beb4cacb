package agent

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/event"
)

// MaxFlowSeries bounds the flows /metrics names: the busiest by bytes;
// the others are summed under local="other".
const MaxFlowSeries = 50

// totals are what the recording's events add up to since the agent
// started: the counters /metrics exposes. Flows and devices not seen for
// the window are forgotten, so memory stays bounded under churn.
type totals struct {
	mu      sync.Mutex
	window  time.Duration
	scale   map[event.Type]float64 // 1/sample share for sampled families
	names   map[uint32]string
	reasons map[uint32]string // drop reasons, from the recording kernel
	limits  map[flowKey]*flowTotals
	drops   map[dropKey]float64
	devs    map[devKey]*[2][2]float64 // [xmit, recv][skbs, segs]
	softirq map[[2]uint32]float64     // [cpu, vec] seconds
	events  map[string]float64
	lost    map[string]float64
	// latest tcp_info of the MaxFlowSeries sockets that moved the most data,
	// from the newest sample, and the sum of the others'.
	sockets     []socketReading
	socketsRest socketReading
	restCount   int
	// flowsDropped counts send-limit flows forgotten before the window ended
	// to stay within maxFlowTotals.
	flowsDropped uint64
}

// maxFlowTotals bounds the send-limit flows kept for /metrics (about
// 150 bytes each): a host that opens more within the window has its least
// recently seen ones forgotten early, and counted.
const maxFlowTotals = 1 << 16

type flowKey struct {
	netns       uint32
	local, peer netip.AddrPort
}

type flowTotals struct {
	seconds [event.SendlimCount]float64
	seen    time.Time
}

type dropKey struct {
	netns  uint32
	dev    string
	reason uint32
}

type devKey struct {
	netns uint32
	name  string
}

type socketReading struct {
	netns                   string
	local, peer             string
	acked, received, retran float64
	srtt                    float64
}

func newTotals(window time.Duration, sampled []string, share float64) *totals {
	t := &totals{window: window, scale: map[event.Type]float64{}, names: map[uint32]string{}, reasons: map[uint32]string{}, limits: map[flowKey]*flowTotals{},
		drops: map[dropKey]float64{}, devs: map[devKey]*[2][2]float64{}, softirq: map[[2]uint32]float64{},
		events: map[string]float64{}, lost: map[string]float64{}}
	for _, f := range event.Families {
		if slices.Contains(sampled, f.Name) && share > 0 {
			for _, k := range f.Events {
				t.scale[k.Type] = 1 / share
			}
		}
	}
	return t
}

func (t *totals) netns(inode uint32, name string) {
	t.mu.Lock()
	t.names[inode] = name
	t.mu.Unlock()
}

func (t *totals) dropReasons(names map[uint32]string) {
	t.mu.Lock()
	t.reasons = names
	t.mu.Unlock()
}

func (t *totals) loss(family uint16, n uint64) {
	t.mu.Lock()
	t.lost[event.FamilyName(family)] += float64(n)
	t.mu.Unlock()
}

func (t *totals) event(ev *event.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events[ev.Type.Action()]++
	scale := t.scale[ev.Type]
	if scale == 0 {
		scale = 1
	}
	switch ev.Type {
	case event.TypeTCPSendlim:
		s := &ev.Sendlim
		k := flowKey{s.Netns, unmap(s.Local), unmap(s.Peer)}
		f := t.limits[k]
		if f == nil {
			f = &flowTotals{}
			t.limits[k] = f
		}
		if int(s.Reason) < len(f.seconds) && ev.Time > s.Begin {
			f.seconds[s.Reason] += float64(ev.Time-s.Begin) / 1e9
		}
		f.seen = time.Now()
	case event.TypeSkbDrop:
		name, netns, _ := ev.Device()
		t.drops[dropKey{netns, string(name), ev.Drop.Reason}] += float64(ev.Drop.Cnt)
	case event.TypeDevXmit, event.TypeDevRecv:
		name, netns, _ := ev.Device()
		k := devKey{netns, string(name)}
		d := t.devs[k]
		if d == nil {
			d = &[2][2]float64{}
			t.devs[k] = d
		}
		dir := 0
		if ev.Type == event.TypeDevRecv {
			dir = 1
		}
		d[dir][0] += float64(ev.Dev.Skbs) * scale
		d[dir][1] += float64(ev.Dev.Segs) * scale
	case event.TypeSoftirq:
		t.softirq[[2]uint32{ev.CPU, ev.Softirq.Vec}] += float64(ev.Softirq.TimeNs) / 1e9 * scale
	}
}

// forget drops flows not seen for the window, and the least recently seen
// beyond maxFlowTotals.
func (t *totals) forget(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, f := range t.limits {
		if now.Sub(f.seen) > t.window {
			delete(t.limits, k)
		}
	}
	if len(t.limits) <= maxFlowTotals {
		return
	}
	seen := make([]time.Time, 0, len(t.limits))
	for _, f := range t.limits {
		seen = append(seen, f.seen)
	}
	slices.SortFunc(seen, func(a, b time.Time) int { return b.Compare(a) })
	cut := seen[maxFlowTotals-1]
	for k, f := range t.limits {
		if f.seen.Before(cut) {
			delete(t.limits, k)
			t.flowsDropped++
		}
	}
}

// readSockets keeps the newest tcp_info of the MaxFlowSeries sockets that
// moved the most data, and sums the others': only those are exposed, and
// a host's every socket would otherwise be held between samples.
func (t *totals) readSockets(s *observe.Sample) {
	type moved struct {
		netns           string
		local, peer     netip.AddrPort
		acked, received uint64
		retran, rtt     uint32
	}
	var all []moved
	for name, ns := range s.Namespaces {
		for _, k := range ns.Sockets {
			if k.BytesAcked == 0 && k.BytesReceived == 0 {
				continue
			}
			all = append(all, moved{name, k.Local, k.Peer, k.BytesAcked, k.BytesReceived, k.TotalRetrans, k.RTTus})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].acked+all[i].received > all[j].acked+all[j].received })
	var top []socketReading
	var rest socketReading
	for i, k := range all {
		if i >= MaxFlowSeries {
			rest.acked, rest.received, rest.retran = rest.acked+float64(k.acked), rest.received+float64(k.received), rest.retran+float64(k.retran)
			continue
		}
		top = append(top, socketReading{netns: k.netns, local: k.local.String(), peer: k.peer.String(),
			acked: float64(k.acked), received: float64(k.received), retran: float64(k.retran), srtt: float64(k.rtt) / 1e6})
	}
	t.mu.Lock()
	t.sockets, t.socketsRest, t.restCount = top, rest, len(all)-len(top)
	t.mu.Unlock()
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

var (
	flowLabels       = []string{"netns", "local", "peer"}
	descSendLimit    = prometheus.NewDesc("skbtrace_flow_send_limit_seconds_total", "Time the sender spent per send-limit reason (tcp_sendlim runs).", append(flowLabels, "reason"), nil)
	descBytesAcked   = prometheus.NewDesc("skbtrace_flow_bytes_acked_total", "Bytes the peer acknowledged (tcp_info, since the connection began).", flowLabels, nil)
	descBytesRecv    = prometheus.NewDesc("skbtrace_flow_bytes_received_total", "Bytes received (tcp_info, since the connection began).", flowLabels, nil)
	descRetrans      = prometheus.NewDesc("skbtrace_flow_retransmits_total", "Segments retransmitted (tcp_info, since the connection began).", flowLabels, nil)
	descSRTT         = prometheus.NewDesc("skbtrace_flow_srtt_seconds", "Smoothed RTT (tcp_info).", flowLabels, nil)
	descDrops        = prometheus.NewDesc("skbtrace_drops_total", "Packets dropped, by device and drop reason (skb_drop).", []string{"netns", "dev", "reason"}, nil)
	descDevSkbs      = prometheus.NewDesc("skbtrace_device_skbs_total", "skbs at transmit or receive (dev_xmit, dev_recv; sampled families scaled to the whole time).", []string{"netns", "dev", "dir"}, nil)
	descDevSegs      = prometheus.NewDesc("skbtrace_device_segments_total", "Segments on the wire at transmit or receive: with skbs, segments per skb (TSO/GSO, GRO).", []string{"netns", "dev", "dir"}, nil)
	descSoftirq      = prometheus.NewDesc("skbtrace_cpu_net_softirq_seconds_total", "Network softirq time per CPU (softirq family; sampled, scaled to the whole time).", []string{"cpu", "vec"}, nil)
	descEvents       = prometheus.NewDesc("skbtrace_agent_events_total", "Events the agent recorded, by type.", []string{"type"}, nil)
	descLost         = prometheus.NewDesc("skbtrace_agent_lost_events_total", "Events the kernel could not queue, by family.", []string{"family"}, nil)
	descBPF          = prometheus.NewDesc("skbtrace_agent_bpf_run_seconds_total", "Time the agent's BPF programs ran (0 unless kernel.bpf_stats_enabled=1).", nil, nil)
	descWindowBytes  = prometheus.NewDesc("skbtrace_agent_window_bytes", "Bytes of recent trace the agent holds.", nil, nil)
	descWindowEvicts = prometheus.NewDesc("skbtrace_agent_window_evictions_total", "Trace blocks dropped before the window ended, to stay within the memory bound.", nil, nil)
	descSockReadings = prometheus.NewDesc("skbtrace_agent_socket_readings", "Socket readings (tcp_info) the agent holds for evidence.", nil, nil)
	descSockDropped  = prometheus.NewDesc("skbtrace_agent_socket_readings_dropped_total", "Socket readings given up before the window ended, to stay within the memory bound.", nil, nil)
	descFlowsDropped = prometheus.NewDesc("skbtrace_agent_flows_dropped_total", "Send-limit flows forgotten before the window ended, to stay within the memory bound.", nil, nil)
)

// collector exposes the totals, the newest sockets and the agent's own cost.
type collector struct {
	t     *totals
	store *store
	bpf   func() time.Duration
	// socks says how many socket readings are held and were given up.
	socks func() (held int, dropped uint64)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	// The store's lock first and alone: the store holds it while it hands
	// events to the totals, which take theirs.
	_, bytes, dropped, _ := c.store.stats()
	var readings int
	var readingsDropped uint64
	if c.socks != nil {
		readings, readingsDropped = c.socks()
	}
	t := c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	name := func(inode uint32) string {
		if n := t.names[inode]; n != "" {
			return n
		}
		return strconv.FormatUint(uint64(inode), 10)
	}
	// The busiest flows by send-limit time keep their names.
	type flow struct {
		k     flowKey
		total float64
	}
	var flows []flow
	for k, f := range t.limits {
		var sum float64
		for _, s := range f.seconds {
			sum += s
		}
		flows = append(flows, flow{k, sum})
	}
	sort.Slice(flows, func(i, j int) bool { return flows[i].total > flows[j].total })
	var other [event.SendlimCount]float64
	for i, f := range flows {
		secs := t.limits[f.k].seconds
		if i >= MaxFlowSeries {
			for r := range secs {
				other[r] += secs[r]
			}
			continue
		}
		for r, s := range secs {
			if s > 0 {
				ch <- prometheus.MustNewConstMetric(descSendLimit, prometheus.CounterValue, s, name(f.k.netns), f.k.local.String(), f.k.peer.String(), event.SendlimReason(r).String())
			}
		}
	}
	for r, s := range other {
		if s > 0 {
			ch <- prometheus.MustNewConstMetric(descSendLimit, prometheus.CounterValue, s, "", "other", "other", event.SendlimReason(r).String())
		}
	}
	for _, s := range t.sockets {
		ch <- prometheus.MustNewConstMetric(descBytesAcked, prometheus.CounterValue, s.acked, s.netns, s.local, s.peer)
		ch <- prometheus.MustNewConstMetric(descBytesRecv, prometheus.CounterValue, s.received, s.netns, s.local, s.peer)
		ch <- prometheus.MustNewConstMetric(descRetrans, prometheus.CounterValue, s.retran, s.netns, s.local, s.peer)
		ch <- prometheus.MustNewConstMetric(descSRTT, prometheus.GaugeValue, s.srtt, s.netns, s.local, s.peer)
	}
	if rest := t.socketsRest; t.restCount > 0 {
		ch <- prometheus.MustNewConstMetric(descBytesAcked, prometheus.CounterValue, rest.acked, "", "other", "other")
		ch <- prometheus.MustNewConstMetric(descBytesRecv, prometheus.CounterValue, rest.received, "", "other", "other")
		ch <- prometheus.MustNewConstMetric(descRetrans, prometheus.CounterValue, rest.retran, "", "other", "other")
	}
	for k, n := range t.drops {
		reason := t.reasons[k.reason]
		if reason == "" {
			reason = strconv.FormatUint(uint64(k.reason), 10)
		}
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, n, name(k.netns), k.dev, reason)
	}
	for k, d := range t.devs {
		for dir, label := range []string{"xmit", "recv"} {
			if d[dir][0] > 0 {
				ch <- prometheus.MustNewConstMetric(descDevSkbs, prometheus.CounterValue, d[dir][0], name(k.netns), k.name, label)
				ch <- prometheus.MustNewConstMetric(descDevSegs, prometheus.CounterValue, d[dir][1], name(k.netns), k.name, label)
			}
		}
	}
	for k, s := range t.softirq {
		vec := map[uint32]string{2: "net_tx", 3: "net_rx"}[k[1]]
		ch <- prometheus.MustNewConstMetric(descSoftirq, prometheus.CounterValue, s, strconv.Itoa(int(k[0])), vec)
	}
	for typ, n := range t.events {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, n, typ)
	}
	for fam, n := range t.lost {
		ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, n, fam)
	}
	if c.bpf != nil {
		ch <- prometheus.MustNewConstMetric(descBPF, prometheus.CounterValue, c.bpf().Seconds())
	}
	ch <- prometheus.MustNewConstMetric(descWindowBytes, prometheus.GaugeValue, float64(bytes))
	ch <- prometheus.MustNewConstMetric(descWindowEvicts, prometheus.CounterValue, float64(dropped))
	if c.socks != nil {
		ch <- prometheus.MustNewConstMetric(descSockReadings, prometheus.GaugeValue, float64(readings))
		ch <- prometheus.MustNewConstMetric(descSockDropped, prometheus.CounterValue, float64(readingsDropped))
	}
	ch <- prometheus.MustNewConstMetric(descFlowsDropped, prometheus.CounterValue, float64(t.flowsDropped))
}
