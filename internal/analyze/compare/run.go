package compare

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// Kind is what a compared file holds.
type Kind string

// The kinds compare takes.
const (
	KindProfile Kind = "profile"
	KindTrace   Kind = "trace"
	KindReport  Kind = "doctor report"
)

// Run is one side of a comparison: what compare measures of a file, whatever its kind.
type Run struct {
	Kind Kind
	Name string
	// Seconds is the run's span: a profile's window, a report's observation,
	// a trace's first to last event (leaving out a flight recorder's gaps).
	// Counts without a span of their own (retransmits, drops) are per
	// second of it.
	Seconds float64
	// TrafficSeconds, when set, is the part of Seconds the traffic counts
	// cover: a trace's device counters run only in its sampled windows
	// (record --sample), and their totals stand for that time alone.
	TrafficSeconds float64
	// TrafficShare, when set, is the part of each interval the device
	// counters ran (record --sample): Packets and Bytes are then an
	// estimate from a few windows, good for a long steady run only.
	TrafficShare float64
	// TCPSeconds, when set, is the time the TCP flows moved their bytes in,
	// as iperf3 times its stream: a recording also holds the setup before
	// and the teardown after.
	TCPSeconds float64
	// Traffic: packets and bytes on the wire in the window (HasTraffic when counted).
	HasTraffic     bool
	Packets, Bytes uint64
	// Skbs carried the packets: fewer than packets when TSO/GSO or GRO work.
	Skbs uint64
	// TCPBytes is the bytes TCP flows delivered (acknowledged), when known.
	TCPBytes uint64
	// CPUNs is the busy CPU time of the window (profiles, doctor reports).
	HasCPU bool
	CPUNs  float64
	// Phases is the busy CPU time per network-stack phase (profiles).
	Phases map[profile.Phase]float64
	// Stacks are folded stacks and the CPU time each took (profiles).
	Stacks map[string]float64
	// Limits are the shares of the senders' time per tcp_sendlim reason.
	Limits  map[string]float64
	Drops   map[string]uint64 // per "reason at location"
	Retrans uint64
	// Settings are the host's, when the file carries them.
	Settings *host.Settings
	// Workload names what ran: the command, or the busiest processes.
	Workload []string
}

// Rate is a per-second rate of the run's span, 0 without one.
func (r *Run) Rate(n float64) float64 { return per(n, r.Seconds) }

// TrafficRate is a per-second rate of the traffic counts (Packets, Bytes).
func (r *Run) TrafficRate(n float64) float64 {
	if r.TrafficSeconds > 0 {
		return per(n, r.TrafficSeconds)
	}
	return r.Rate(n)
}

// Goodput is TCPBytes in bits per second of the time the flows moved them.
func (r *Run) Goodput() float64 {
	if r.TCPSeconds > 0 {
		return per(8*float64(r.TCPBytes), r.TCPSeconds)
	}
	return r.Rate(8 * float64(r.TCPBytes))
}

func per(n, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return n / seconds
}

// ReportReader reads a doctor report (JSON) as a run. The doctor provides it
// (doctor.ReadReport): compare sits below the doctor in the pipeline.
type ReportReader func(name string, in io.Reader) (*Run, error)

// Load reads a profile (pprof from skbtrace profile), a trace or, with
// reports, a doctor report (JSON), telling them apart by their first bytes.
func Load(name string, in io.Reader, reports ReportReader) (*Run, error) {
	br := bufio.NewReaderSize(in, 1<<20)
	head, _ := br.Peek(8)
	switch {
	case len(head) == 0:
		return nil, fmt.Errorf("%s is empty", name)
	case bytes.HasPrefix(head, []byte("SKBTRACE")):
		return loadTrace(name, br)
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return loadProfile(name, br)
	case bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("{")) && reports != nil:
		return reports(name, br)
	case isCapture(head):
		return nil, fmt.Errorf("%s is a packet capture: compare takes profiles, traces or doctor reports (analyze captures with skbtrace pcap)", name)
	}
	return nil, fmt.Errorf("%s is not a profile (pprof from skbtrace profile), a trace or a doctor report (JSON)", name)
}

func isCapture(h []byte) bool {
	if len(h) < 4 {
		return false
	}
	for _, m := range [][]byte{{0xd4, 0xc3, 0xb2, 0xa1}, {0xa1, 0xb2, 0xc3, 0xd4}, {0x4d, 0x3c, 0xb2, 0xa1}, {0xa1, 0xb2, 0x3c, 0x4d}, {0x0a, 0x0d, 0x0d, 0x0a}} {
		if bytes.Equal(h[:4], m) {
			return true
		}
	}
	return false
}

// FromProfile measures a profile.
func FromProfile(name string, p *profile.Profile) *Run {
	r := &Run{Kind: KindProfile, Name: name, Seconds: p.Meta.Seconds, Settings: p.Meta.Settings,
		Phases: map[profile.Phase]float64{}, Stacks: map[string]float64{}, HasCPU: true}
	ns := p.NsPerSample()
	for _, s := range p.Samples {
		if s.Phase != profile.PhaseIdle {
			r.Phases[s.Phase] += float64(s.Count) * ns
			r.CPUNs += float64(s.Count) * ns
		}
	}
	for k, n := range p.Stacks(true) {
		r.Stacks[k] = float64(n) * ns
	}
	if t := p.Meta.Traffic; t.Counted {
		r.HasTraffic, r.Packets, r.Bytes, r.Skbs = true, t.Packets(), t.Bytes(), t.Skbs()
	}
	if len(p.Meta.Command) > 0 {
		r.Workload = []string{filepath.Base(p.Meta.Command[0])}
	} else {
		for _, c := range p.Comms() {
			if c.Share >= 0.1 {
				r.Workload = append(r.Workload, c.Comm)
			}
		}
	}
	return r
}

