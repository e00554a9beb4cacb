package report

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/units"
)

// StatView is the JSON form of a recording's summary.
type StatView struct {
	Seconds     float64    `json:"seconds"`
	Events      uint64     `json:"events"`
	Lost        uint64     `json:"lost"`
	Missing     uint64     `json:"missing_seq"`
	Connections []ConnView `json:"connections"`
	// rows makes the connections' rows one at a time, for a view made by
	// NewStatViewRows: its Connections stays nil.
	rows *connRows
	// StateOnly counts the connections (each life of a socket address) and
	// listeners seen only changing state.
	StateOnly int       `json:"state_only_sockets"`
	Devices   []DevView `json:"devices"`
	CPUs      []CPUView `json:"cpus"`
	// Sampled lists the families attached only Share of each interval: the
	// CPU shares and call rates below are over the time they covered.
	Sampled *SampleView `json:"sampled,omitempty"`
	Drops   []DropView  `json:"drops"`
	// Resets are the resets no connection owns (sent for no socket, by a
	// listener, a request or timewait socket), per namespace and owner: with
	// the connections' they are all the trace's resets.
	Resets    []ResetView `json:"resets_without_connection"`
	Qdiscs    []QdiscView `json:"qdiscs"`
	Processes []ProcView  `json:"processes"`
	// Windows and Triggers: a flight recorder's trace holds only the
	// windows around its triggers' firings.
	Windows  int           `json:"flight_windows,omitempty"`
	Triggers []TriggerView `json:"triggers,omitempty"`
}

// TriggerView is one firing that opened or extended a flight-recorder window.
type TriggerView struct {
	Time       time.Time `json:"time"`
	Seq        uint64    `json:"seq"`
	Expr       string    `json:"trigger"`
	What       string    `json:"event"`
	Suppressed uint64    `json:"suppressed_before,omitempty"`
}

// SampleView says which families were sampled, and how much of the time.
type SampleView struct {
	Share    float64  `json:"share"`
	Families []string `json:"families"`
}

// ProcView is one process's socket calls in one direction.
type ProcView struct {
	Pid         uint32  `json:"pid"`
	Comm        string  `json:"comm"`
	Dir         string  `json:"dir"`
	Calls       uint64  `json:"calls"`
	Bytes       uint64  `json:"bytes"`
	Errors      uint64  `json:"errors"`
	CallsPerSec float64 `json:"calls_per_second"`
}

// NetnsRef names a row's namespace as every JSON output does: its inode
// as netns, the name the trace gave it as netns_name.
type NetnsRef struct {
	Netns     uint32 `json:"netns"`
	NetnsName string `json:"netns_name,omitempty"`
}

// Label is the name, or the inode of an unnamed namespace.
func (n NetnsRef) Label() string {
	if n.NetnsName != "" {
		return n.NetnsName
	}
	return fmt.Sprint(n.Netns)
}

func qdiscWaitView(w *analyze.QdiscWait) *QdiscWaitView {
	if w == nil {
		return nil
	}
	v := &QdiscWaitView{Packets: w.Packets, Unstamped: w.Unstamped, MaxUs: w.MaxNs / 1000}
	if w.Packets > 0 {
		// A quantile interpolated in its bucket can pass the largest wait.
		v.P50Us = min(event.QuantileUs(w.Hist[:], event.QdiscDelayBits, 0.5), v.MaxUs)
		v.P99Us = min(event.QuantileUs(w.Hist[:], event.QdiscDelayBits, 0.99), v.MaxUs)
		v.MeanUs = w.SumNs / w.Packets / 1000
	}
	return v
}

// QdiscView is one qdisc in StatView.
type QdiscView struct {
	Dev string `json:"dev"`
	NetnsRef
	Kind       string `json:"kind"`
	Handle     string `json:"handle"`
	Parent     string `json:"parent"`
	Enqueues   uint64 `json:"enqueues"`
	Dequeues   uint64 `json:"dequeues"`
	Drops      uint64 `json:"drops"`
	Requeues   uint64 `json:"requeues"`
	BacklogMax uint32 `json:"backlog_max"`
	// Wait is how long packets waited in the qdisc, when qdisc_delay was recorded.
	Wait *QdiscWaitView `json:"wait,omitempty"`
}

