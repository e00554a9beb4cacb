package analyze

import (
	"math"
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/event"
)

// A connection is one life of a socket address: the kernel reuses a freed
// socket's memory for the next connection, often to the same peer.

// lifeKey names one life of a socket address by its ports (a client's
// successive connections to one server differ only in the local one); the
// life found is checked for both addresses. Small: every life has one.
type lifeKey struct {
	sock        uint64
	local, peer uint16
}

// The states that start a socket's life: a change from TCP_CLOSE (connect,
// listen), or a new SYN sent or received.
const (
	tcpSynSent event.TCPState = 2
	tcpSynRecv event.TCPState = 3
	tcpClose   event.TCPState = 7
)

// newLife says whether a state change begins a new connection (or
// listener) at the socket's address, also when the peer is the same.
func newLife(old, new event.TCPState) bool {
	return old == tcpClose || new == tcpSynSent || new == tcpSynRecv || old == event.TCPListen && new != tcpClose
}

// ConnStat is one TCP connection's view from one end.
type ConnStat struct {
	Sock        uint64
	Local, Peer string
	First, Last int64 // wall-clock ns of its first and last event
	// states are its state changes, an event.TCPState a byte (States
	// names them): every connection of a trace keeps them.
	states string
	// Its span began at spanStart, in the window epoch; rare holds what
	// earlier windows saw (a flight-recorder trace), and what else few
	// connections need: nil for the others.
	spanStart int64
	rare      *connRare
	// From tcp_rtt samples.
	Samples                   int
	BytesAcked, BytesReceived uint64 // during the recording
	firstAcked, firstReceived uint64
	firstSample, lastSample   int64
	MinRTTus, MaxSRTTus       uint32
	sumSRTTus                 uint64
	// The congestion window's range over every event that carries it
	// (tcp_rtt, tcp_sendlim, tcp_cong); CwndSeen says whether any did.
	CwndMin, CwndMax uint32
	// From tcp_sendlim runs, one entry per reason seen, in the order seen:
	// LimitNs, LimitCount and LimitRuns read them.
	limits []sendLimit
	// ProbedRuns are the runs in which the peer's window stayed closed long
	// enough for zero-window probes to go unanswered: a reader that stopped.
	ProbedRuns uint64
	// The kernel's own accounting over the same span (tcp_info's busy,
	// rwnd-limited and sndbuf-limited time), in µs: since the connection
	// began when its handshake is in the recording, else since its first run.
	KernelBusyUs, KernelRwndUs, KernelSndbufUs uint64
	peerAddr, localAddr                        netip.AddrPort
	// From tcp_retrans, tcp_cong, tcp_reset.
	RetransSegs uint64
	CongStates  CongCounts
	Resets      int
	// Stages holds tcp_stage's histograms of the bytes the socket sent, by
	// stage (event.StageNames), when the trace has them.
	Stages *StageHists
	// closed: the connection reached CLOSE, or the next life at its
	// address began; later events are late ones. reanchor: the next RTT
	// sample starts a window's count of bytes.
	CwndSeen, established, chronoBase, peerKnown, listener, closed, reanchor bool
	// Netns and epoch are beside the flags, where they fill what would be
	// padding: a trace keeps every connection.
	Netns uint32
	epoch int32
}

// connRare is what earlier flight-recorder windows saw of a connection,
// and tcp_info's totals when one begun before the recording was first seen
// (its own accounting starts from them).
type connRare struct {
	done  banked
	bases chronoBases
}

type chronoBases struct {
	busy, rwnd, sndbuf uint64
}

// more is the connection's rare state, added when first needed.
func (c *ConnStat) more() *connRare {
	if c.rare == nil {
		c.rare = &connRare{}
	}
	return c.rare
}

// banked is what a connection's earlier flight-recorder windows saw.
type banked struct {
	ns, sampleNs int64
	acked, recvd uint64
}

// sendLimit is a connection's tcp_sendlim runs of one reason (a run longer
// than a second arrives in pieces, each counted). A short list, not a map
// or an array of every reason: a connection sees one to three reasons, and
// every connection of a trace is kept.
type sendLimit struct {
	reason event.SendlimReason
	ns     int64
	count  uint64
	runs   uint64
}