func loadProfile(name string, in io.Reader) (*Run, error) {
	p, err := profile.ReadPprof(in)
	if err != nil {
		if errors.Is(err, profile.ErrNotSkbtrace) {
			return nil, fmt.Errorf("%s is %w", name, err)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return FromProfile(name, p), nil
}

func loadTrace(name string, in io.Reader) (*Run, error) {
	tr, err := trace.NewReader(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sum := analyze.NewSummary()
	st := analyze.NewStat()
	sum.OnWindow = st.Gap
	if err := analyze.Replay(tr, &event.Filter{}, sum, func(ev *event.Event) error { st.Add(ev); return nil }); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return FromTrace(name, st, sum), nil
}

// FromTrace measures a trace's statistics.
func FromTrace(name string, st *analyze.Stat, sum *analyze.Summary) *Run {
	r := &Run{Kind: KindTrace, Name: name, Limits: map[string]float64{}, Drops: map[string]uint64{}, Settings: sum.Settings,
		Seconds: st.Seconds()}
	limitNs := map[string]float64{}
	var totalNs float64
	ports := map[string]bool{}
	for _, c := range st.Connections {
		r.TCPBytes += c.BytesAcked
		r.Retrans += c.RetransSegs
		if sends(c) {
			for reason, ns := range c.LimitNs() {
				limitNs[reason] += float64(ns)
				totalNs += float64(ns)
			}
		}
		for _, ep := range []string{c.Local, c.Peer} {
			if i := strings.LastIndexByte(ep, ':'); i >= 0 && listeningPort.MatchString(ep[i+1:]) {
				ports[ep[i+1:]] = true
			}
		}
	}
	r.TCPSeconds = min(flowSeconds(st.Connections, r.TCPBytes), r.Seconds)
	for k, v := range limitNs {
		r.Limits[k] = v / totalNs
	}
	var tx, rx, txBytes, rxBytes, txSkbs, rxSkbs uint64
	for _, d := range st.Devices {
		tx += d.Xmit.Segs
		rx += d.Recv.Segs
		txBytes += d.Xmit.Bytes
		rxBytes += d.Recv.Bytes
		txSkbs += d.Xmit.Skbs
		rxSkbs += d.Recv.Skbs
		r.TrafficSeconds = max(r.TrafficSeconds, d.Xmit.Seconds, d.Recv.Seconds)
	}
	if tx+rx > 0 {
		r.HasTraffic = true
		if s := sum.Sample; s != nil && (slices.Contains(s.Families, "dev_xmit") || slices.Contains(s.Families, "dev_recv")) {
			r.TrafficShare = s.Share
		}
		r.Packets, r.Bytes, r.Skbs = tx, txBytes, txSkbs
		if rx > tx {
			r.Packets, r.Bytes, r.Skbs = rx, rxBytes, rxSkbs
		}
	}
	for _, d := range st.Drops {
		reason := sum.Names.DropReason(d.Reason)
		if reason == "" {
			reason = fmt.Sprint(d.Reason)
		}
		loc := sum.Names.Symbol(d.Location)
		if !event.RoutineDrop(reason, loc) {
			r.Drops[reason+" at "+loc] += d.Count
		}
	}
	for p := range ports {
		r.Workload = append(r.Workload, "port "+p)
	}
	sort.Strings(r.Workload)
	return r
}

// flowSeconds is the time in which the connections that carried 99 % of
// the acknowledged bytes lived, their spans joined where they overlap:
// parallel streams count their common time once, and a control connection
// open around them (iperf3's, a few hundred bytes) does not stretch it.
func flowSeconds(conns []*analyze.ConnStat, total uint64) float64 {
	if total == 0 {
		return 0
	}
	byBytes := slices.Clone(conns)
	slices.SortStableFunc(byBytes, func(a, b *analyze.ConnStat) int { return cmp.Compare(b.BytesAcked, a.BytesAcked) })
	type span struct{ from, to int64 }
	var spans []span
	var covered uint64
	for _, c := range byBytes {
		if c.BytesAcked == 0 || 100*covered >= 99*total {
			break
		}
		covered += c.BytesAcked
		// Duration leaves out a flight recorder's gaps: the span ends at
		// the connection's last event and is as long as the windows held it.
		spans = append(spans, span{c.Last - int64(c.Duration()*1e9), c.Last})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var ns, end int64
	for i, s := range spans {
		if i == 0 || s.from > end {
			ns += s.to - s.from
		} else if s.to > end {
			ns += s.to - end
		}
		if i == 0 || s.to > end {
			end = s.to
		}
	}
	return float64(ns) / 1e9
}

// sends says whether a connection sent data: its send limits are a
// sender's. A receiver's socket only acknowledges, and every decision of it
// is app (nothing to send), which averaged in would hide the sender's
// limit. With tcp_rtt the bytes say it; without, a limit other than app.
func sends(c *analyze.ConnStat) bool {
	if c.Samples > 0 {
		return c.BytesAcked > c.BytesReceived
	}
	for reason, ns := range c.LimitNs() {
		if reason != "app" && reason != "ok" && ns > 0 {
			return true
		}
	}
	return false
}

// listeningPort keeps the well-known and registered ports a service listens
// on, not the ephemeral ports of the clients (32768 and up on Linux).
var listeningPort = regexp.MustCompile(`^([1-9][0-9]{0,3}|[12][0-9]{4}|3[01][0-9]{3}|32[0-6][0-9]{2}|327[0-5][0-9])$`)
