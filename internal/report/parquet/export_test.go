package parquet

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	pq "github.com/parquet-go/parquet-go"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

const (
	fixNetns = 4026532000
	fixSock  = 0xffff888100001000
	// wall is the fixture header's wall time at boot time 0: a whole second,
	// so the fixture's boot-time seconds are the series' intervals.
	wall = 1_700_000_000_000_000_000
)

func name16(s string) (out [16]int8) {
	for i := 0; i < len(s) && i < 15; i++ {
		out[i] = int8(s[i])
	}
	return out
}

func hdr(seq, ts uint64, cpu uint32, typ event.Type) wire.EventHeader {
	return wire.EventHeader{Seq: seq, TsNs: ts, Cpu: cpu, Type: uint16(typ)}
}

// fixtureWriter starts a trace whose header names host.
func fixtureWriter(t testing.TB, buf *bytes.Buffer, host string) *tracetest.Writer {
	t.Helper()
	h := tracetest.Header(trace.NativeOrder)
	h.Hostname = host
	tw, err := trace.NewWriter(buf, h)
	if err != nil {
		t.Fatal(err)
	}
	return &tracetest.Writer{Writer: tw}
}

// fixture has every family, with the name tables a recording writes for
// them, and spans that cross the series' second boundaries. Each Flush
// closes a block, so that cutting the file leaves the earlier ones whole.
func fixture(t testing.TB, host string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := fixtureWriter(t, &buf, host)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	a := tracetest.Addrs(netip.MustParseAddrPort("10.200.0.1:40000"), netip.MustParseAddrPort("10.200.0.2:5201"), fixNetns)
	ev := func(typ event.Type, v any) { t.Helper(); must(w.Event(uint16(typ), v)) }
	must(w.AppendNetns(trace.Netns{Inode: fixNetns, Name: "lab-snd"}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumDropReason, Names: map[uint32]string{2: "NOT_SPECIFIED", 23: "NETFILTER_DROP"}}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumResetReason, Names: map[uint32]string{1: "NO_SOCKET"}}))
	must(w.AppendSymbol(trace.Symbol{Addr: 0xffffffff81a00010, Name: "nf_hook_slow+0x10"}))

	// Block 1: the connection, two send-limit runs and two RTT samples.
	ev(event.TypeTCPConn, tracetest.Conn(0, 100_000, 0, fixSock, a, 2, 1, 4242, "iperf3"))
	// sndbuf 0.2 s .. 1.4 s: 0.8 s in second 0, 0.4 s in second 1.
	ev(event.TypeTCPSendlim, tracetest.Sendlim(1, 1_400_000_000, 200_000_000, 0, fixSock, a, uint8(event.SendlimSndbuf), 100, 1000))
	ev(event.TypeTCPRTT, &wire.TcpRttEvent{Hdr: hdr(2, 500_000_000, 1, event.TypeTCPRTT), Sock: fixSock, Addrs: a,
		SrttUs: 100, RttvarUs: 30, MinRttUs: 80, Cwnd: 20, Ssthresh: 14, InFlight: 18, SndWnd: 65536, RcvWnd: 65536,
		DeliveryRate: 125_000_000, BytesAcked: 1_000_000, BytesReceived: 1})
	// 2 MB acknowledged over 0.5 s .. 1.5 s: 1 MB in each second.
	ev(event.TypeTCPRTT, &wire.TcpRttEvent{Hdr: hdr(3, 1_500_000_000, 1, event.TypeTCPRTT), Sock: fixSock, Addrs: a,
		SrttUs: 300, RttvarUs: 40, MinRttUs: 80, Cwnd: 30, Ssthresh: 14, InFlight: 0, SndWnd: 65536, RcvWnd: 65536,
		DeliveryRate: 125_000_000, BytesAcked: 3_000_000, BytesReceived: 1})
	// cwnd 1.4 s .. 2.1 s: 0.6 s in second 1, 0.1 s in second 2.
	ev(event.TypeTCPSendlim, tracetest.Sendlim(4, 2_100_000_000, 1_400_000_000, 0, fixSock, a, uint8(event.SendlimCwnd), 70, 700))
	must(w.Flush())

	// Block 2: one event of every other family.
	ev(event.TypeTCPCong, &wire.TcpCongEvent{Hdr: hdr(5, 2_200_000_000, 0, event.TypeTCPCong), Sock: fixSock, Addrs: a,
		Cwnd: 15, Ssthresh: 14, SndNxt: 5000, SndUna: 3000, RtoUs: 204000, State: 3})
	ev(event.TypeTCPRetrans, &wire.TcpRetransEvent{Hdr: hdr(6, 2_300_000_000, 0, event.TypeTCPRetrans), Sock: fixSock,
		BeginNs: 2_000_000_000, Addrs: a, Cnt: 7, Skbs: 3, State: 1})
	ev(event.TypeTCPReset, &wire.TcpResetEvent{Hdr: hdr(7, 2_400_000_000, 0, event.TypeTCPReset), Addrs: a, Reason: 1, Path: 3})
	ev(event.TypeTCPRcvbuf, &wire.TcpRcvbufEvent{Hdr: hdr(8, 2_500_000_000, 1, event.TypeTCPRcvbuf), Sock: fixSock, Addrs: a,
		Rcvbuf: 262144, OldRcvbuf: 131072, RcvSpace: 65536, WindowClamp: 3145728, RcvWnd: 131072, RmemAlloc: 4096})
	ev(event.TypeSkLimit, &wire.SkLimitEvent{Hdr: hdr(9, 2_600_000_000, 0, event.TypeSkLimit), BeginNs: 2_000_000_000,
		Sock: fixSock, Addrs: a, Cnt: 5, Kind: 2})
	ev(event.TypeSkbDrop, &wire.SkbDropEvent{Hdr: hdr(10, 3_000_000_000, 0, event.TypeSkbDrop), BeginNs: 2_000_000_000,
		Location: 0xffffffff81a00010, Dev: name16("skbr1"), Ifindex: 2, Netns: fixNetns, Reason: 23, Protocol: 0x0800, L4proto: 6,
		Cnt: 12, Addrs: a})
	// Half a second of transmit, a second of receive: their rates differ.
	ev(event.TypeDevXmit, &wire.DevEvent{Hdr: hdr(11, 3_000_000_000, 0, event.TypeDevXmit), BeginNs: 2_500_000_000,
		Name: name16("skbs1"), Ifindex: 2, Netns: fixNetns, Skbs: 100, Bytes: 4_000_000, Segs: 3000, Errors: 1, MaxBytes: 65226,
		Hist: [8]uint64{10, 0, 0, 0, 0, 90}})
	ev(event.TypeDevRecv, &wire.DevEvent{Hdr: hdr(12, 3_000_000_000, 0, event.TypeDevRecv), BeginNs: 2_000_000_000,
		Name: name16("skbs1"), Ifindex: 2, Netns: fixNetns, Skbs: 50, Bytes: 3000, Segs: 50, GroIn: 50, MaxBytes: 66, Hist: [8]uint64{50}})
	ev(event.TypeNapiPoll, &wire.NapiEvent{Hdr: hdr(13, 3_000_000_000, 1, event.TypeNapiPoll), BeginNs: 2_000_000_000,
		Name: name16("backlog"), Polls: 40, Work: 45, Exhausted: 1, Budget: 64})
	ev(event.TypeSoftirq, &wire.SoftirqEvent{Hdr: hdr(14, 3_000_000_000, 1, event.TypeSoftirq), BeginNs: 2_000_000_000,
		Entries: 41, TimeNs: 250_000_000, Vec: 3})
	ev(event.TypeQdisc, &wire.QdiscEvent{Hdr: hdr(15, 3_000_000_000, 0, event.TypeQdisc), BeginNs: 2_000_000_000,
		Dev: name16("skbs1"), Kind: name16("tbf"), Ifindex: 2, Netns: fixNetns, Handle: 0x80010000, Parent: 0xffffffff,
		Enqueues: 90, Dequeues: 80, Drops: 10, BacklogMax: 65000, QlenMax: 44, Backlog: 1500, Qlen: 1})
	ev(event.TypeSockIO, &wire.SockIoEvent{Hdr: hdr(16, 3_000_000_000, 0, event.TypeSockIO), BeginNs: 2_000_000_000,
		Pid: 4242, Dir: 0, Comm: name16("iperf3"), Calls: 3, Bytes: 393216, Hist: [20]uint64{17: 3}})
	ev(event.TypeTCPConn, tracetest.Conn(17, 3_100_000_000, 1, fixSock, a, 1, 4, 0, ""))
	ev(event.TypeQdiscDelay, &wire.QdiscDelayEvent{Hdr: hdr(18, 3_100_000_000, 0, event.TypeQdiscDelay), BeginNs: 2_000_000_000,
		Dev: name16("skbs1"), Kind: name16("tbf"), Ifindex: 2, Netns: fixNetns, Handle: 0x80010000, Parent: 0xffffffff,
		Packets: 80, Unstamped: 3, SumNs: 80 * 38_000_000, MaxNs: 41_000_000, Hist: [96]uint64{56: 60, 57: 20}})
	stage := wire.TcpStageEvent{Hdr: hdr(19, 3_100_000_000, 0, event.TypeTCPStage), BeginNs: 2_000_000_000, Sock: fixSock, Addrs: a}
	stage.Stage[1].Count, stage.Stage[1].SumNs, stage.Stage[1].Hist[83] = 10, 60_000_000, 10
	ev(event.TypeTCPStage, &stage)
	must(w.AppendEnd(trace.End{NextSeq: 20, BootNs: 3_200_000_000}))
	must(w.Flush())
	return buf.Bytes()
}

