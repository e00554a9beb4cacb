package analyze_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

var (
	local = netip.MustParseAddrPort("10.0.0.1:40000")
	peer  = netip.MustParseAddrPort("10.0.0.2:5201")
)

func connEvent(t int64, sock uint64, l, p netip.AddrPort, state event.TCPState) *event.Event {
	return &event.Event{Type: event.TypeTCPConn, Time: t, Conn: event.TCPConn{Socket: event.Socket{Sock: sock, Local: l, Peer: p}, New: state}}
}

func sendlimEvent(t, begin int64, sock uint64, l, p netip.AddrPort, r event.SendlimReason, busy, rwnd uint64) *event.Event {
	return &event.Event{Type: event.TypeTCPSendlim, Time: t, Begin: begin, Sendlim: event.TCPSendlim{
		Socket: event.Socket{Sock: sock, Local: l, Peer: p}, Reason: r, Begin: begin, Cnt: 1, BusyUs: busy, RwndLimitedUs: rwnd}}
}

func active(st *analyze.Stat) []*analyze.ConnStat {
	var out []*analyze.ConnStat
	for _, c := range st.Connections {
		if c.Active() {
			out = append(out, c)
		}
	}
	return out
}

// After a linger-0 close the kernel reports the socket with ports 0: the
// same connection, not a second one.
func TestStatKeepsASocketsEventsWithoutPortsInItsConnection(t *testing.T) {
	st := analyze.NewStat()
	st.Add(connEvent(1, 0xa, local, peer, event.TCPEstablished))
	st.Add(sendlimEvent(3, 2, 0xa, local, peer, event.SendlimApp, 0, 0))
	zero := netip.AddrPortFrom(peer.Addr(), 0)
	st.Add(&event.Event{Type: event.TypeTCPCong, Time: 4, Socket: event.Socket{Sock: 0xa, Local: netip.AddrPortFrom(local.Addr(), 0), Peer: zero}})
	conns := active(st)
	if len(conns) != 1 || conns[0].Peer != peer.String() || conns[0].Local != local.String() || len(conns[0].CongStates.Map()) != 1 {
		t.Fatalf("connections %+v, want one to %s with its congestion event", conns, peer)
	}
	// The kernel reuses the socket's address for a connection to another peer.
	other := netip.MustParseAddrPort("10.0.0.3:443")
	st.Add(sendlimEvent(6, 5, 0xa, local, other, event.SendlimApp, 0, 0))
	if conns := active(st); len(conns) != 2 || conns[1].Peer != other.String() {
		t.Fatalf("after reuse: %+v, want a second connection to %s", conns, other)
	}
}

// A listener that answers a stray segment with a reset is not a connection.
func TestStatListenerIsNotAConnection(t *testing.T) {
	st := analyze.NewStat()
	any := netip.MustParseAddrPort("0.0.0.0:0")
	st.Add(connEvent(1, 0xb, netip.MustParseAddrPort("10.0.0.1:80"), any, event.TCPListen))
	rst := &event.Event{Type: event.TypeTCPReset, Time: 2, Socket: event.Socket{Sock: 0xb, Local: netip.MustParseAddrPort("10.0.0.1:80"), Peer: peer}}
	rst.Reset.State = uint8(event.TCPListen)
	st.Add(rst)
	if conns := active(st); len(conns) != 0 {
		t.Fatalf("connections %+v, want none", conns)
	}
	if len(st.Resets) != 1 || st.Resets[0].Owner != "listener" || st.Resets[0].Sent != 1 || st.Resets[0].Peer != peer {
		t.Fatalf("resets without a connection %+v, want the listener's one, to %s", st.Resets, peer)
	}
}

// Every reset is counted once: on its connection when a full socket sent
// or received it, else in the namespace's row for its owner.
func TestStatCountsEveryReset(t *testing.T) {
	st := analyze.NewStat()
	reset := func(tm int64, sock uint64, state event.TCPState, dir uint8) {
		ev := &event.Event{Type: event.TypeTCPReset, Time: tm, Socket: event.Socket{Sock: sock, Local: local, Peer: peer, Netns: 7}}
		ev.Reset.State, ev.Reset.Dir = uint8(state), dir
		st.Add(ev)
	}
	st.Add(connEvent(1, 0xa, local, peer, event.TCPEstablished))
	reset(2, 0xa, event.TCPEstablished, event.ResetReceived)
	reset(3, 0xa, 7, event.ResetSent) // CLOSE: a linger-0 close
	reset(4, 0, 0, event.ResetSent)
	reset(5, 0, 0, event.ResetSent)
	reset(6, 0xb, event.TCPTimeWait, event.ResetSent)
	reset(7, 0xc, event.TCPNewSynRecv, event.ResetSent)
	conns := active(st)
	if len(conns) != 1 || conns[0].Resets != 2 {
		t.Fatalf("connections %+v, want one with 2 resets", conns)
	}
	got := map[string]uint64{}
	for _, r := range st.Resets {
		if r.Netns != 7 {
			t.Errorf("row %+v not in namespace 7", r)
		}
		got[r.Owner] += r.Sent + r.Received
	}
	if got["no socket"] != 2 || got["timewait"] != 1 || got["request"] != 1 || len(got) != 3 {
		t.Fatalf("resets without a connection %v, want 2 for no socket, 1 timewait, 1 request", got)
	}
}