// limit is the entry of one send-limit reason, added when first seen.
func (c *ConnStat) limit(r event.SendlimReason) *sendLimit {
	for i := range c.limits {
		if c.limits[i].reason == r {
			return &c.limits[i]
		}
	}
	c.limits = append(c.limits, sendLimit{reason: r})
	return &c.limits[len(c.limits)-1]
}

// States are the connection's state changes, in order.
func (c *ConnStat) States() []string {
	out := make([]string, len(c.states))
	for i := range len(c.states) {
		out[i] = event.TCPState(c.states[i]).String()
	}
	return out
}

// Duration is the connection's span in the recording, in seconds (the
// windows' parts of it, in a flight recorder's trace).
func (c *ConnStat) Duration() float64 { return float64(c.banked().ns+c.Last-c.spanStart) / 1e9 }

// banked is what earlier windows saw: zero in a trace of one.
func (c *ConnStat) banked() banked {
	if c.rare == nil {
		return banked{}
	}
	return c.rare.done
}

// Throughput is bytes acknowledged per second between the first and last
// RTT sample (the sender's view), or bytes received per second for a receiver.
func (c *ConnStat) Throughput() float64 {
	span := float64(c.banked().sampleNs+c.lastSample-c.firstSample) / 1e9
	if span <= 0 {
		return 0
	}
	return float64(max(c.BytesAcked, c.BytesReceived)) / span
}

// seeCwnd widens the congestion window's range; 0 is no window, the value
// of an event that did not read one.
func (c *ConnStat) seeCwnd(cwnd uint32) {
	if cwnd == 0 {
		return
	}
	if !c.CwndSeen {
		c.CwndMin, c.CwndMax, c.CwndSeen = cwnd, cwnd, true
		return
	}
	c.CwndMin, c.CwndMax = min(c.CwndMin, cwnd), max(c.CwndMax, cwnd)
}

// HasMinRTT says whether a tcp_rtt sample carried the path's minimum RTT.
func (c *ConnStat) HasMinRTT() bool { return c.Samples > 0 && c.MinRTTus != math.MaxUint32 }

// AvgSRTTus is the mean smoothed RTT over the samples.
func (c *ConnStat) AvgSRTTus() float64 {
	if c.Samples == 0 {
		return 0
	}
	return float64(c.sumSRTTus) / float64(c.Samples)
}

// addChrono takes a run's kernel totals, which only grow over a
// connection's life; traces without them leave the totals zero.
func (c *ConnStat) addChrono(l *event.TCPSendlim) {
	if l.BusyUs == 0 {
		return
	}
	if !c.chronoBase {
		c.chronoBase = true
		if !c.established {
			c.more().bases = chronoBases{l.BusyUs, l.RwndLimitedUs, l.SndbufLimitedUs}
		}
	}
	var base chronoBases
	if c.rare != nil {
		base = c.rare.bases
	}
	c.KernelBusyUs = max(c.KernelBusyUs, l.BusyUs-min(l.BusyUs, base.busy))
	c.KernelRwndUs = max(c.KernelRwndUs, l.RwndLimitedUs-min(l.RwndLimitedUs, base.rwnd))
	c.KernelSndbufUs = max(c.KernelSndbufUs, l.SndbufLimitedUs-min(l.SndbufLimitedUs, base.sndbuf))
}

// LimitNs is the time in runs of each send-limit reason seen, in ns.
func (c *ConnStat) LimitNs() map[string]int64 {
	return byReason(c.limits, func(l *sendLimit) int64 { return l.ns })
}

// LimitCount is the decisions of each send-limit reason seen.
func (c *ConnStat) LimitCount() map[string]uint64 {
	return byReason(c.limits, func(l *sendLimit) uint64 { return l.count })
}

// LimitRuns is the runs of each send-limit reason seen.
func (c *ConnStat) LimitRuns() map[string]uint64 {
	return byReason(c.limits, func(l *sendLimit) uint64 { return l.runs })
}

func byReason[V int64 | uint64](limits []sendLimit, field func(*sendLimit) V) map[string]V {
	out := make(map[string]V, len(limits))
	for i := range limits {
		out[limits[i].reason.String()] = field(&limits[i])
	}
	return out
}