// QdiscWaitView is how long packets waited in a qdisc: the skbs it timed
// from enqueue to dequeue, and those it could not (split by the qdisc).
type QdiscWaitView struct {
	Packets   uint64 `json:"packets"`
	Unstamped uint64 `json:"unstamped"`
	P50Us     uint64 `json:"p50_us"`
	P99Us     uint64 `json:"p99_us"`
	MeanUs    uint64 `json:"mean_us"`
	MaxUs     uint64 `json:"max_us"`
}

// ConnView is one connection in StatView.
type ConnView struct {
	Sock  string `json:"sock"`
	Local string `json:"local"`
	Peer  string `json:"peer"`
	NetnsRef
	Seconds float64 `json:"seconds"`
	// States, LimitShare and LimitDecisions are shared by the rows with
	// equal values: read only.
	States []string `json:"states,omitempty"`
	// Bytes and throughput come from tcp_rtt, RTTs from its samples, the
	// window's range from any event that carries it: null where the trace
	// has none (not measured is never 0).
	BytesAcked     *uint64            `json:"bytes_acked"`
	BytesReceived  *uint64            `json:"bytes_received"`
	ThroughputBps  *float64           `json:"throughput_bytes_per_s"`
	LimitShare     map[string]float64 `json:"limit_share"`
	LimitDecisions map[string]uint64  `json:"limit_decisions"`
	RetransSegs    uint64             `json:"retrans_segs"`
	MinRTTus       *uint32            `json:"min_rtt_us"`
	AvgSRTTus      *float64           `json:"srtt_avg_us"`
	MaxSRTTus      *uint32            `json:"srtt_max_us"`
	CwndMin        *uint32            `json:"cwnd_min"`
	CwndMax        *uint32            `json:"cwnd_max"`
	CongStates     map[string]int     `json:"cong_states,omitempty"`
	Resets         int                `json:"resets"`
	Kernel         *KernelLimitsView  `json:"kernel_limits,omitempty"`
	// Stages is where the bytes the socket sent and received spent their
	// time (tcp_stage): a direction's stages when it timed bytes.
	Stages []StageView `json:"stages,omitempty"`
}

// StageView is one stage of a sent or received byte's way, over the bytes
// tcp_stage timed.
type StageView struct {
	Stage   string  `json:"stage"`
	Samples uint64  `json:"samples"`
	P50Us   uint64  `json:"p50_us"`
	P99Us   uint64  `json:"p99_us"`
	MeanUs  float64 `json:"mean_us"`
	// Share is the stage's part of its direction's mean way: from the write
	// to the ACK, or from the driver to the reader's copy.
	Share float64 `json:"share"`
}