// The kernel's chrono totals count from the connection's start when its
// handshake is in the recording, else from its first run.
func TestStatKernelTotalsBaseline(t *testing.T) {
	st := analyze.NewStat()
	st.Add(connEvent(1, 0xc, local, peer, event.TCPEstablished))
	st.Add(sendlimEvent(3, 2, 0xc, local, peer, event.SendlimSwnd, 400, 300))
	st.Add(sendlimEvent(5, 3, 0xc, local, peer, event.SendlimApp, 900, 700))
	c := active(st)[0]
	if c.KernelBusyUs != 900 || c.KernelRwndUs != 700 {
		t.Fatalf("from the handshake: busy %d rwnd %d, want 900 and 700", c.KernelBusyUs, c.KernelRwndUs)
	}
	st = analyze.NewStat()
	st.Add(sendlimEvent(3, 2, 0xc, local, peer, event.SendlimSwnd, 400, 300))
	st.Add(sendlimEvent(5, 3, 0xc, local, peer, event.SendlimApp, 900, 700))
	if c := active(st)[0]; c.KernelBusyUs != 500 || c.KernelRwndUs != 400 {
		t.Fatalf("mid-connection: busy %d rwnd %d, want 500 and 400", c.KernelBusyUs, c.KernelRwndUs)
	}
}

// statTrace summarizes a trace file of testdata.
func statTrace(t *testing.T, name string) *analyze.Stat {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	st := analyze.NewStat()
	sum := analyze.NewSummary()
	sum.OnWindow = st.Gap
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error { st.Add(ev); return nil }); err != nil {
		t.Fatal(err)
	}
	st.Sort()
	return st
}

// A loopback iperf3 run (record -e tcp_conn,tcp_rtt,tcp_stage,tcp_sendlim,
// dev_xmit,dev_recv --filter-port 42201 around `iperf3 -s -p 42201` and
// `iperf3 -c 127.0.0.1 -p 42201 -t 1`): after the test the server listens
// again in the memory of the socket that received the stream. The receiver
// is a connection with its bytes and receive stages, not a listener.
func TestStatReceiverSurvivesARelistenInItsSocket(t *testing.T) {
	st := statTrace(t, "iperf3-relisten.trace")
	var recv *analyze.ConnStat
	for _, c := range st.Connections {
		if c.Local == "[::ffff:127.0.0.1]:42201" && c.Peer == "[::ffff:127.0.0.1]:59318" {
			recv = c
		}
	}
	if recv == nil || !recv.Active() {
		t.Fatalf("the receiver of 127.0.0.1:59318's stream is %+v, want an active connection", recv)
	}
	if recv.BytesReceived < 2<<30 || recv.Samples < 50 || recv.Stages == nil {
		t.Errorf("receiver: %d bytes received, %d rtt samples, stages %v; want the 2.67 GB stream's", recv.BytesReceived, recv.Samples, recv.Stages != nil)
	}
	// The listener that took the socket's memory is no connection.
	var listeners int
	for _, c := range st.Connections {
		if c.Local == "[::]:42201" {
			listeners++
			if c.Active() {
				t.Errorf("listener %+v counted as a connection", c)
			}
		}
	}
	if listeners != 2 {
		t.Errorf("%d listeners on [::]:42201, want the two iperf3 opened", listeners)
	}
}