// export replays data into dir and closes the export; it returns the
// summary, Replay's error and Close's.
func export(t testing.TB, data []byte, dir string) (*analyze.Summary, error, error) {
	t.Helper()
	return exportAs(t, data, dir, "")
}

// exportAs exports data as if recorded on host (if not "").
func exportAs(t testing.TB, data []byte, dir, host string) (*analyze.Summary, error, error) {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		r.Header.Hostname = host
	}
	sum := analyze.NewSummary()
	x, err := New(dir, sum)
	if err != nil {
		t.Fatal(err)
	}
	rerr := analyze.Replay(r, &event.Filter{}, sum, x.Add)
	return sum, rerr, x.Close()
}

func read[T any](t *testing.T, dir, name string) []T {
	t.Helper()
	rows, err := pq.ReadFile[T](filePath(dir, name))
	if err != nil {
		t.Fatalf("reading %s.parquet: %v", name, err)
	}
	return rows
}

// statOf is what `skbtrace stat --json` reports for data, and the summary.
func statOf(t *testing.T, data []byte) (report.StatView, *analyze.Summary) {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sum, st := analyze.NewSummary(), analyze.NewStat()
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error { st.Add(ev); return nil }); err != nil {
		t.Fatal(err)
	}
	return report.NewStatView(st, sum), sum
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(a), math.Abs(b)) }

