package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
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
	t.Cleanup(func() { peer.Close() })
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
	peer, rec, before := recordPeer(t, "tcp_reset,tcp_conn")
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

	// stat: the closed-port and listener resets are no connection; the
	// linger-0 connection is one.
	out, err := exec.Command(binary, "stat", "--json", "-i", rec.file).Output()
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	var view report.StatView
	if err := json.Unmarshal(out, &view); err != nil {
		t.Fatalf("stat --json: %v", err)
	}
	if len(view.Connections) != 1 || view.Connections[0].Peer != fmt.Sprintf("%s:5000", peerAddr) {
		t.Errorf("stat connections %+v, want only the one to port 5000", view.Connections)
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
