package perfetto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// export replays a trace through an exporter, as the CLI does.
func export(t testing.TB, data []byte) ([]byte, *analyze.Summary, error) {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	sum := analyze.NewSummary()
	x := New(&out, sum)
	rerr := analyze.Replay(r, &event.Filter{}, sum, x.Add)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), sum, rerr
}

// Times of the fixture, boot ns; wall-clock is 1.7e18 ns later.
const (
	ms         = 1_000_000
	wall       = 1_700_000_000_000_000_000
	sndNs      = 4026532001
	rcvNs      = 4026532002
	routerNs   = 4026532003
	sndSock    = 0xffff888100000000
	rcvSock    = 0xffff888200000000
	listenSock = 0xffff888300000000
	dropLoc    = 0xffffffff81abcdef
	otherLoc   = 0xffffffff81000010
	softirqCPU = 1
)

var (
	sndAddr   = netip.MustParseAddrPort("10.0.0.1:40000")
	rcvAddr   = netip.MustParseAddrPort("10.0.0.2:5201")
	mappedRcv = netip.MustParseAddrPort("[::ffff:10.0.0.2]:5201")
	mappedSnd = netip.MustParseAddrPort("[::ffff:10.0.0.1]:40000")
)

func hdr(seq, ts uint64, cpu uint32, typ event.Type) wire.EventHeader {
	return wire.EventHeader{Seq: seq, TsNs: ts, Cpu: cpu, Type: uint16(typ)}
}

