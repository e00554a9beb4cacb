package timeline

import (
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
)

// client is the i-th of many client sockets to the receiver.
func client(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 40000)
}

// sockOf is a socket for each local address.
func sockOf(local netip.AddrPort) uint64 {
	a := local.Addr().As4()
	return uint64(a[0])<<40 | uint64(a[1])<<32 | uint64(a[2])<<24 | uint64(a[3])<<16 | uint64(local.Port())
}

func rtt(at int64, local netip.AddrPort, acked uint64) *event.Event {
	ev := &event.Event{Type: event.TypeTCPRTT, Time: t0 + at,
		Socket: event.Socket{Sock: sockOf(local), Local: local, Peer: receiver, Netns: 7}}
	ev.RTT.BytesAcked, ev.RTT.Cwnd, ev.RTT.InFlight, ev.RTT.SrttUs = acked, 10, 2, 50
	return ev
}

func conn(at int64, local netip.AddrPort, from, to event.TCPState) *event.Event {
	ev := &event.Event{Type: event.TypeTCPConn, Time: t0 + at}
	ev.Conn.Socket = event.Socket{Sock: sockOf(local), Local: local, Peer: receiver, Netns: 7}
	ev.Conn.Old, ev.Conn.New = from, to
	return ev
}

// Thousands of small connections keep only their totals: bins are kept for
// at most MaxCandidates flows, the busiest are drawn, the rest counted.
func TestManyConnectionsKeepBinsOnlyForCandidates(t *testing.T) {
	b := NewBuilder(t0)
	const n = 3000
	for step := int64(0); step < 10; step++ {
		for i := range n {
			// Connection i has acknowledged (i+1)*step*100 bytes by step.
			b.Add(rtt(step*100e6, client(i), uint64(i+1)*uint64(step)*100))
		}
		kept := 0
		for _, f := range b.flows {
			if len(f.bins.b) > 0 {
				kept++
			}
		}
		if kept > MaxCandidates || len(b.cands) > MaxCandidates {
			t.Fatalf("step %d: %d flows hold bins, %d candidates; at most %d", step, kept, len(b.cands), MaxCandidates)
		}
	}
	tl := b.Build(nil)
	if len(tl.Flows) != MaxFlows || tl.OtherFlows != n-MaxFlows {
		t.Fatalf("%d flows drawn, %d left out; want %d and %d", len(tl.Flows), tl.OtherFlows, MaxFlows, n-MaxFlows)
	}
	for k, f := range tl.Flows {
		if want := client(n - 1 - k); f.Local != want {
			t.Errorf("flow %d is %s, want %s (the busiest by bytes acknowledged)", k, f.Local, want)
		}
		if want := float64(n-k) * 900; f.Bytes != want {
			t.Errorf("flow %d bytes = %.0f, want %.0f", k, f.Bytes, want)
		}
	}
}

// A flow that overtakes the candidates late is drawn from when it did, and
// says so; its bytes still count in full.
func TestLateBusiestFlowIsDrawnFromWhenItOvertook(t *testing.T) {
	b := NewBuilder(t0)
	for i := range MaxCandidates {
		b.Add(rtt(0, client(i), 0))
		b.Add(rtt(100e6, client(i), 200e3))
	}
	late := client(5000)
	b.Add(rtt(200e6, late, 0))
	b.Add(rtt(300e6, late, 500))   // not yet past the least candidate
	b.Add(rtt(400e6, late, 1e6))   // past them all
	b.Add(rtt(1000e6, late, 10e6)) // and on
	tl := b.Build(nil)
	f := tl.Flows[0]
	if f.Local != late || f.Bytes != 10e6 {
		t.Fatalf("first flow %s with %.0f bytes, want %s with 10e6", f.Local, f.Bytes, late)
	}
	if !f.Partial || f.DrawnFrom != 0.3 || f.UndrawnBytes != 500 {
		t.Errorf("partial %v from %.3f s, %.0f bytes undrawn; want drawn from 0.3 s (the sample before it overtook), 500 undrawn", f.Partial, f.DrawnFrom, f.UndrawnBytes)
	}
	// The evicted one and the candidates not drawn.
	if want := 1 + MaxCandidates - MaxFlows; len(tl.Flows) != MaxFlows || tl.OtherFlows != want {
		t.Errorf("%d drawn, %d left out, want %d and %d", len(tl.Flows), tl.OtherFlows, MaxFlows, want)
	}
	for _, g := range tl.Flows[1:] {
		if g.Partial {
			t.Errorf("%s is partial: it was a candidate from its first byte", g.Local)
		}
	}
}