func TestExportWritesEveryTable(t *testing.T) {
	dir := t.TempDir()
	sum, rerr, cerr := export(t, fixture(t, "alpha"), dir)
	if rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	var want []string
	for _, typ := range families {
		want = append(want, typ.Action()+".parquet")
	}
	want = append(want, "flows.parquet", "flow_series.parquet", "device_series.parquet")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	// Every family's table has one row per event of it.
	for _, typ := range families {
		f, err := os.Open(filePath(dir, typ.Action()))
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		pf, err := pq.OpenFile(f, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", typ.Action(), err)
		}
		if n := pf.NumRows(); uint64(n) != sum.ByType[typ] {
			t.Errorf("%s: %d rows, want %d", typ.Action(), n, sum.ByType[typ])
		}
		f.Close()
	}
}

// metaCols reads only the header's columns, which every table has.
type metaCols struct {
	Host           string `parquet:"host"`
	Kernel         string `parquet:"kernel"`
	Machine        string `parquet:"machine"`
	Tool           string `parquet:"tool"`
	Command        string `parquet:"command"`
	RecordingStart int64  `parquet:"recording_start,timestamp(nanosecond)"`
}

func TestEveryRowCarriesTheHeader(t *testing.T) {
	dir := t.TempDir()
	if _, rerr, cerr := export(t, fixture(t, "alpha"), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	want := metaCols{Host: "alpha", Kernel: "6.18.0", Machine: "x86_64", Tool: "tracetest", Command: "skbtrace record", RecordingStart: wall}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		rows := read[metaCols](t, dir, strings.TrimSuffix(e.Name(), ".parquet"))
		if len(rows) == 0 {
			t.Errorf("%s: no rows", e.Name())
		}
		for i, r := range rows {
			if r != want {
				t.Fatalf("%s row %d: %+v, want %+v", e.Name(), i, r, want)
			}
		}
	}
}

