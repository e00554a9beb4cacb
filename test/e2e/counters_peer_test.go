package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/tcppeer"
)

// Events against the kernel's own counters, from scripted peers: resets and
// their addresses under --filter-netns, RTT against tcp_info, and stat's
// connections.

// recordPeer opens a scripted peer and records its namespace.
func recordPeer(t *testing.T, families string) (*tcppeer.Peer, *recorder, host.Counters) {
	t.Helper()
	requireFamilies(t, "tcp_reset", "tcp_rtt", "tcp_conn")
	peer, err := tcppeer.Open(tcppeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := peer.Close(); err != nil {
			t.Errorf("removing the peer: %v", err)
		}
	})
	rec := startRecord(t, "-e", families, "--filter-netns", peer.Name())
	before, err := peer.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return peer, rec, before
}

func stopAndParse(t *testing.T, rec *recorder) []map[string]any {
	t.Helper()
	rec.stop(t, syscall.SIGINT)
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	return events
}

func resetsSent(events []map[string]any) []map[string]any {
	var out []map[string]any
	for _, ev := range events {
		if ev["action"] == "tcp_reset" && ev["dir"] == "sent" {
			out = append(out, ev)
		}
	}
	return out
}

// Resets for segments no socket wants (a closed port, a listener's stray
// ACK) and a reset on close with linger 0: each is in the trace under the
// namespace filter, with the addresses the wire had, as many as TcpOutRsts.
func TestResetsMatchOutRstsUnderTheNamespaceFilter(t *testing.T) {
	peer, rec, before := recordPeer(t, "tcp_reset,tcp_conn,tcp_cong")
	kernel := peer.KernelAddr().String()
	peerAddr := peer.PeerAddr().String()
	h := tcppeer.DefaultHandshake()

	// A SYN to a closed port.
	if _, err := peer.Connect(9, h, 5*time.Second); !errors.Is(err, tcppeer.ErrReset) {
		t.Fatalf("connecting to closed port 9: %v, want a reset", err)
	}
	refused, err := peer.Expect(time.Second, func(s *tcppeer.Segment) bool { return s.Flags&tcppeer.RST != 0 && s.SrcPort == 9 })
	if err != nil {
		t.Fatal(err)
	}
	// An ACK to a listener, for no connection.
	ln, err := peer.ListenInKernel(80)
	if err != nil {
		t.Fatal(err)
	}
	stray := &tcppeer.Segment{SrcPort: 41000, DstPort: 80, Seq: 1, Ack: 1, Flags: tcppeer.ACK, Window: 1000}
	if err := peer.Write(stray); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.ExpectFlags(5*time.Second, tcppeer.RST); err != nil {
		t.Fatalf("no reset for the stray ACK: %v\n%s", err, peer.Dump())
	}
	ln.Close()
	// Close with linger 0 after data: the kernel resets the connection.
	sock, err := peer.DialFromKernel(5000)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := peer.Accept(5000, h, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptLinger(sock.FD, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		t.Fatal(err)
	}
	sock.Close()
	if _, err := conn.ExpectFlags(5*time.Second, tcppeer.RST); err != nil {
		t.Fatalf("no reset on close: %v\n%s", err, peer.Dump())
	}
	after, err := peer.Counters()
	if err != nil {
		t.Fatal(err)
	}
	events := stopAndParse(t, rec)

	// tcp_disconnect() (the linger-0 close) clears the socket's addresses,
	// then sets its congestion state to Open: no event of it.
	for _, ev := range events {
		if ev["action"] == "tcp_cong" {
			if l, p := fmt.Sprint(ev["local"]), fmt.Sprint(ev["peer"]); strings.HasSuffix(l, ":0") || strings.HasSuffix(p, ":0") {
				t.Errorf("tcp_cong of a socket without its ports: local=%s peer=%s %v", l, p, ev)
			}
		}
	}
	rsts := resetsSent(events)
	want := after.Sub(before)["Tcp.OutRsts"]
	if int64(len(rsts)) != want || want != 3 {
		t.Fatalf("%d resets sent in the trace, TcpOutRsts %d (want 3): %v", len(rsts), want, rsts)
	}
	wantPairs := map[string]bool{
		fmt.Sprintf("%s:9 %s:%d", kernel, peerAddr, refused.DstPort):    true,
		fmt.Sprintf("%s:80 %s:41000", kernel, peerAddr):                 true,
		fmt.Sprintf("%s:%d %s:5000", kernel, conn.KernelPort, peerAddr): true,
	}
	for _, r := range rsts {
		pair := fmt.Sprintf("%s %s", r["local"], r["peer"])
		if !wantPairs[pair] {
			t.Errorf("reset %s is none of %v", pair, wantPairs)
		}
		delete(wantPairs, pair)
	}

	// stat: the closed-port and listener resets are no connection but rows
	// of their own; the linger-0 connection is one, with its reset.
	view := statView(t, rec.file)
	if len(view.Connections) != 1 || view.Connections[0].Peer != fmt.Sprintf("%s:5000", peerAddr) || view.Connections[0].Resets != 1 {
		t.Errorf("stat connections %+v, want only the one to port 5000, with 1 reset", view.Connections)
	}
	rows := map[string]uint64{}
	for _, r := range view.Resets {
		rows[r.Owner] += r.Sent
	}
	if rows["no socket"] != 1 || rows["listener"] != 1 {
		t.Errorf("stat's resets without a connection %+v, want 1 for no socket and 1 for the listener", view.Resets)
	}
	checkStatResets(t, view, want, 0)
}

// statView runs stat --json on a trace.
func statView(t *testing.T, file string) report.StatView {
	t.Helper()
	out, err := exec.Command(binary, "stat", "--json", "-i", file).Output()
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	var view report.StatView
	if err := json.Unmarshal(out, &view); err != nil {
		t.Fatalf("stat --json: %v", err)
	}
	return view
}

// checkStatResets: stat counts every reset of the recorded namespace, on
// connections and in the rows without one, as the namespace's TcpOutRsts
// plus the resets received.
func checkStatResets(t *testing.T, view report.StatView, outRsts int64, received int) {
	t.Helper()
	var onConns, rows uint64
	for _, c := range view.Connections {
		onConns += uint64(c.Resets)
	}
	for _, r := range view.Resets {
		rows += r.Sent + r.Received
	}
	t.Logf("stat: %d resets on connections, %d without one; TcpOutRsts %d, %d received", onConns, rows, outRsts, received)
	if onConns+rows != uint64(outRsts)+uint64(received) {
		t.Errorf("stat counts %d resets on connections and %d without one, want TcpOutRsts %d + %d received",
			onConns, rows, outRsts, received)
	}
}

// tcp_rtt's srtt and rttvar are tcp_info's, and the last sample, taken at
// close, has the connection's final bytes_acked.
func TestRTTMatchesTCPInfoAndTheLastACK(t *testing.T) {
	peer, rec, _ := recordPeer(t, "tcp_rtt,tcp_conn")
	sock, err := peer.DialFromKernel(5000, tcppeer.SockOpt{Level: unix.IPPROTO_TCP, Name: unix.TCP_NODELAY, Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := peer.Accept(5000, tcppeer.DefaultHandshake(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Request/response with ACK delays of 20 to 60 ms: srtt and its variation move.
	sent := uint32(0)
	for i := 0; i < 12; i++ {
		if _, err := sock.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		sent += 1000
		if _, err := conn.ExpectData(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(20+20*(i%3)) * time.Millisecond)
		if err := conn.Ack(sent, 65535); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	info, err := sock.TCPInfo()
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Rst(); err != nil { // destroys the socket now, after its last ACK
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	sock.Close()
	events := stopAndParse(t, rec)
	var last map[string]any
	for _, ev := range events {
		if ev["action"] == "tcp_rtt" && ev["local"] == fmt.Sprintf("%s:%d", peer.KernelAddr(), conn.KernelPort) {
			last = ev
		}
	}
	if last == nil {
		t.Fatalf("no tcp_rtt sample of the connection in %d events", len(events))
	}
	srtt, rttvar, acked := last["srtt_us"].(float64), last["rttvar_us"].(float64), last["bytes_acked"].(float64)
	t.Logf("last sample: srtt %v µs rttvar %v µs bytes_acked %v; tcp_info: rtt %d rttvar %d bytes_acked %d",
		srtt, rttvar, acked, info.Rtt, info.Rttvar, info.Bytes_acked)
	if math.Abs(srtt-float64(info.Rtt)) > 1000 || math.Abs(rttvar-float64(info.Rttvar)) > 1000 {
		t.Errorf("srtt %v and rttvar %v µs against tcp_info's %d and %d", srtt, rttvar, info.Rtt, info.Rttvar)
	}
	if uint64(acked) != info.Bytes_acked {
		t.Errorf("last sample's bytes_acked %v, tcp_info's %d", acked, info.Bytes_acked)
	}
}

// dialPeer opens one connection from the kernel to the scripted peer.
func dialPeer(t *testing.T, peer *tcppeer.Peer, port uint16, opts ...tcppeer.SockOpt) (*tcppeer.Socket, *tcppeer.Conn) {
	t.Helper()
	sock, err := peer.DialFromKernel(port, opts...)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := peer.Accept(port, tcppeer.DefaultHandshake(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return sock, conn
}

// Each path that sends or "receives" a reset, and an abort without one,
// against the counters the kernel keeps for it: the peer's RST, data after
// close (TCPAbortOnData, and the kernel's tcp_reset() fires the receive
// tracepoint though no RST came), close with unread data (TCPAbortOnClose),
// linger 0 (TCPAbortOnData too) and a user timeout (TCPAbortOnTimeout, no
// reset at all: tcp_conn's close carries ETIMEDOUT).
func TestResetPathsMatchTheAbortCounters(t *testing.T) {
	peer, rec, before := recordPeer(t, "tcp_reset,tcp_conn")
	local := func(c *tcppeer.Conn) string { return fmt.Sprintf("%s:%d", peer.KernelAddr(), c.KernelPort) }

	// The peer resets an established connection.
	_, byPeer := dialPeer(t, peer, 5001)
	if err := byPeer.Rst(); err != nil {
		t.Fatal(err)
	}
	// Data arrives after the kernel's side closed: abort on data.
	sock, onData := dialPeer(t, peer, 5002)
	sock.Close()
	if _, err := onData.ExpectFlags(5*time.Second, tcppeer.FIN); err != nil {
		t.Fatalf("no FIN after close: %v\n%s", err, peer.Dump())
	}
	if err := onData.Send(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := onData.ExpectFlags(5*time.Second, tcppeer.RST); err != nil {
		t.Fatalf("no reset for data after close: %v\n%s", err, peer.Dump())
	}
	// Close with data the application never read.
	sock, unread := dialPeer(t, peer, 5003)
	if err := unread.Send(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := unread.Expect(5*time.Second, func(s *tcppeer.Segment) bool { return s.Flags&tcppeer.ACK != 0 && s.Ack != 0 }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the data sits in the receive queue
	sock.Close()
	if _, err := unread.ExpectFlags(5*time.Second, tcppeer.RST); err != nil {
		t.Fatalf("no reset on close with unread data: %v\n%s", err, peer.Dump())
	}
	// Close with linger 0.
	sock, linger := dialPeer(t, peer, 5004)
	if err := unix.SetsockoptLinger(sock.FD, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
		t.Fatal(err)
	}
	sock.Close()
	if _, err := linger.ExpectFlags(5*time.Second, tcppeer.RST); err != nil {
		t.Fatalf("no reset on close with linger 0: %v\n%s", err, peer.Dump())
	}
	// A user timeout: data never acknowledged, the kernel gives up without a reset.
	sock, timedOut := dialPeer(t, peer, 5005, tcppeer.SockOpt{Level: unix.IPPROTO_TCP, Name: unix.TCP_USER_TIMEOUT, Value: 300})
	if _, err := sock.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := sock.TCPInfo()
		if err != nil {
			t.Fatal(err)
		}
		if info.State == 7 { // TCP_CLOSE
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the user timeout never closed the socket (state %d)", info.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sock.Close()
	after, err := peer.Counters()
	if err != nil {
		t.Fatal(err)
	}
	events := stopAndParse(t, rec)
	delta := after.Sub(before)

	paths := map[string][]string{}
	received := 0
	closeErr := map[string]string{}
	for _, ev := range events {
		switch ev["action"] {
		case "tcp_reset":
			if ev["dir"] == "received" {
				received++
			}
			paths[fmt.Sprint(ev["path"])] = append(paths[fmt.Sprint(ev["path"])], fmt.Sprint(ev["local"]))
		case "tcp_conn":
			if ev["state"] == "CLOSE" {
				closeErr[fmt.Sprint(ev["local"])] = fmt.Sprint(ev["err"])
			}
		}
	}
	t.Logf("reset paths %v; counters: OutRsts %d AbortOnData %d AbortOnClose %d AbortOnTimeout %d",
		paths, delta["Tcp.OutRsts"], delta["TcpExt.TCPAbortOnData"], delta["TcpExt.TCPAbortOnClose"], delta["TcpExt.TCPAbortOnTimeout"])
	expect := func(path string, c *tcppeer.Conn) {
		t.Helper()
		if len(paths[path]) != 1 || paths[path][0] != local(c) {
			t.Errorf("resets with path %s: %v, want one of %s", path, paths[path], local(c))
		}
	}
	expect("peer", byPeer)
	expect("abort_on_data", onData)
	expect("close", unread)
	expect("linger0", linger)
	if received != 1 {
		t.Errorf("%d received resets, want 1: the abort on data received none", received)
	}
	if sent := int64(len(resetsSent(events))); sent != delta["Tcp.OutRsts"] || sent != 3 {
		t.Errorf("%d resets sent, TcpOutRsts %d, want 3", sent, delta["Tcp.OutRsts"])
	}
	checkStatResets(t, statView(t, rec.file), delta["Tcp.OutRsts"], received)
	if n := int64(len(paths["abort_on_data"]) + len(paths["linger0"])); n != delta["TcpExt.TCPAbortOnData"] {
		t.Errorf("abort_on_data and linger0 resets %d, TCPAbortOnData %d", n, delta["TcpExt.TCPAbortOnData"])
	}
	if n := int64(len(paths["close"])); n != delta["TcpExt.TCPAbortOnClose"] {
		t.Errorf("close resets %d, TCPAbortOnClose %d", n, delta["TcpExt.TCPAbortOnClose"])
	}
	if got := closeErr[local(byPeer)]; got != "ECONNRESET" {
		t.Errorf("close after the peer's reset has err %s, want ECONNRESET", got)
	}
	if got := closeErr[local(timedOut)]; got != "ETIMEDOUT" || delta["TcpExt.TCPAbortOnTimeout"] != 1 {
		t.Errorf("close after the user timeout has err %s (TCPAbortOnTimeout %d), want ETIMEDOUT", got, delta["TcpExt.TCPAbortOnTimeout"])
	}
}

// Drops inside TCP's receive processing, under the namespace filter, against
// the counters the kernel keeps beside them: old data (a duplicate segment:
// TCP_OLD_DATA, DelayedACKLost) and a timestamp older than the last one
// (TCP_RFC7323_PAWS, PAWSEstab).
func TestTCPDropsMatchTheirCounters(t *testing.T) {
	feats, err := probe.ProbeFeatures()
	if err != nil {
		t.Fatal(err)
	}
	if !feats.DropReasons {
		// tcp_drop() frees with __kfree_skb there, which has no tracepoint.
		if os.Getenv("SKBTRACE_KERNEL_MATRIX") != "1" {
			t.Fatal("kfree_skb has no drop reason on this kernel")
		}
		t.Skip("before 5.17 TCP frees its drops without the kfree_skb tracepoint")
	}
	requireFamilies(t, "skb_drop")
	peer, rec, before := recordPeer(t, "skb_drop,tcp_conn")
	_, conn := dialPeer(t, peer, 5006)
	const rounds = 3
	for i := 0; i < rounds; i++ {
		seg := conn.Build(tcppeer.PSH|tcppeer.ACK, make([]byte, 100))
		if err := conn.Write(seg); err != nil {
			t.Fatal(err)
		}
		acked := func(s *tcppeer.Segment) bool { return s.Flags&tcppeer.ACK != 0 && !seqLess(s.Ack, seg.Seq+100) }
		if _, err := conn.Expect(5*time.Second, acked); err != nil {
			t.Fatalf("data not acknowledged: %v\n%s", err, peer.Dump())
		}
		// The same segment again: old data.
		if err := peer.Write(seg); err != nil {
			t.Fatal(err)
		}
		// New data with a timestamp from the past: PAWS.
		stale := conn.Build(tcppeer.PSH|tcppeer.ACK, make([]byte, 100))
		stale.Opts.TSval -= 1 << 20
		if err := peer.Write(stale); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	after, err := peer.Counters()
	if err != nil {
		t.Fatal(err)
	}
	events := stopAndParse(t, rec)
	delta := after.Sub(before)
	byReason := map[string]int64{}
	var byAddr int
	for _, ev := range events {
		if ev["action"] == "skb_drop" && ev["protocol"] == "ipv4/tcp" {
			byReason[fmt.Sprint(ev["reason"])] += int64(ev["cnt"].(float64))
			if ev["netns_by"] == "addr" {
				byAddr++
			}
		}
	}
	t.Logf("TCP drops by reason %v (%d events placed by address); DelayedACKLost %d PAWSEstab %d",
		byReason, byAddr, delta["TcpExt.DelayedACKLost"], delta["TcpExt.PAWSEstab"])
	if got, want := byReason["TCP_OLD_DATA"], delta["TcpExt.DelayedACKLost"]; got != want || want != rounds {
		t.Errorf("TCP_OLD_DATA drops %d, DelayedACKLost %d, want %d", got, want, rounds)
	}
	if got, want := byReason["TCP_RFC7323_PAWS"], delta["TcpExt.PAWSEstab"]; got != want || want != rounds {
		t.Errorf("TCP_RFC7323_PAWS drops %d, PAWSEstab %d, want %d", got, want, rounds)
	}
}

func seqLess(a, b uint32) bool { return int32(a-b) < 0 }

// A tap's (AF_PACKET) socket closed with packets unread purges them:
// skb_drop [QUEUE_PURGE]. Its ports are the connection's, read after the IP
// header: a received packet's transport offset may still point at the IP
// header there, whose first bytes (0x4500) would read as a port.
func TestPurgedPacketsCarryTheirConnectionsPorts(t *testing.T) {
	feats, err := probe.ProbeFeatures()
	if err != nil {
		t.Fatal(err)
	}
	if !feats.DropReasons {
		t.Skip("before 5.17 kfree_skb has no reasons to tell a purge by")
	}
	if !kernelHasDropReason(t, "SKB_DROP_REASON_QUEUE_PURGE") {
		t.Skip("this kernel's drop reasons have no QUEUE_PURGE (6.1's purge is NOT_SPECIFIED)")
	}
	requireFamilies(t, "skb_drop")
	peer, rec, _ := recordPeer(t, "skb_drop,tcp_conn")
	var tap int
	if err := peer.NS().Do(func() error {
		var err error
		tap, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		return err
	}); err != nil {
		t.Fatalf("opening a packet socket: %v", err)
	}
	defer unix.Close(tap)
	sock, conn := dialPeer(t, peer, 5008)
	for i := 0; i < 3; i++ {
		if _, err := sock.Write(make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExpectData(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := conn.AckAll(65535); err != nil { // a received packet, last in the tap's queue
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	unix.Close(tap)
	time.Sleep(50 * time.Millisecond)
	events := stopAndParse(t, rec)
	ports := map[string]bool{fmt.Sprintf("%s:%d", peer.KernelAddr(), conn.KernelPort): true,
		fmt.Sprintf("%s:%d", peer.PeerAddr(), conn.PeerPort): true}
	purges := 0
	for _, ev := range events {
		if ev["action"] != "skb_drop" || ev["reason"] != "QUEUE_PURGE" || ev["protocol"] != "ipv4/tcp" {
			continue
		}
		purges++
		t.Logf("skb_drop [QUEUE_PURGE] at %v: %v -> %v, %v", ev["location"], ev["src"], ev["dst"], ev["cnt"])
		if !ports[fmt.Sprint(ev["src"])] || !ports[fmt.Sprint(ev["dst"])] || ev["src"] == ev["dst"] {
			t.Errorf("purged packet %v -> %v, want the connection's ends %v", ev["src"], ev["dst"], ports)
		}
	}
	if purges == 0 {
		t.Fatalf("no skb_drop [QUEUE_PURGE] of TCP packets in %d events", len(events))
	}
}

// kernelHasDropReason says whether the running kernel's enum skb_drop_reason
// (BTF) has the named value.
func kernelHasDropReason(t *testing.T, name string) bool {
	t.Helper()
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("reading the kernel's BTF: %v", err)
	}
	var enum *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &enum); err != nil {
		return false
	}
	for _, v := range enum.Values {
		if v.Name == name {
			return true
		}
	}
	return false
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