// writeStages prints where each connection's bytes spent their time: the
// sent bytes' stages in one table, the received bytes' in another.
func writeStages(tw io.Writer, v *StatView) {
	for _, dir := range []struct {
		title string
		span  [2]int
	}{
		{"bytes sent, write to ACK", event.SentStages},
		{"bytes received, driver to the reader's copy", event.ReceivedStages},
	} {
		header := false
		v.EachConn(func(c *analyze.ConnStat) bool { return c.Stages == nil }, func(_ *analyze.ConnStat, c *ConnView) error {
			stages := stagesOf(c.Stages, dir.span)
			if stages == nil {
				return nil
			}
			if !header {
				fmt.Fprintf(tw, "\nTIME BY STAGE (%s; p50/p99 ms, share of the mean; bytes timed: how many bytes tcp_stage followed the whole way, one at a time)\nlocal\tpeer\tnetns\tbytes timed", dir.title)
				for _, name := range event.StageNames[dir.span[0]:dir.span[1]] {
					fmt.Fprint(tw, "\t"+strings.ReplaceAll(name, "_", " "))
				}
				fmt.Fprintln(tw)
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d", c.Local, c.Peer, c.Label(), stages[len(stages)-1].Samples)
			for _, st := range stages {
				fmt.Fprintf(tw, "\t%.3f/%.3f %.0f %%", float64(st.P50Us)/1e3, float64(st.P99Us)/1e3, st.Share*100)
			}
			fmt.Fprintln(tw)
			return nil
		})
	}
}

// stagesOf is the views of one direction's stages (span of
// event.StageNames), nil when it timed no byte.
func stagesOf(views []StageView, span [2]int) []StageView {
	var out []StageView
	for _, v := range views {
		if slices.Contains(event.StageNames[span[0]:span[1]], v.Stage) {
			out = append(out, v)
		}
	}
	return out
}

// stageViews is each timed direction's stages, their shares of that
// direction's whole way (the sum of its stages' means).
func stageViews(stages *analyze.StageHists) []StageView {
	if stages == nil {
		return nil
	}
	var out []StageView
	for _, span := range [][2]int{event.SentStages, event.ReceivedStages} {
		if stages.Count[span[1]-1] == 0 {
			continue
		}
		first := len(out)
		var total float64
		for i := span[0]; i < span[1]; i++ {
			h := stages.Hist(i)
			v := StageView{Stage: event.StageNames[i], Samples: h.Count,
				P50Us: event.QuantileUs(h.Hist[:], event.StageBits, 0.5), P99Us: event.QuantileUs(h.Hist[:], event.StageBits, 0.99)}
			if h.Count > 0 {
				v.MeanUs = float64(h.SumNs) / float64(h.Count) / 1e3
			}
			total += v.MeanUs
			out = append(out, v)
		}
		for i := first; i < len(out); i++ {
			if total > 0 {
				out[i].Share = out[i].MeanUs / total
			}
		}
	}
	return out
}

// KernelLimitsView sets the kernel's own accounting (tcp_info) beside the
// send limits: rwnd-limited beside swnd, sndbuf-limited beside sndbuf, each
// in µs and as a share of one span: the longer of tcp_info's busy time
// (its chrono runs while data waits to be sent) and skbtrace's runs but app
// (nothing to send). Over the kernel's busy time alone, skbtrace's sndbuf
// runs read 146 %.
type KernelLimitsView struct {
	BusyUs          uint64  `json:"busy_us"`
	RwndLimitedUs   uint64  `json:"rwnd_limited_us"`
	SndbufLimitedUs uint64  `json:"sndbuf_limited_us"`
	SwndUs          uint64  `json:"skbtrace_swnd_us"`
	SndbufUs        uint64  `json:"skbtrace_sndbuf_us"`
	RwndShare       float64 `json:"rwnd_limited_share"`
	SwndShare       float64 `json:"skbtrace_swnd_share"`
	SndbufShare     float64 `json:"sndbuf_limited_share"`
	SkbSndbufShare  float64 `json:"skbtrace_sndbuf_share"`
}

// Differs says whether the two accounts disagree by more than 5 % of busy time.
func (k *KernelLimitsView) Differs() bool {
	return abs(k.RwndShare-k.SwndShare) > 0.05 || abs(k.SndbufShare-k.SkbSndbufShare) > 0.05
}

func abs(x float64) float64 { return max(x, -x) }

// kernelNote says where the kernel accounting's two columns of each limit
// come from, and which one stat's shares and the doctor's verdicts use.
const kernelNote = `(rwnd-limited and sndbuf-limited are tcp_info's chrono counters, which the kernel switches only at some
 points of its send path; skbtrace swnd and sndbuf are the tcp_sendlim runs, timed at each send decision.
 The send limits above and the doctor's verdicts use the tcp_sendlim runs: tcp_info's only when none was traced)`

// sendLimits is the send-limit column: a connection that received bytes and
// sent none has no send limits to show (its runs say only that it had nothing
// to send).
func (c *ConnView) sendLimits() string {
	if c.BytesAcked != nil && *c.BytesAcked == 0 && c.BytesReceived != nil && *c.BytesReceived > 0 {
		return "received only"
	}
	return shares(c.LimitShare)
}

func kernelLimits(c *analyze.ConnStat) *KernelLimitsView {
	if c.KernelBusyUs == 0 {
		return nil
	}
	busy := float64(c.KernelBusyUs)
	limits := c.LimitNs()
	var runs int64
	for reason, ns := range limits {
		if reason != "app" {
			runs += ns
		}
	}
	k := &KernelLimitsView{BusyUs: c.KernelBusyUs, RwndLimitedUs: c.KernelRwndUs, SndbufLimitedUs: c.KernelSndbufUs,
		SwndUs: uint64(limits["swnd"] / 1000), SndbufUs: uint64(limits["sndbuf"] / 1000)}
	// One span for both accounts, the longer: skbtrace's runs can outlast
	// the kernel's busy time (a run before its chrono started).
	span := max(busy, float64(runs)/1e3)
	k.RwndShare, k.SndbufShare = float64(k.RwndLimitedUs)/span, float64(k.SndbufLimitedUs)/span
	k.SwndShare, k.SkbSndbufShare = float64(limits["swnd"])/1e3/span, float64(limits["sndbuf"])/1e3/span
	return k
}

// DevView is one device in StatView.
type DevView struct {
	Dev string `json:"dev"`
	NetnsRef
	XmitPPS         float64 `json:"xmit_packets_per_s"`
	XmitBytes       uint64  `json:"xmit_bytes"`
	XmitSegsPerSkb  float64 `json:"xmit_segs_per_skb"`
	XmitMaxBytes    uint32  `json:"xmit_max_skb_bytes"`
	XmitErrors      uint64  `json:"xmit_errors"`
	RecvPPS         float64 `json:"recv_packets_per_s"`
	RecvBytes       uint64  `json:"recv_bytes"`
	RecvSegsPerSkb  float64 `json:"recv_segs_per_skb"`
	RecvMaxBytes    uint32  `json:"recv_max_skb_bytes"`
	RecvGroInPerSkb float64 `json:"recv_gro_in_per_skb"`
}

// CPUView is one CPU in StatView.
type CPUView struct {
	CPU           uint32  `json:"cpu"`
	NetRxShare    float64 `json:"net_rx_share"`
	NetTxShare    float64 `json:"net_tx_share"`
	NapiPolls     uint64  `json:"napi_polls"`
	NapiWork      uint64  `json:"napi_work"`
	NapiExhausted uint64  `json:"napi_budget_exhausted"`
	NetRxSoftirqs uint64  `json:"net_rx_softirqs"`
	NetTxSoftirqs uint64  `json:"net_tx_softirqs"`
}

// DropView is one drop site in StatView.
type DropView struct {
	Reason   string `json:"reason"`
	Location string `json:"location"`
	Dev      string `json:"dev"`
	Count    uint64 `json:"count"`
}

// ResetView is one row of resets without a connection.
type ResetView struct {
	NetnsRef
	Owner    string `json:"owner"`
	Sent     uint64 `json:"sent"`
	Received uint64 `json:"received"`
	Local    string `json:"last_local"`
	Peer     string `json:"last_peer"`
}

// NewStatView computes the printable summary, every connection's row in
// its Connections.
func NewStatView(st *analyze.Stat, sum *analyze.Summary) StatView {
	v, nsRef := statView(st, sum)
	v.Connections = []ConnView{}
	// Rows are shared by value where equal: a trace can have hundreds of
	// thousands of connections.
	share := newRowSharing()
	for _, c := range st.Connections {
		if c.Active() {
			v.Connections = append(v.Connections, connView(c, nsRef, share))
		} else {
			v.StateOnly++
		}
	}
	return v
}

// statView is the summary without the connections' rows.
func statView(st *analyze.Stat, sum *analyze.Summary) (StatView, func(uint32) NetnsRef) {
	st.Sort()
	names := sum.Names
	nsRef := func(ino uint32) NetnsRef { return NetnsRef{ino, names.NetnsName(ino)} }
	v := StatView{Seconds: st.Seconds(), Events: st.Events, Lost: sum.TotalLost(), Missing: sum.Missing,
		Devices: []DevView{}, CPUs: []CPUView{}, Drops: []DropView{}, Qdiscs: []QdiscView{},
		Resets: []ResetView{}}
	v.Processes = []ProcView{}
	if smp := sum.Sample; smp != nil {
		v.Sampled = &SampleView{Share: smp.Share, Families: smp.Families}
	}
	v.Windows = sum.Windows
	for _, t := range sum.Triggers {
		v.Triggers = append(v.Triggers, TriggerView{Time: time.Unix(0, t.TimeNs), Seq: t.Seq, Expr: t.Expr, What: t.What, Suppressed: t.Suppressed})
	}
	for _, p := range st.SockIO {
		pv := ProcView{Pid: p.Pid, Comm: p.Comm, Dir: p.Dir, Calls: p.Calls, Bytes: p.Bytes, Errors: p.Errors}
		if p.Seconds > 0 {
			pv.CallsPerSec = float64(p.Calls) / p.Seconds
		}
		v.Processes = append(v.Processes, pv)
	}
	for _, q := range st.Qdiscs {
		v.Qdiscs = append(v.Qdiscs, QdiscView{Dev: q.Dev, NetnsRef: nsRef(q.Netns), Kind: q.Kind, Handle: event.QdiscHandle(q.Handle),
			Parent: event.QdiscHandle(q.Parent), Enqueues: q.Enqueues, Dequeues: q.Dequeues, Drops: q.Drops,
			Requeues: q.Requeues, BacklogMax: q.BacklogMax, Wait: qdiscWaitView(q.Wait)})
	}
	for _, r := range st.Resets {
		v.Resets = append(v.Resets, ResetView{NetnsRef: nsRef(r.Netns), Owner: r.Owner, Sent: r.Sent, Received: r.Received,
			Local: r.Local.String(), Peer: r.Peer.String()})
	}
	for _, d := range st.Devices {
		dv := DevView{Dev: d.Name, NetnsRef: nsRef(d.Netns),
			XmitPPS: d.Xmit.PacketsPerSecond(), XmitBytes: d.Xmit.Bytes, XmitSegsPerSkb: d.Xmit.SegsPerSkb(),
			XmitMaxBytes: d.Xmit.MaxBytes, XmitErrors: d.Xmit.Errors,
			RecvPPS: d.Recv.PacketsPerSecond(), RecvBytes: d.Recv.Bytes, RecvSegsPerSkb: d.Recv.SegsPerSkb(),
			RecvMaxBytes: d.Recv.MaxBytes}
		if d.Recv.Skbs > 0 {
			dv.RecvGroInPerSkb = float64(d.Recv.GroIn) / float64(d.Recv.Skbs)
		}
		v.Devices = append(v.Devices, dv)
	}
	secs := st.Seconds()
	sampledSoftirq := sum.Sample != nil && slices.Contains(sum.Sample.Families, "softirq")
	for _, c := range st.CPUs {
		cv := CPUView{CPU: c.CPU, NapiPolls: c.NapiPolls, NapiWork: c.NapiWork, NapiExhausted: c.NapiBudgetExhausts,
			NetRxSoftirqs: c.NetRxRuns, NetTxSoftirqs: c.NetTxRuns}
		switch {
		case sampledSoftirq:
			// Over the windows the softirq hooks were attached.
			cv.NetRxShare, cv.NetTxShare = share(c.NetRxNs, c.NetRxSeconds), share(c.NetTxNs, c.NetTxSeconds)
		case secs > 0:
			cv.NetRxShare, cv.NetTxShare = float64(c.NetRxNs)/1e9/secs, float64(c.NetTxNs)/1e9/secs
		}
		v.CPUs = append(v.CPUs, cv)
	}
	for _, d := range st.Drops {
		v.Drops = append(v.Drops, DropView{Reason: event.EnumName(names, d.Reason, event.Names.DropReason),
			Location: event.SymbolName(names, d.Location), Dev: d.Dev, Count: d.Count})
	}
	return v, nsRef
}

func ptr[T any](v T) *T { return &v }

// Bytes is what the connection moved, the larger direction; nil when not measured.
func (c *ConnView) Bytes() *uint64 {
	if c.BytesAcked == nil {
		return nil
	}
	return ptr(max(*c.BytesAcked, *c.BytesReceived))
}

// orDash prints what was measured, and "-" for what was not.
func orDash[T any](v *T, format func(T) string) string {
	if v == nil {
		return "-"
	}
	return format(*v)
}

func share(ns uint64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(ns) / 1e9 / seconds
}

// WriteStatText writes the summary as tables.
func WriteStatText(w io.Writer, v StatView) error {
	fmt.Fprintf(w, "recording: %.1f s, %s, %d lost", v.Seconds, units.Count(v.Events, "event", "events"), v.Lost)
	if v.Missing > 0 {
		fmt.Fprintf(w, ", %d sequence numbers missing", v.Missing)
	}
	fmt.Fprintln(w)
	if v.Sampled != nil {
		fmt.Fprintf(w, "sampled: %s attached %.0f %% of each interval; their rates and shares are over that time, their totals cover it only\n",
			strings.Join(v.Sampled.Families, ", "), v.Sampled.Share*100)
	}
	if v.Windows > 0 {
		fmt.Fprintf(w, "flight recorder: %s around %s; the time between them was not recorded "+
			"and the seconds and rates below leave it out\n", units.Count(v.Windows, "window", "windows"), units.Count(len(v.Triggers), "trigger firing", "trigger firings"))
		for _, t := range v.Triggers {
			fmt.Fprintf(w, "  %s  seq %d  %s: %s", t.Time.Format("15:04:05.000000"), t.Seq, t.Expr, t.What)
			if t.Suppressed > 0 {
				fmt.Fprintf(w, " (%s before it opened no window)", units.Count(t.Suppressed, "firing", "firings"))
			}
			fmt.Fprintln(w)
		}
	}
	if v.conns() > 0 {
		if err := writeConnTable(w, &v); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if v.StateOnly > 0 {
		fmt.Fprintf(tw, "(%d more sockets only changed state)\n", v.StateOnly)
	}
	writeStages(tw, &v)
	if len(v.Resets) > 0 {
		fmt.Fprintln(tw, "\nRESETS WITHOUT A CONNECTION\nnetns\towner\tsent\treceived\tlast local\tlast peer")
		for _, r := range v.Resets {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.Label(), r.Owner, r.Sent, r.Received, r.Local, r.Peer)
		}
	}
	var differ []ConnView
	v.EachConn(func(c *analyze.ConnStat) bool { return c.KernelBusyUs == 0 }, func(_ *analyze.ConnStat, c *ConnView) error {
		if c.Kernel != nil && c.Kernel.Differs() {
			differ = append(differ, *c)
		}
		return nil
	})
	if len(differ) > 0 {
		fmt.Fprintln(tw, "\nKERNEL ACCOUNTING where it differs (shares of the longer of tcp_info's busy time and skbtrace's runs but app)\nlocal\tpeer\tbusy\trwnd-limited\tskbtrace swnd\tsndbuf-limited\tskbtrace sndbuf")
		for _, c := range differ {
			k := c.Kernel
			fmt.Fprintf(tw, "%s\t%s\t%.0f ms\t%.0f %%\t%.0f %%\t%.0f %%\t%.0f %%\n", c.Local, c.Peer, float64(k.BusyUs)/1e3,
				k.RwndShare*100, k.SwndShare*100, k.SndbufShare*100, k.SkbSndbufShare*100)
		}
		fmt.Fprintln(tw, kernelNote)
	}
	if len(v.Devices) > 0 {
		noNapi := false
		fmt.Fprintln(tw, "\nDEVICES\ndev\tnetns\txmit pkt/s\txmit segs/skb\txmit max skb\trecv pkt/s\trecv segs/skb\trecv max skb\tGRO in/skb")
		for _, d := range v.Devices {
			gro := "-"
			if d.RecvGroInPerSkb > 0 {
				gro = fmt.Sprintf("%.2f", d.RecvGroInPerSkb)
			} else if d.RecvSegsPerSkb >= 1.5 {
				noNapi = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.2f\t%d\t%.0f\t%.2f\t%d\t%s\n", d.Dev, d.Label(), d.XmitPPS, d.XmitSegsPerSkb,
				d.XmitMaxBytes, d.RecvPPS, d.RecvSegsPerSkb, d.RecvMaxBytes, gro)
		}
		fmt.Fprintln(tw, "(GRO in/skb: packets the device's NAPI polls handed GRO, per skb received; - where none were)")
		if noNapi {
			fmt.Fprintln(tw, "(recv segs/skb above 1 without GRO: a device without NAPI of its own, veth or loopback, receives the sender's GSO skbs whole)")
		}
	}
	if len(v.CPUs) > 0 {
		fmt.Fprintln(tw, "\nCPUS\ncpu\tNET_RX\tNET_TX\tnapi polls\tbudget exhausted")
		for _, c := range v.CPUs {
			fmt.Fprintf(tw, "%d\t%.1f %%\t%.1f %%\t%d\t%d\n", c.CPU, c.NetRxShare*100, c.NetTxShare*100, c.NapiPolls, c.NapiExhausted)
		}
	}
	if len(v.Processes) > 0 {
		fmt.Fprintln(tw, "\nSOCKET CALLS\npid\tcomm\tdir\tcalls\tcalls/s\tbytes\tbytes/call\terrors")
		for _, p := range v.Processes {
			per := 0.0
			if p.Calls > 0 {
				per = float64(p.Bytes) / float64(p.Calls)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.0f\t%s\t%.0f\t%d\n", p.Pid, p.Comm, p.Dir, p.Calls, p.CallsPerSec, units.Bytes(p.Bytes), per, p.Errors)
		}
	}
	if len(v.Qdiscs) > 0 {
		waits := slices.ContainsFunc(v.Qdiscs, func(q QdiscView) bool { return q.Wait != nil })
		header := "\nQDISCS\ndev\tnetns\tkind\thandle\tparent\tenqueues\tdrops\trequeues\tbacklog max"
		if waits {
			header += "\twait p50/p99/max ms\ttimed"
		}
		fmt.Fprintln(tw, header)
		for _, q := range v.Qdiscs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d", q.Dev, q.Label(), q.Kind, q.Handle, q.Parent,
				q.Enqueues, q.Drops, q.Requeues, q.BacklogMax)
			switch {
			case q.Wait != nil:
				w := q.Wait
				fmt.Fprintf(tw, "\t%.1f/%.1f/%.1f\t%d of %d", float64(w.P50Us)/1e3, float64(w.P99Us)/1e3, float64(w.MaxUs)/1e3,
					w.Packets, w.Packets+w.Unstamped)
			case waits:
				fmt.Fprint(tw, "\t-\t-")
			}
			fmt.Fprintln(tw)
		}
	}
	if len(v.Drops) > 0 {
		fmt.Fprintln(tw, "\nDROPS\ncount\treason\tlocation\tdev")
		for _, d := range v.Drops {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", d.Count, d.Reason, d.Location, d.Dev)
		}
	}
	return tw.Flush()
}

func shares(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	var parts []string
	for _, e := range l {
		if e.v >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.0f %%", e.k, e.v*100))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