// A socket address reused by a new connection is a new flow: its bytes do
// not add to the old one's, and a life that ended is drawn or counted.
func TestReusedAddressIsANewFlow(t *testing.T) {
	b := NewBuilder(t0)
	b.Add(conn(0, sender, tcpClose, event.TCPState(2))) // SYN_SENT
	b.Add(rtt(10e6, sender, 0))
	b.Add(rtt(100e6, sender, 5e6))
	b.Add(conn(110e6, sender, event.TCPFinWait1, tcpClose))
	// The same socket, freed and reused for the same addresses.
	b.Add(conn(200e6, sender, tcpClose, event.TCPState(2)))
	b.Add(rtt(210e6, sender, 0))
	b.Add(rtt(300e6, sender, 1e6))
	// Another socket on the same addresses.
	other := rtt(400e6, sender, 0)
	other.Socket.Sock++
	b.Add(other)
	other = rtt(500e6, sender, 2e6)
	other.Socket.Sock++
	b.Add(other)
	tl := b.Build(nil)
	if len(tl.Flows) != 3 {
		t.Fatalf("%d flows, want 3 lives of %s", len(tl.Flows), sender)
	}
	if tl.Flows[0].Bytes != 5e6 || tl.Flows[1].Bytes != 2e6 || tl.Flows[2].Bytes != 1e6 {
		t.Errorf("bytes %.0f, %.0f and %.0f, want 5e6, 2e6 and 1e6", tl.Flows[0].Bytes, tl.Flows[1].Bytes, tl.Flows[2].Bytes)
	}
	// Lives that end without a place among the candidates are counted.
	b = NewBuilder(t0)
	for i := range MaxCandidates {
		b.Add(rtt(0, client(i), 0))
		b.Add(rtt(100e6, client(i), 1e6))
	}
	for life := range 5 {
		at := int64(life) * 10e6
		b.Add(conn(at, sender, tcpClose, event.TCPState(2)))
		b.Add(rtt(at+1e6, sender, 0))
		b.Add(rtt(at+2e6, sender, 10))
		b.Add(conn(at+3e6, sender, event.TCPFinWait1, tcpClose))
	}
	if tl := b.Build(nil); tl.OtherFlows != MaxCandidates-MaxFlows+5 {
		t.Errorf("%d left out, want %d: the undrawn candidates and 5 lives of %s", tl.OtherFlows, MaxCandidates-MaxFlows+5, sender)
	}
}

// BenchmarkManyConnections: allocations per event with 30,000 connections
// sampling tcp_rtt, as a busy host's trace gives (issue 45: 5.9 GB).
func BenchmarkManyConnections(b *testing.B) {
	const n = 30000
	evs := make([]*event.Event, n)
	for i := range evs {
		evs[i] = rtt(0, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}), uint16(1024+i%60000)), 0)
	}
	b.ReportAllocs()
	bl := NewBuilder(t0)
	for k := 0; b.Loop(); k++ {
		ev := evs[k%n]
		ev.Time = t0 + int64(k)*1e4
		ev.RTT.BytesAcked += uint64(k%97) * 100
		bl.Add(ev)
	}
	if tl := bl.Build(nil); len(tl.Flows) == 0 {
		b.Fatalf("no flow drawn of %d", n)
	}
}