// fixture is a lab-like run: a sender whose runs go ok, cwnd (which began,
// as the kernel stamps runs, 200 ns before the ok run's end), sndbuf, and
// after lost events app; an RTT sample on either side of the sndbuf run, a
// retransmit and a congestion-state change; its receiver (an IPv6 socket
// with mapped addresses, in a namespace named only after its first events)
// with an app run; drops of the flow's packets in each namespace and in a
// router's, an unrelated drop, a reset for no socket and one a listener
// sent; NET_RX softirq time with an idle interval, and softirq events
// without a share (an empty interval, a vector not the network's). The
// first block holds the events up to seq 9.
func fixture(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	snd := tracetest.Addrs(sndAddr, rcvAddr, sndNs)
	sndUnbound := tracetest.Addrs(netip.AddrPortFrom(sndAddr.Addr(), 0), rcvAddr, sndNs)
	rcv := tracetest.Addrs(mappedRcv, mappedSnd, rcvNs)
	data := tracetest.Addrs(sndAddr, rcvAddr, 0)
	conn, lim := uint16(event.TypeTCPConn), uint16(event.TypeTCPSendlim)

	must(w.AppendNetns(trace.Netns{Inode: sndNs, Name: "lab-snd"}))
	must(w.AppendNetns(trace.Netns{Inode: routerNs, Name: "router \"r1\"\t\\"}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumDropReason, Names: map[uint32]string{2: "NOT_SPECIFIED", 16: "TCP_ZEROWINDOW"}}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumResetReason, Names: map[uint32]string{2: "NO_SOCKET"}}))
	must(w.AppendSymbol(trace.Symbol{Addr: dropLoc, Name: "tcp_data_queue+0x4a"}))

	must(w.Event(conn, tracetest.Conn(0, 1*ms, 0, sndSock, sndUnbound, 7, 2, 100, "iperf3")))
	must(w.Event(conn, tracetest.Conn(1, 1*ms+100_000, 1, rcvSock, rcv, 10, 3, 0, "")))
	must(w.Event(conn, tracetest.Conn(2, 1*ms+200_000, 0, sndSock, snd, 2, 1, 100, "iperf3")))
	must(w.Event(lim, tracetest.Sendlim(3, 10*ms+200, 2*ms, 0, sndSock, snd, uint8(event.SendlimOK), 100, 80)))
	must(w.Event(lim, tracetest.Sendlim(4, 30*ms, 10*ms, 0, sndSock, snd, uint8(event.SendlimCwnd), 40, 200)))
	rtt := func(seq, ts uint64, acked uint64) *wire.TcpRttEvent {
		return &wire.TcpRttEvent{Hdr: hdr(seq, ts, 0, event.TypeTCPRTT), Sock: sndSock, Addrs: snd,
			SrttUs: 500, MinRttUs: 90, Cwnd: 20, InFlight: 18, BytesAcked: acked}
	}
	must(w.Event(uint16(event.TypeTCPRTT), rtt(5, 30*ms, 1_000_000)))
	must(w.Event(lim, tracetest.Sendlim(6, 80*ms, 30*ms, 0, sndSock, snd, uint8(event.SendlimSndbuf), 700, 300)))
	must(w.Event(uint16(event.TypeTCPRetrans), &wire.TcpRetransEvent{Hdr: hdr(7, 80*ms, 0, event.TypeTCPRetrans),
		Sock: sndSock, BeginNs: 75 * ms, Addrs: snd, Cnt: 3, Skbs: 1, State: 1}))
	must(w.Event(uint16(event.TypeTCPRTT), rtt(8, 80*ms, 2_000_000)))
	must(w.Event(lim, tracetest.Sendlim(9, 100*ms, 1*ms, 1, rcvSock, rcv, uint8(event.SendlimApp), 900, 0)))
	must(w.Flush())

	must(w.AppendNetns(trace.Netns{Inode: rcvNs, Name: "lab-rcv"}))
	drop := func(seq uint64, netns, reason uint32, loc uint64, a wire.SockAddrs, l4 uint8) *wire.SkbDropEvent {
		d := &wire.SkbDropEvent{Hdr: hdr(seq, 90*ms, 1, event.TypeSkbDrop), BeginNs: 85 * ms, Location: loc,
			Netns: netns, Reason: reason, Protocol: 0x0800, L4proto: l4, Cnt: uint64(seq), Addrs: a}
		copy(d.Dev[:], []int8{'v', 'e', 't', 'h', '0'})
		return d
	}
	must(w.Event(uint16(event.TypeSkbDrop), drop(10, rcvNs, 16, dropLoc, data, 6)))
	must(w.Event(uint16(event.TypeSkbDrop), drop(11, sndNs, 2, otherLoc, data, 6)))
	must(w.Event(uint16(event.TypeSkbDrop), drop(12, routerNs, 2, otherLoc, data, 6)))
	must(w.Event(uint16(event.TypeSkbDrop), drop(13, routerNs, 99, otherLoc,
		tracetest.Addrs(netip.MustParseAddrPort("10.9.9.9:53"), netip.MustParseAddrPort("10.9.9.8:33333"), 0), 17)))
	must(w.Event(uint16(event.TypeTCPCong), &wire.TcpCongEvent{Hdr: hdr(14, 85*ms, 0, event.TypeTCPCong),
		Sock: sndSock, Addrs: snd, Cwnd: 7, Ssthresh: 7, RtoUs: 204000, State: 3}))
	must(w.Event(uint16(event.TypeTCPReset), &wire.TcpResetEvent{Hdr: hdr(15, 95*ms, 1, event.TypeTCPReset),
		Addrs: tracetest.Addrs(rcvAddr, netip.MustParseAddrPort("10.0.0.7:1234"), rcvNs), Reason: 2, Dir: event.ResetSent, State: 7}))
	softirq := func(seq, begin, end, busy uint64) *wire.SoftirqEvent {
		return &wire.SoftirqEvent{Hdr: hdr(seq, end, softirqCPU, event.TypeSoftirq), BeginNs: begin, Entries: 10, TimeNs: busy, Vec: 3}
	}
	must(w.Event(uint16(event.TypeSoftirq), softirq(16, 0, 100*ms, 10*ms)))
	must(w.Event(uint16(event.TypeSoftirq), softirq(17, 100*ms, 200*ms, 20*ms)))
	must(w.Event(uint16(event.TypeSoftirq), softirq(18, 300*ms, 400*ms, 5*ms)))
	must(w.Event(uint16(event.TypeSoftirq), &wire.SoftirqEvent{Hdr: hdr(19, 200*ms, 0, event.TypeSoftirq), BeginNs: 200 * ms, Vec: 2}))
	must(w.Event(uint16(event.TypeSoftirq), &wire.SoftirqEvent{Hdr: hdr(20, 200*ms, 0, event.TypeSoftirq), BeginNs: 100 * ms, TimeNs: ms, Vec: 1}))
	must(w.Event(uint16(event.TypeTCPReset), &wire.TcpResetEvent{Hdr: hdr(21, 96*ms, 1, event.TypeTCPReset), Sock: listenSock,
		Addrs: tracetest.Addrs(rcvAddr, netip.MustParseAddrPort("10.0.0.7:1234"), rcvNs), Reason: 2, Dir: event.ResetSent, State: 10}))
	must(w.Event(lim, tracetest.Sendlim(22, 160*ms, 150*ms, 0, sndSock, snd, uint8(event.SendlimApp), 5, 10)))
	must(w.Event(conn, tracetest.Conn(23, 400*ms, 0, sndSock, snd, 1, 4, 100, "iperf3")))
	must(w.AppendEnd(trace.End{NextSeq: 24, BootNs: 400 * ms}))
	must(w.Flush())
	return buf.Bytes()
}