func TestEventRowsFlattenFields(t *testing.T) {
	dir := t.TempDir()
	if _, rerr, cerr := export(t, fixture(t, "alpha"), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	wantSock := sockCols{Sock: "0xffff888100001000", Local: "10.200.0.1:40000", Peer: "10.200.0.2:5201", Netns: fixNetns, NetnsName: "lab-snd"}

	conns := read[tcpConnRow](t, dir, "tcp_conn")
	if len(conns) != 2 {
		t.Fatalf("tcp_conn: %d rows", len(conns))
	}
	c := conns[0]
	if c.Seq != 0 || c.TimeNs != wall+100_000 || c.sockCols != wantSock || c.State != "ESTABLISHED" || c.From != "SYN_SENT" ||
		c.Context != "task" || c.Pid != 4242 || c.Comm != "iperf3" || c.Err != "" {
		t.Errorf("tcp_conn: %+v", c)
	}
	if c := conns[1]; c.Context != "softirq" || c.Pid != 0 || c.Comm != "" || c.State != "FIN_WAIT1" || c.CPU != 1 {
		t.Errorf("tcp_conn in softirq: %+v", c)
	}

	lims := read[tcpSendlimRow](t, dir, "tcp_sendlim")
	if len(lims) != 2 {
		t.Fatalf("tcp_sendlim: %d rows", len(lims))
	}
	l := lims[0]
	if l.Reason != "sndbuf" || l.BeginNs != wall+200_000_000 || l.TimeNs != wall+1_400_000_000 || l.Cnt != 100 ||
		l.SentPkts != 1000 || l.MSS != 1448 || l.Cwnd != 10 || l.Sndbuf != 16384 || l.WmemQueued != 16384 || l.sockCols != wantSock {
		t.Errorf("tcp_sendlim: %+v", l)
	}

	rtts := read[tcpRTTRow](t, dir, "tcp_rtt")
	if len(rtts) != 2 || rtts[1].SrttUs != 300 || rtts[1].BytesAcked != 3_000_000 || rtts[1].DeliveryRate != 125_000_000 {
		t.Errorf("tcp_rtt: %+v", rtts)
	}
	if r := read[tcpCongRow](t, dir, "tcp_cong"); len(r) != 1 || r[0].State != "Recovery" || r[0].Cwnd != 15 || r[0].RtoUs != 204000 {
		t.Errorf("tcp_cong: %+v", r)
	}
	if r := read[tcpRetransRow](t, dir, "tcp_retrans"); len(r) != 1 || r[0].State != "ESTABLISHED" || r[0].Cnt != 7 ||
		r[0].Skbs != 3 || r[0].BeginNs != wall+2_000_000_000 {
		t.Errorf("tcp_retrans: %+v", r)
	}
	// Sent for no socket: the reason by its kernel name, the path it names.
	if r := read[tcpResetRow](t, dir, "tcp_reset"); len(r) != 1 || r[0].Dir != "sent" || r[0].Reason != "NO_SOCKET" ||
		r[0].Path != "no_socket" || r[0].State != "" || r[0].Sock != "0x0" {
		t.Errorf("tcp_reset: %+v", r)
	}
	if r := read[tcpRcvbufRow](t, dir, "tcp_rcvbuf"); len(r) != 1 || r[0].Rcvbuf != 262144 || r[0].OldRcvbuf != 131072 ||
		r[0].RmemAlloc != 4096 {
		t.Errorf("tcp_rcvbuf: %+v", r)
	}
	if r := read[skLimitRow](t, dir, "sk_limit"); len(r) != 1 || r[0].Kind != "rcvqueue_full" || r[0].Cnt != 5 || r[0].sockCols != wantSock {
		t.Errorf("sk_limit: %+v", r)
	}
	drops := read[skbDropRow](t, dir, "skb_drop")
	if len(drops) != 1 {
		t.Fatalf("skb_drop: %d rows", len(drops))
	}
	if d := drops[0]; d.Reason != "NETFILTER_DROP" || d.Location != "nf_hook_slow+0x10" || d.Dev != "skbr1" || d.Ifindex != 2 ||
		d.NetnsName != "lab-snd" || d.Protocol != "ipv4/tcp" || d.Src != "10.200.0.1:40000" || d.Dst != "10.200.0.2:5201" || d.Cnt != 12 {
		t.Errorf("skb_drop: %+v", d)
	}
	xmit := read[devRow](t, dir, "dev_xmit")
	if len(xmit) != 1 {
		t.Fatalf("dev_xmit: %d rows", len(xmit))
	}
	if d := xmit[0]; d.Dev != "skbs1" || d.NetnsName != "lab-snd" || d.Skbs != 100 || d.Segs != 3000 || d.Bytes != 4_000_000 ||
		d.Errors != 1 || d.MaxBytes != 65226 || !slices.Equal(d.SegsHist, []int64{10, 0, 0, 0, 0, 90, 0, 0}) {
		t.Errorf("dev_xmit: %+v", d)
	}
	if r := read[devRow](t, dir, "dev_recv"); len(r) != 1 || r[0].GroIn != 50 || r[0].Skbs != 50 {
		t.Errorf("dev_recv: %+v", r)
	}
	if r := read[napiRow](t, dir, "napi_poll"); len(r) != 1 || r[0].Dev != "backlog" || r[0].Polls != 40 || r[0].Budget != 64 || r[0].Exhausted != 1 {
		t.Errorf("napi_poll: %+v", r)
	}
	if r := read[softirqRow](t, dir, "softirq"); len(r) != 1 || r[0].Vec != "NET_RX" || r[0].BusyNs != 250_000_000 || r[0].Entries != 41 {
		t.Errorf("softirq: %+v", r)
	}
	if r := read[qdiscRow](t, dir, "qdisc"); len(r) != 1 || r[0].Kind != "tbf" || r[0].Handle != "8001:" || r[0].Parent != "root" ||
		r[0].Drops != 10 || r[0].Qlen != 1 {
		t.Errorf("qdisc: %+v", r)
	}
	if r := read[qdiscDelayRow](t, dir, "qdisc_delay"); len(r) != 1 || r[0].Kind != "tbf" || r[0].Packets != 80 || r[0].Unstamped != 3 ||
		r[0].MaxNs != 41_000_000 || len(r[0].DelayHist) != 96 || r[0].DelayHist[57] != 20 {
		t.Errorf("qdisc_delay: %+v", r)
	}
	if r := read[tcpStageRow](t, dir, "tcp_stage"); len(r) != 1 || r[0].QdiscCount != 10 || r[0].QdiscSumNs != 60_000_000 ||
		len(r[0].QdiscHist) != 192 || r[0].QdiscHist[83] != 10 || r[0].AckCount != 0 || r[0].Local == "" {
		t.Errorf("tcp_stage: %+v", r)
	}
	sio := read[sockIORow](t, dir, "sock_io")
	if len(sio) != 1 || sio[0].Dir != "send" || sio[0].Comm != "iperf3" || sio[0].Bytes != 393216 || len(sio[0].SizeHist) != 20 || sio[0].SizeHist[17] != 3 {
		t.Errorf("sock_io: %+v", sio)
	}
}

func TestFlowsEqualStat(t *testing.T) {
	lab, err := os.ReadFile(labTrace)
	if err != nil {
		t.Fatal(err)
	}
	// The lab's two ends are in namespaces of their own: a flow given
	// another's span or namespace shows.
	for _, data := range [][]byte{fixture(t, "alpha"), lab} {
		flowsEqualStat(t, data)
	}
}

func flowsEqualStat(t *testing.T, data []byte) {
	t.Helper()
	dir := t.TempDir()
	if _, rerr, cerr := export(t, data, dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	view, _ := statOf(t, data)
	flows := read[flowRow](t, dir, "flows")
	if len(flows) != len(view.Connections) || len(flows) == 0 {
		t.Fatalf("%d flows, stat has %d connections", len(flows), len(view.Connections))
	}
	for i, f := range flows {
		if got := float64(f.LastNs-f.FirstNs) / 1e9; got != f.Seconds {
			t.Errorf("flow %d spans %d .. %d, %v s, stat says %v s", i, f.FirstNs, f.LastNs, got, f.Seconds)
		}
		c := view.Connections[i]
		if f.Sock != c.Sock || f.Local != c.Local || f.Peer != c.Peer || f.NetnsName != c.NetnsName ||
			!same(f.BytesAcked, c.BytesAcked) || !same(f.BytesReceived, c.BytesReceived) ||
			!same(f.Bytes, c.Bytes()) || !same(f.Throughput, c.ThroughputBps) || f.Seconds != c.Seconds ||
			f.RetransSegs != int64(c.RetransSegs) || !same(f.SRTTAvgUs, c.AvgSRTTus) || !same(f.CwndMin, c.CwndMin) ||
			!same(f.CwndMax, c.CwndMax) || !slices.Equal(f.States, c.States) {
			t.Errorf("flow %d: %+v\nstat: %+v", i, f, c)
		}
		if f.LimitShare.Sndbuf != c.LimitShare["sndbuf"] || f.LimitShare.Cwnd != c.LimitShare["cwnd"] ||
			f.LimitDecisions.Sndbuf != int64(c.LimitDecisions["sndbuf"]) || f.CongStates["Recovery"] != int64(c.CongStates["Recovery"]) {
			t.Errorf("flow %d limits: %+v %+v %v\nstat: %v %v %v", i, f.LimitShare, f.LimitDecisions, f.CongStates,
				c.LimitShare, c.LimitDecisions, c.CongStates)
		}
	}
}

func TestFixtureFlow(t *testing.T) {
	dir := t.TempDir()
	if _, rerr, cerr := export(t, fixture(t, "alpha"), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	flows := read[flowRow](t, dir, "flows")
	if len(flows) != 1 {
		t.Fatalf("%d flows: %+v", len(flows), flows)
	}
	if f := flows[0]; f.BytesAcked == nil || *f.BytesAcked != 2_000_000 || f.FirstNs != wall+100_000 || f.LastNs != wall+3_100_000_000 ||
		!near(f.LimitShare.Sndbuf, 1.2/1.9) || f.CongStates["Recovery"] != 1 || f.NetnsName != "lab-snd" {
		t.Errorf("fixture flow: %+v", f)
	}
}

func TestSeriesSpreadOverSeconds(t *testing.T) {
	dir := t.TempDir()
	if _, rerr, cerr := export(t, fixture(t, "alpha"), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	rows := read[flowSeriesRow](t, dir, "flow_series")
	if len(rows) != 3 {
		t.Fatalf("flow_series: %d rows, want seconds 0, 1 and 2: %+v", len(rows), rows)
	}
	const sndbufBytes, cwndBytes = 1000 * 1448, 700 * 1448
	type want struct {
		sent, acked      float64
		sndbufNs, cwndNs int64
		retrans          int64
		cwnd, inFlight   int64 // -1: null
		srtt             float64
	}
	wants := []want{
		{sent: sndbufBytes * 8 / 12, acked: 1_000_000, sndbufNs: 800_000_000, cwnd: 20, inFlight: 18, srtt: 100},
		{sent: sndbufBytes*4/12 + cwndBytes*6/7, acked: 1_000_000, sndbufNs: 400_000_000, cwndNs: 600_000_000, cwnd: 30, inFlight: 0, srtt: 300},
		{sent: cwndBytes * 1 / 7, cwndNs: 100_000_000, retrans: 7, cwnd: 15, inFlight: 10},
	}
	for i, r := range rows {
		w := wants[i]
		if r.IntervalStartNs != wall+int64(i)*1e9 || r.Local != "10.200.0.1:40000" || r.NetnsName != "lab-snd" ||
			!near(r.BytesSent, w.sent) || !near(r.BytesAcked, w.acked) || r.LimitNs.Sndbuf != w.sndbufNs ||
			r.LimitNs.Cwnd != w.cwndNs || r.RetransSegs != w.retrans {
			t.Errorf("second %d: %+v, want %+v", i, r, w)
		}
		if r.Cwnd == nil || *r.Cwnd != w.cwnd || r.InFlight == nil || *r.InFlight != w.inFlight {
			t.Errorf("second %d: cwnd %v in flight %v, want %d %d", i, r.Cwnd, r.InFlight, w.cwnd, w.inFlight)
		}
		if (r.SrttAvgUs == nil) != (w.srtt == 0) || r.SrttAvgUs != nil && *r.SrttAvgUs != w.srtt {
			t.Errorf("second %d: srtt %v, want %v", i, r.SrttAvgUs, w.srtt)
		}
	}
	// Second 2 saw the cwnd of tcp_cong after tcp_sendlim's: the last one reported.
	devs := read[deviceSeriesRow](t, dir, "device_series")
	if len(devs) != 1 {
		t.Fatalf("device_series: %d rows: %+v", len(devs), devs)
	}
	d := devs[0]
	if d.IntervalStartNs != wall+2e9 || d.Dev != "skbs1" || d.XmitSegs != 3000 || d.XmitSkbs != 100 || d.XmitSegsPerSkb != 30 ||
		d.XmitPPS != 6000 || d.RecvSegs != 50 || d.RecvPPS != 50 || d.RecvSegsPerSkb != 1 {
		t.Errorf("device_series: %+v", d)
	}
}

// TestSeriesSumToTotals spreads spans over many seconds: the series add up
// to the events' totals and to stat's.
func TestSeriesSumToTotals(t *testing.T) {
	var buf bytes.Buffer
	w := fixtureWriter(t, &buf, "alpha")
	a := tracetest.Addrs(netip.MustParseAddrPort("[fd00::1]:40000"), netip.MustParseAddrPort("[fd00::2]:5201"), fixNetns)
	var sentBytes, limitNs, devBytes int64
	begin := uint64(123_456_789)
	for seq := uint64(0); seq < 400; seq += 2 {
		end := begin + 7_777_777*(seq%50+1)
		ev := tracetest.Sendlim(seq, end, begin, 0, fixSock, a, uint8(seq%uint64(event.SendlimCount)), 3, uint32(seq))
		if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
			t.Fatal(err)
		}
		sentBytes += int64(seq) * 1448
		limitNs += int64(end - begin)
		dev := &wire.DevEvent{Hdr: hdr(seq+1, end, 1, event.TypeDevRecv), BeginNs: begin, Name: name16("eth0"),
			Skbs: seq + 1, Segs: 2 * (seq + 1), Bytes: 1000 * seq}
		if err := w.Event(uint16(event.TypeDevRecv), dev); err != nil {
			t.Fatal(err)
		}
		devBytes += int64(1000 * seq)
		begin = end
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, rerr, cerr := export(t, buf.Bytes(), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	rows := read[flowSeriesRow](t, dir, "flow_series")
	var sent float64
	var ns int64
	for i, r := range rows {
		if i > 0 && r.IntervalStartNs != rows[i-1].IntervalStartNs+1e9 {
			t.Fatalf("row %d starts at %d after %d", i, r.IntervalStartNs, rows[i-1].IntervalStartNs)
		}
		sent += r.BytesSent
		l := r.LimitNs
		ns += l.OK + l.Cwnd + l.Swnd + l.Nagle + l.Pacing + l.TSQ + l.Sndbuf + l.App + l.Cork + l.XmitFail + l.RTO
	}
	if !near(sent, float64(sentBytes)) || ns != limitNs {
		t.Errorf("series: %.0f bytes sent, %d ns in runs; events: %d, %d", sent, ns, sentBytes, limitNs)
	}
	if len(rows) < 30 {
		t.Errorf("%d seconds of series, want the spans' 30 or more", len(rows))
	}
	var recv float64
	for _, d := range read[deviceSeriesRow](t, dir, "device_series") {
		recv += d.RecvBytes
	}
	if !near(recv, float64(devBytes)) {
		t.Errorf("device series: %.0f bytes received, events %d", recv, devBytes)
	}
}

// TestReasonColumns: every send-limit reason has its column, under its name.
func TestReasonColumns(t *testing.T) {
	rt := reflect.TypeFor[reasons[int64]]()
	if rt.NumField() != event.SendlimCount {
		t.Fatalf("%d reason columns for %d reasons", rt.NumField(), event.SendlimCount)
	}
	for r := range event.SendlimCount {
		var v [event.SendlimCount]int64
		v[r] = 1
		var got reasons[int64]
		got.set(&v)
		rv := reflect.ValueOf(got)
		name := event.SendlimReason(r).String()
		found := false
		for i := range rt.NumField() {
			col, _, _ := strings.Cut(rt.Field(i).Tag.Get("parquet"), ",")
			want := int64(0)
			if col == name {
				want, found = 1, true
			}
			if v := rv.Field(i).Int(); v != want {
				t.Errorf("reason %s: column %s is %d, want %d", name, col, v, want)
			}
		}
		if !found {
			t.Errorf("reason %s has no column", name)
		}
	}
}

// TestDamagedTraceKeepsWhatWasRead cuts the fixture inside its second
// block: Replay fails after the first block's events, and Close still
// leaves readable tables of them.
func TestDamagedTraceKeepsWhatWasRead(t *testing.T) {
	data := fixture(t, "alpha")
	dir := t.TempDir()
	sum, rerr, cerr := export(t, data[:len(data)-100], dir)
	var terr *trace.TruncatedError
	var ferr *trace.FormatError
	if !errors.As(rerr, &terr) && !errors.As(rerr, &ferr) {
		t.Fatalf("replay of a cut trace: %v", rerr)
	}
	if cerr != nil {
		t.Fatalf("close: %v", cerr)
	}
	if sum.Matched != 5 {
		t.Fatalf("%d events before the damage, want the first block's 5", sum.Matched)
	}
	if n := len(read[tcpSendlimRow](t, dir, "tcp_sendlim")); n != 2 {
		t.Errorf("tcp_sendlim: %d rows, want 2", n)
	}
	if n := len(read[tcpConnRow](t, dir, "tcp_conn")); n != 1 {
		t.Errorf("tcp_conn: %d rows, want 1", n)
	}
	if _, err := os.Stat(filePath(dir, "skb_drop")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("skb_drop.parquet of a family never read: %v", err)
	}
	flows := read[flowRow](t, dir, "flows")
	if len(flows) != 1 || flows[0].BytesAcked == nil || *flows[0].BytesAcked != 2_000_000 || flows[0].Host != "alpha" {
		t.Errorf("flows: %+v", flows)
	}
	if n := len(read[flowSeriesRow](t, dir, "flow_series")); n != 3 {
		t.Errorf("flow_series: %d rows, want 3", n)
	}
}

// TestExportReplacesPrevious: a trace without drops exported where one
// with drops was leaves no skb_drop table behind.
func TestExportReplacesPrevious(t *testing.T) {
	dir := t.TempDir()
	if _, rerr, cerr := export(t, fixture(t, "alpha"), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	var buf bytes.Buffer
	w := fixtureWriter(t, &buf, "beta")
	a := tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 1)
	if err := w.Event(uint16(event.TypeTCPSendlim), tracetest.Sendlim(0, 2000, 1000, 0, 1, a, 0, 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, rerr, cerr := export(t, buf.Bytes(), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"device_series.parquet", "flow_series.parquet", "flows.parquet", "tcp_sendlim.parquet"}
	if !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if rows := read[metaCols](t, dir, "flows"); len(rows) != 1 || rows[0].Host != "beta" {
		t.Errorf("flows: %+v", rows)
	}
}

func TestNewFailsOnAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(path, analyze.NewSummary())
	if err == nil || !strings.HasPrefix(err.Error(), "creating the export directory: ") {
		t.Errorf("New on a file: %v", err)
	}
}

// TestRowGroupsBoundTables: a family's rows go out in row groups of
// rowGroupRows as they arrive, not in one at Close.
func TestRowGroupsBoundTables(t *testing.T) {
	dir := t.TempDir()
	sum, rerr, cerr := export(t, bigTrace(t, 250_000), dir)
	if rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	f, err := os.Open(filePath(dir, "tcp_sendlim"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := pq.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	rows := int64(sum.ByType[event.TypeTCPSendlim])
	want := int((rows + rowGroupRows - 1) / rowGroupRows)
	if got := len(pf.RowGroups()); want < 2 || got != want || pf.NumRows() != rows {
		t.Errorf("%d rows in %d row groups, want %d in %d", pf.NumRows(), got, rows, want)
	}
}

// TestSeriesStartAtTheRecording: a run that claims to have begun long
// before the recording (its boot-clock begin time is 0, 1000 s before the
// recorder's anchor) is spread from the recording's start.
func TestSeriesStartAtTheRecording(t *testing.T) {
	var buf bytes.Buffer
	h := tracetest.Header(trace.NativeOrder)
	h.BootAnchorNs = 1000e9
	tw, err := trace.NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	w := &tracetest.Writer{Writer: tw}
	a := tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 1)
	if err := w.Event(uint16(event.TypeTCPSendlim), tracetest.Sendlim(0, 1000e9+1_500_000_000, 0, 0, 1, a, 0, 1, 300)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, rerr, cerr := export(t, buf.Bytes(), dir); rerr != nil || cerr != nil {
		t.Fatalf("replay: %v, close: %v", rerr, cerr)
	}
	rows := read[flowSeriesRow](t, dir, "flow_series")
	if len(rows) != 2 || rows[0].IntervalStartNs != wall || rows[0].LimitNs.OK != 1e9 || rows[1].LimitNs.OK != 500e6 ||
		!near(rows[0].BytesSent, 200*1448) || !near(rows[1].BytesSent, 100*1448) {
		t.Errorf("flow_series: %+v", rows)
	}
}

// same says a nullable column holds what stat says: both null, or equal.
func same[C int64 | float64, V uint32 | uint64 | float64](col *C, v *V) bool {
	if col == nil || v == nil {
		return col == nil && v == nil
	}
	return float64(*col) == float64(*v)
}