// An event of a socket's earlier connection read after the socket's memory
// began a new life (a listener's) still counts for the earlier one.
func TestStatLateEventOfAnEarlierLife(t *testing.T) {
	st := analyze.NewStat()
	st.Add(connEvent(1, 0xa, local, peer, event.TCPEstablished))
	listen := connEvent(2, 0xa, netip.MustParseAddrPort("0.0.0.0:5201"), netip.MustParseAddrPort("0.0.0.0:0"), event.TCPListen)
	listen.Conn.Old = 7 // CLOSE
	st.Add(listen)
	st.Add(&event.Event{Type: event.TypeTCPRTT, Time: 3, Socket: event.Socket{Sock: 0xa, Local: local, Peer: peer}})
	conns := active(st)
	if len(conns) != 1 || conns[0].Peer != peer.String() || conns[0].Samples != 1 || len(st.Connections) != 2 {
		t.Fatalf("connections %+v, want the listener and the earlier connection with its sample", st.Connections)
	}
}

// A loopback churn (testdata/record-churn.sh): 25 connections from fresh
// ports, then 25 from one reused port (the 4-tuple repeats), each sending a
// few bytes; socket memory is reused by the next connections, even to the
// same peer, and tcp_stage's samples are flushed after that. Every
// connection is a row of its own, from one end each, and no row spans two
// lives: a late sample goes to its life without stretching it.
func TestStatChurnEachConnectionIsARow(t *testing.T) {
	st := statTrace(t, "churn.trace")
	const server, reusedPort = "127.0.0.1:24391", "127.0.0.1:24392"
	var clients, reused, servers, listeners, staged int
	bySock := map[uint64][]*analyze.ConnStat{}
	for _, c := range st.Connections {
		states := c.States()
		var starts int
		for _, s := range states {
			if s == "SYN_SENT" || s == "SYN_RECV" || s == "LISTEN" {
				starts++
			}
		}
		if starts != 1 {
			t.Errorf("%s -> %s (sock %#x) has states %v: want one life's", c.Local, c.Peer, c.Sock, states)
		}
		switch {
		case c.Peer == server:
			clients++
			if c.Local == reusedPort {
				reused++
			}
		case c.Local == server && states[0] == "LISTEN":
			listeners++
		case c.Local == server:
			servers++
		}
		if c.Stages != nil {
			staged++
		}
		bySock[c.Sock] = append(bySock[c.Sock], c)
	}
	if clients != 50 || reused != 25 || servers != 50 || listeners != 1 || len(st.Connections) != 101 {
		t.Errorf("%d client rows (%d from the reused port), %d server rows, %d listeners, %d in all; want 50 (25), 50, 1, 101",
			clients, reused, servers, listeners, len(st.Connections))
	}
	if staged == 0 {
		t.Error("no connection has tcp_stage's samples")
	}
	for sock, lives := range bySock {
		sort.Slice(lives, func(i, j int) bool { return lives[i].First < lives[j].First })
		for i := 1; i < len(lives); i++ {
			if prev, next := lives[i-1], lives[i]; prev.Last > next.First {
				t.Errorf("sock %#x: the life %s -> %s lasts until %d, after the next (%s -> %s) began at %d",
					sock, prev.Local, prev.Peer, prev.Last, next.Local, next.Peer, next.First)
			}
		}
	}
}

// A client's next connection in a freed socket's memory, to the same peer,
// is a connection of its own; a late sample of the first, named by its
// local port, goes to it and does not stretch it past its close.
func TestStatSameSocketSamePeerIsANewConnection(t *testing.T) {
	st := analyze.NewStat()
	second := netip.MustParseAddrPort("10.0.0.1:40001")
	unbound := netip.AddrPortFrom(local.Addr(), 0)
	conn := func(tm int64, l netip.AddrPort, old, new event.TCPState) {
		ev := connEvent(tm, 0xa, l, peer, new)
		ev.Conn.Old = old
		st.Add(ev)
	}
	conn(1, unbound, 7, 2) // CLOSE -> SYN_SENT
	conn(2, local, 2, event.TCPEstablished)
	conn(3, local, event.TCPEstablished, 7)
	conn(4, unbound, 7, 2)
	conn(5, second, 2, event.TCPEstablished)
	st.Add(&event.Event{Type: event.TypeTCPRTT, Time: 9, Socket: event.Socket{Sock: 0xa, Local: local, Peer: peer}})
	if len(st.Connections) != 2 {
		t.Fatalf("%d connections, want 2", len(st.Connections))
	}
	first, next := st.Connections[0], st.Connections[1]
	if first.Local != local.String() || first.Samples != 1 || first.Last != 3 || next.Local != second.String() || next.Samples != 0 || next.First != 4 {
		t.Errorf("first %s with %d samples until %d, next %s with %d from %d; want %s with the sample until 3, %s from 4",
			first.Local, first.Samples, first.Last, next.Local, next.Samples, next.First, local, second)
	}
}