func TestExportFixture(t *testing.T) {
	out, _, err := export(t, fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	d := validate(t, out)
	if d.Unit != "ns" {
		t.Errorf("displayTimeUnit %q", d.Unit)
	}
	for k, want := range map[string]any{"hostname": "fixture", "kernel": "6.18.0", "machine": "x86_64", "command": "skbtrace record",
		"tool": "tracetest", "recording_start": "2023-11-14T22:13:20Z", "ended": true} {
		if d.Metadata[k] != want {
			t.Errorf("metadata %s = %v, want %v", k, d.Metadata[k], want)
		}
	}
	if got := num(t, d.Metadata["events"]); got != 24 {
		t.Errorf("metadata events = %v, want 24", got)
	}

	snd := d.pidNamed(t, "netns lab-snd")
	rcv := d.pidNamed(t, "netns lab-rcv") // named only after its first events
	router := d.pidNamed(t, "netns router \"r1\"\t\\")
	cpus := d.pidNamed(t, "CPUs")
	// The sender's first event had no local port yet: its thread is renamed.
	sender := d.tidNamed(t, "10.0.0.1:40000 -> 10.0.0.2:5201")
	receiver := d.tidNamed(t, "[::ffff:10.0.0.2]:5201 -> [::ffff:10.0.0.1]:40000")
	if len(d.names("thread_name")) != 2 {
		t.Errorf("threads %v, want the two connections'", d.names("thread_name"))
	}

	type span struct {
		name        string
		tid         uint32
		begin, dur  int64
		cnt, sent   float64
		cwnd, unsnt float64
	}
	var spans []span
	for _, e := range d.Events {
		if e.Ph == "X" {
			if e.Cat != "tcp_sendlim" {
				t.Errorf("span %q of category %q", e.Name, e.Cat)
			}
			spans = append(spans, span{e.Name, e.Tid, e.Ts - wall, e.Dur, num(t, e.Args["cnt"]), num(t, e.Args["sent_pkts"]),
				num(t, e.Args["cwnd"]), num(t, e.Args["unsent"])})
		}
	}
	wantSpans := []span{
		{"ok", sender, 2 * ms, 8*ms + 200, 100, 80, 10, 3000},
		{"cwnd", sender, 10*ms + 200, 20*ms - 200, 40, 200, 10, 3000},
		{"sndbuf", sender, 30 * ms, 50 * ms, 700, 300, 10, 3000},
		{"app", receiver, 1 * ms, 99 * ms, 900, 0, 10, 3000},
		{"app", sender, 150 * ms, 10 * ms, 5, 10, 10, 3000},
	}
	if fmt.Sprint(spans) != fmt.Sprint(wantSpans) {
		t.Errorf("spans\n%v, want\n%v", spans, wantSpans)
	}
	for _, e := range d.find("X", "sndbuf") {
		if e.Pid != snd {
			t.Errorf("sndbuf span in pid %d, want the sender's namespace %d", e.Pid, snd)
		}
	}

	const label = "10.0.0.1:40000->10.0.0.2:5201"
	for _, c := range []struct {
		name, key string
		want      [][2]float64
	}{
		// A value is written when it changes.
		{"cwnd " + label, "segments", [][2]float64{{10*ms + 200, 10}, {30 * ms, 20}, {80 * ms, 10}, {80 * ms, 20}, {85 * ms, 7}, {160 * ms, 10}}},
		{"inflight " + label, "segments", [][2]float64{{10*ms + 200, 10}, {30 * ms, 18}, {80 * ms, 10}, {80 * ms, 18}, {160 * ms, 10}}},
		{"srtt " + label, "us", [][2]float64{{30 * ms, 500}}},
		// Segments times the MSS over each run (as recorded); zero in the
		// gap the lost events left and after the last run.
		{"throughput sent " + label, "bit/s", [][2]float64{
			{2 * ms, math.Round(80 * 1448 * 8 / 0.0080002)}, {10*ms + 200, 200 * 1448 * 8 / 0.020},
			{30 * ms, 300 * 1448 * 8 / 0.050}, {80 * ms, 0}, {150 * ms, 10 * 1448 * 8 / 0.010}, {160 * ms, 0}}},
		// 1 MB acknowledged in the 50 ms between the samples.
		{"throughput acked " + label, "bit/s", [][2]float64{{30 * ms, 160e6}, {80 * ms, 0}}},
		// The idle interval from 200 ms to 300 ms is zero.
		{"softirq CPU 1", "NET_RX", [][2]float64{{0, 0.1}, {100 * ms, 0.2}, {200 * ms, 0}, {300 * ms, 0.05}, {400 * ms, 0}}},
	} {
		if got := d.counter(t, c.name, c.key); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("counter %q %s\n%v, want\n%v", c.name, c.key, got, c.want)
		}
	}
	for _, e := range d.Events {
		if e.Ph != "C" {
			continue
		}
		wantPid, wantTid := snd, sender
		if strings.HasPrefix(e.Name, "softirq") {
			wantPid, wantTid = cpus, cpus
		} else if !strings.HasSuffix(e.Name, label) {
			wantPid, wantTid = rcv, receiver
		}
		if e.Pid != wantPid || e.Tid != wantTid {
			t.Errorf("counter %q on %d/%d, want %d/%d", e.Name, e.Pid, e.Tid, wantPid, wantTid)
		}
		if strings.HasPrefix(e.Name, "throughput") && e.Tid == receiver {
			t.Errorf("the receiver, which sent nothing, has counter %q", e.Name)
		}
	}

	type instant struct {
		name, s  string
		pid, tid uint32
		at       int64
	}
	var instants []instant
	for _, e := range d.Events {
		if e.Ph == "i" {
			instants = append(instants, instant{e.Name, e.S, e.Pid, e.Tid, e.Ts - wall})
		}
	}
	wantInstants := []instant{
		{"SYN_SENT", "t", snd, sender, 1 * ms},
		{"SYN_RECV", "t", rcv, receiver, 1*ms + 100_000},
		{"ESTABLISHED", "t", snd, sender, 1*ms + 200_000},
		{"retrans", "t", snd, sender, 80 * ms},
		// The data's drop in the receiver's namespace is the receiver's,
		// in the sender's the sender's; the router's, in no namespace of a
		// connection, the packet's sender's.
		{"drop TCP_ZEROWINDOW", "t", rcv, receiver, 90 * ms},
		{"drop NOT_SPECIFIED", "t", snd, sender, 90 * ms},
		{"drop NOT_SPECIFIED", "t", snd, sender, 90 * ms},
		{"drop 99", "p", router, router, 90 * ms},
		{"CA Recovery", "t", snd, sender, 85 * ms},
		{"reset sent", "p", rcv, rcv, 95 * ms},
		{"reset sent", "p", rcv, rcv, 96 * ms},
		{"FIN_WAIT1", "t", snd, sender, 400 * ms},
	}
	if fmt.Sprint(instants) != fmt.Sprint(wantInstants) {
		t.Errorf("instants\n%v, want\n%v", instants, wantInstants)
	}
	est := d.find("i", "ESTABLISHED")[0].Args
	if est["from"] != "SYN_SENT" || est["comm"] != "iperf3" || num(t, est["pid"]) != 100 {
		t.Errorf("ESTABLISHED args %v", est)
	}
	if a := d.find("i", "SYN_RECV")[0].Args; a["context"] != "softirq" {
		t.Errorf("SYN_RECV args %v", a)
	}
	if a := d.find("i", "retrans")[0].Args; num(t, a["segs"]) != 3 || num(t, a["interval_us"]) != 5000 || a["state"] != "ESTABLISHED" {
		t.Errorf("retrans args %v", a)
	}
	zw := d.find("i", "drop TCP_ZEROWINDOW")[0].Args
	if zw["location"] != "tcp_data_queue+0x4a" || zw["dev"] != "veth0" || zw["protocol"] != "ipv4/tcp" || num(t, zw["cnt"]) != 10 ||
		zw["src"] != "10.0.0.1:40000" || zw["dst"] != "10.0.0.2:5201" {
		t.Errorf("drop args %v", zw)
	}
	if a := d.find("i", "drop 99")[0].Args; a["location"] != "0xffffffff81000010" || a["protocol"] != "ipv4/udp" || num(t, a["reason"]) != 99 {
		t.Errorf("unmatched drop args %v", a)
	}
	if a := d.find("i", "reset sent")[0].Args; a["reason"] != "NO_SOCKET" || a["path"] != "no_socket" || a["peer"] != "10.0.0.7:1234" {
		t.Errorf("reset args %v", a)
	}
	if a := d.find("i", "reset sent")[1].Args; a["state"] != "LISTEN" || a["local"] != "10.0.0.2:5201" {
		t.Errorf("listener's reset args %v", a)
	}
	for _, e := range d.Events {
		if e.Ph == "C" && strings.HasPrefix(e.Name, "softirq") && e.Name != "softirq CPU 1" {
			t.Errorf("a softirq event without a share made counter %q", e.Name)
		}
	}
	if a := d.find("i", "CA Recovery")[0].Args; num(t, a["cwnd"]) != 7 || num(t, a["rto_us"]) != 204000 {
		t.Errorf("CA Recovery args %v", a)
	}
}