// LimitShares are the send-limit reasons' shares of the time covered by runs.
func (c *ConnStat) LimitShares() map[string]float64 { return LimitShares(c.LimitNs()) }

// LimitShares are the shares of the time per send-limit reason.
func LimitShares(limitNs map[string]int64) map[string]float64 {
	var total int64
	for _, ns := range limitNs {
		total += ns
	}
	out := map[string]float64{}
	for r, ns := range limitNs {
		if total > 0 {
			out[r] = float64(ns) / float64(total)
		}
	}
	return out
}

// conn is the connection a socket's event belongs to: the socket's current
// one, unless the event names other ends. Events that no longer know a
// port (port 0, as after a linger-0 close or before a connect's bind) stay
// with it; an earlier life's ends are that life's late event; other ends
// mean the kernel reused the socket's address for a new connection.
func (s *Stat) conn(sock *event.Socket, t int64) *ConnStat {
	c := s.conns[sock.Sock]
	if c != nil && !c.holds(sock) {
		if old := s.past[lifeKey{sock.Sock, sock.Local.Port(), sock.Peer.Port()}]; old != nil && old.localAddr == sock.Local && old.peerAddr == sock.Peer {
			// Its life ended when the next began: the span stays.
			return old
		}
		s.retire(sock.Sock)
		c = nil
	}
	if c == nil {
		c = &ConnStat{Sock: sock.Sock, Peer: sock.Peer.String(), peerAddr: sock.Peer, Netns: sock.Netns, First: t,
			spanStart: t, epoch: s.epoch}
		s.conns[sock.Sock] = c
		s.Connections = append(s.Connections, c)
	}
	// The addresses are compared as values and formatted only when they
	// change: this runs for every event of a trace.
	if sock.Peer.Port() != 0 && !c.peerKnown {
		c.Peer, c.peerAddr, c.peerKnown = sock.Peer.String(), sock.Peer, true
	}
	if (sock.Local.Port() != 0 || c.Local == "") && (c.Local == "" || c.localAddr != sock.Local) {
		c.Local, c.localAddr = sock.Local.String(), sock.Local
	}
	if c.closed {
		// A closed connection's late events (tcp_stage's flush) add to it
		// but do not stretch its span over the time after its close.
		return c
	}
	if c.epoch != s.epoch {
		// Seen again after a gap: what came before is banked.
		done := &c.more().done
		done.ns += c.Last - c.spanStart
		c.spanStart, c.epoch = t, s.epoch
		if c.Samples > 0 {
			done.sampleNs += c.lastSample - c.firstSample
			done.acked, done.recvd, c.reanchor = c.BytesAcked, c.BytesReceived, true
		}
	}
	c.Last = t
	return c
}

// holds says whether an event with these ends can be of this connection:
// a port the event does not know matches anything; a listener has no peer.
func (c *ConnStat) holds(sock *event.Socket) bool {
	if sock.Peer.Port() != 0 && (c.listener || c.peerKnown && c.peerAddr != sock.Peer) {
		return false
	}
	return sock.Local.Port() == 0 || c.localAddr.Port() == 0 || c.localAddr == sock.Local
}

// retire ends the socket's current connection: events of the socket go to
// a new one, unless they name the old one's ends.
func (s *Stat) retire(sock uint64) {
	c := s.conns[sock]
	if c == nil {
		return
	}
	if c.peerKnown {
		s.past[lifeKey{sock, c.localAddr.Port(), c.peerAddr.Port()}] = c
	}
	c.closed = true
	delete(s.conns, sock)
}

// runs counts the send-limit runs of every reason.
func (c *ConnStat) runs() uint64 {
	var n uint64
	for i := range c.limits {
		n += c.limits[i].runs
	}
	return n
}

// Active says whether the connection did anything besides changing state;
// a listener is not a connection.
func (c *ConnStat) Active() bool {
	if c.listener {
		return false
	}
	return c.Samples > 0 || c.runs() > 0 || c.RetransSegs > 0 || c.Resets > 0 || c.CongStates != (CongCounts{}) || c.Stages != nil
}