// TestRenamesSortAfterFirstNames: a name learnt later must reach importers
// that apply metadata in ts order, so the renaming event sorts after the
// first one, also when that one was at the latest time written: a
// connection's first event without its local port, a namespace named after
// its only event.
func TestRenamesSortAfterFirstNames(t *testing.T) {
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	unbound := tracetest.Addrs(netip.AddrPortFrom(sndAddr.Addr(), 0), rcvAddr, sndNs)
	bound := tracetest.Addrs(sndAddr, rcvAddr, sndNs)
	for _, err := range []error{
		w.Event(uint16(event.TypeTCPConn), tracetest.Conn(0, 1*ms, 0, sndSock, unbound, 7, 2, 100, "iperf3")),
		w.Event(uint16(event.TypeTCPConn), tracetest.Conn(1, 1*ms, 0, sndSock, bound, 2, 1, 100, "iperf3")),
		w.AppendNetns(trace.Netns{Inode: sndNs, Name: "lab-snd"}),
		w.Flush(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := export(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	d := validate(t, out)
	byKind := map[string][]traceEvent{}
	for _, e := range d.Events {
		if e.Ph == "M" {
			byKind[e.Name] = append(byKind[e.Name], e)
		}
	}
	for kind, want := range map[string][]string{
		"process_name": {"netns 4026532001", "netns lab-snd"},
		"thread_name":  {"10.0.0.1:0 -> 10.0.0.2:5201", "10.0.0.1:40000 -> 10.0.0.2:5201"},
	} {
		ms := byKind[kind]
		if len(ms) != 2 || ms[0].Args["name"] != want[0] || ms[1].Args["name"] != want[1] {
			t.Errorf("%s events %v, want names %q", kind, ms, want)
			continue
		}
		if ms[1].Ts <= ms[0].Ts {
			t.Errorf("%s %q at %d does not sort after %q at %d", kind, want[1], ms[1].Ts, want[0], ms[0].Ts)
		}
	}
	if got := d.names("thread_name"); got[d.find("i", "ESTABLISHED")[0].Tid] != "10.0.0.1:40000 -> 10.0.0.2:5201" {
		t.Errorf("thread names %v", got)
	}
}

func TestDamagedTraceStillGivesADocument(t *testing.T) {
	data := fixture(t)
	// Cut the second block short: its records are lost, the first block's stay.
	cut := data[:len(data)-40]
	out, sum, err := export(t, cut)
	var torn *trace.TruncatedError
	if !errors.As(err, &torn) {
		t.Fatalf("replay of a cut trace: %v, want a truncated trace", err)
	}
	d := validate(t, out)
	if len(d.find("X", "sndbuf")) != 1 || len(d.find("X", "app")) != 1 {
		t.Errorf("the first block's spans are missing")
	}
	if len(d.find("i", "FIN_WAIT1")) != 0 || len(d.find("C", "softirq CPU 1")) != 0 {
		t.Errorf("events of the torn block were exported")
	}
	if d.Metadata["ended"] != false || num(t, d.Metadata["events"]) != 10 || sum.Matched != 10 {
		t.Errorf("metadata %v, want ended false and %d events", d.Metadata, sum.Matched)
	}
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriteErrorStopsTheExport(t *testing.T) {
	x := New(failingWriter{}, analyze.NewSummary())
	ev := sendlimEvent()
	var err error
	for i := 0; i < 10_000 && err == nil; i++ {
		err = x.Add(ev)
	}
	if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "writing the perfetto trace") {
		t.Fatalf("Add after a failed write: %v", err)
	}
	if err := x.Close(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Close after a failed write: %v", err)
	}
}

func sendlimEvent() *event.Event {
	return &event.Event{Type: event.TypeTCPSendlim, Time: wall + 2*ms, Begin: wall + ms, Sendlim: event.TCPSendlim{
		Socket: event.Socket{Sock: sndSock, Local: sndAddr, Peer: rcvAddr, Netns: sndNs},
		Reason: event.SendlimCwnd, Begin: wall + ms, Cnt: 3, SentPkts: 10, Cwnd: 10, InFlight: 10, MSS: 1448,
	}}
}

// TestAddAllocatesNothing: once a connection, namespace and CPU are known,
// an event of each exported kind costs no allocation.
func TestAddAllocatesNothing(t *testing.T) {
	sum := analyze.NewSummary()
	sum.Names.DropReasons[2] = "NOT_SPECIFIED"
	x := New(io.Discard, sum)
	sock := event.Socket{Sock: sndSock, Local: sndAddr, Peer: rcvAddr, Netns: sndNs}
	lim := sendlimEvent()
	rtt := &event.Event{Type: event.TypeTCPRTT, Socket: sock, RTT: wire.TcpRttEvent{SrttUs: 100, Cwnd: 10}}
	drop := &event.Event{Type: event.TypeSkbDrop, Socket: event.Socket{Local: sndAddr, Peer: rcvAddr},
		Drop: wire.SkbDropEvent{Netns: sndNs, Reason: 2, Cnt: 1, Protocol: 0x0800, L4proto: 6}}
	copy(drop.Drop.Dev[:], []int8{'e', 't', 'h', '0'})
	lost := &event.Event{Type: event.TypeSkbDrop, Socket: event.Socket{Local: netip.MustParseAddrPort("[2001:db8::1]:53"),
		Peer: netip.MustParseAddrPort("[2001:db8::2]:4000")}, Drop: wire.SkbDropEvent{Netns: sndNs, Reason: 7, Location: dropLoc, Protocol: 0x86dd, L4proto: 17}}
	soft := &event.Event{Type: event.TypeSoftirq, CPU: 3, Softirq: wire.SoftirqEvent{Vec: 3, TimeNs: 10}}
	conn := &event.Event{Type: event.TypeTCPConn, Conn: event.TCPConn{Socket: sock, Old: 2, New: 1, Pid: 7, Comm: [16]byte{'c', 'a', 't'}}}
	step := int64(0)
	for name, ev := range map[string]*event.Event{"tcp_sendlim": lim, "tcp_rtt": rtt, "skb_drop": drop, "unmatched skb_drop": lost, "softirq": soft, "tcp_conn": conn} {
		advance := func() {
			step += ms
			ev.Begin, ev.Time, ev.Sendlim.Begin = wall+step, wall+step+ms, wall+step
			ev.RTT.BytesAcked += 1000
		}
		advance()
		if err := x.Add(ev); err != nil { // the first makes the connection and the namespace
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(1000, func() {
			advance()
			if err := x.Add(ev); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per event", name, n)
		}
	}
}

func TestAppendString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                  "plain",
		"quote \" backslash \\ slash /":          "quote \" backslash \\ slash /",
		"tab\tnew\nline\rcr\x00nul\x1fus\x7fdel": "tab\tnew\nline\rcr\x00nul\x1fus\x7fdel",
		"héllo wörld ✓ 𝄞":                        "héllo wörld ✓ 𝄞",
		"bad \xff\xfe utf-8 \xe2\x82":            "bad \ufffd\ufffd utf-8 \ufffd\ufffd",
		"\u2028\u2029":                           "\u2028\u2029",
	} {
		b := append(appendString([]byte{'"'}, in), '"')
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("%q: %s is not a JSON string: %v", in, b, err)
		} else if got != want {
			t.Errorf("%q came back as %q, want %q", in, got, want)
		}
		if !bytes.Equal(appendString(nil, []byte(in)), b[1:len(b)-1]) {
			t.Errorf("%q: bytes and string differ", in)
		}
	}
}

func TestAppendMicros(t *testing.T) {
	for ns, want := range map[int64]string{0: "0.000", 999: "0.999", 1000: "1.000", 1_234_567: "1234.567",
		wall + 5: "1700000000000000.005", -1500: "-1.500"} {
		if got := string(appendMicros(nil, ns)); got != want {
			t.Errorf("appendMicros(%d) = %s, want %s", ns, got, want)
		}
	}
}

// TestBothByteOrders: the export does not depend on the recording's byte order.
func TestBothByteOrders(t *testing.T) {
	var outs [2][]byte
	for i, o := range []trace.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		var buf bytes.Buffer
		w, err := tracetest.NewWriter(&buf, o)
		if err != nil {
			t.Fatal(err)
		}
		a := tracetest.Addrs(sndAddr, rcvAddr, sndNs)
		if err := w.Event(uint16(event.TypeTCPSendlim), tracetest.Sendlim(0, 3*ms, 1*ms, 0, sndSock, a, uint8(event.SendlimSndbuf), 5, 6)); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if outs[i], _, err = export(t, buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		validate(t, outs[i])
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Errorf("little and big endian exports differ:\n%s\n%s", outs[0], outs[1])
	}
}
