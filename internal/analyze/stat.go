package analyze

import (
	"math"
	"net/netip"
	"sort"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// Stat summarizes a recording the way btt summarizes a blktrace: per
// connection, per device, per CPU, per qdisc, per process, drops and loss.
type Stat struct {
	Start, End int64 // wall-clock ns of the first and last event
	Events     uint64
	// GapNs is the time between flight-recorder windows, which nothing
	// recorded: spans and rates leave it out.
	GapNs int64
	// epoch counts the windows begun; a connection last seen in an
	// earlier one banks its span and bytes before going on.
	epoch, gapFrom int
	Connections    []*ConnStat
	Devices        []*DevStat
	CPUs           []*CPUStat
	Drops          []*DropStat
	Qdiscs         []*QdiscStat
	SockIO         []*SockIOStat
	// Resets is the resets that belong to no connection: those a listener,
	// a request or timewait socket, or no socket at all sent or received.
	Resets []*ResetStat

	sockIO map[sockIOKey]*SockIOStat
	conns  map[uint64]*ConnStat // by socket: its current connection
	// past holds a socket's earlier connections, by socket and peer: the
	// kernel reuses a freed socket's memory (iperf3's server re-listens in
	// the accepted socket's), and an event of the earlier life read after
	// the new one began (tcp_stage's flush) still belongs to it.
	past   map[lifeKey]*ConnStat
	devs   map[devKey]*DevStat
	cpus   map[uint32]*CPUStat
	drops  map[dropKey]*DropStat
	qdiscs map[qdiscKey]*QdiscStat
	resets map[resetKey]*ResetStat
}

type lifeKey struct {
	sock uint64
	peer netip.AddrPort
}

// tcpClose is TCP_CLOSE: a state change from it starts a socket's life.
const tcpClose event.TCPState = 7

type devKey struct {
	name  string
	netns uint32
}

type dropKey struct {
	reason   uint32
	location uint64
	dev      string
	protocol string
}

// ConnStat is one TCP connection's view from one end.
type ConnStat struct {
	Sock        uint64
	Local, Peer string
	Netns       uint32
	First, Last int64 // wall-clock ns of its first and last event
	States      []string
	// Spans before the current window (a flight-recorder trace).
	epoch                int
	spanStart, doneNs    int64
	doneSampleNs         int64
	doneAcked, doneRecvd uint64
	reanchor             bool
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
	CwndSeen         bool
	// From tcp_sendlim runs, per reason (a run longer than a second arrives
	// in pieces, each counted): LimitNs, LimitCount and LimitRuns read them.
	// Arrays, not maps: this is updated for every event of a trace.
	limitNs               [event.SendlimCount]int64
	limitCount, limitRuns [event.SendlimCount]uint64
	// ProbedRuns are the runs in which the peer's window stayed closed long
	// enough for zero-window probes to go unanswered: a reader that stopped.
	ProbedRuns uint64
	// The kernel's own accounting over the same span (tcp_info's busy,
	// rwnd-limited and sndbuf-limited time), in µs: since the connection
	// began when its handshake is in the recording, else since its first run.
	KernelBusyUs, KernelRwndUs, KernelSndbufUs uint64
	established, chronoBase                    bool
	peerKnown, listener                        bool
	peerAddr, localAddr                        netip.AddrPort
	busyBase, rwndBase, sndbufBase             uint64
	// From tcp_retrans, tcp_cong, tcp_reset.
	RetransSegs uint64
	CongStates  map[string]int
	Resets      int
	// Stages holds tcp_stage's histograms of the bytes the socket sent, by
	// stage (event.StageNames), when the trace has them.
	Stages *[wire.TcpStageSTAGE_MAX]wire.StageHist
}

// Duration is the connection's span in the recording, in seconds (the
// windows' parts of it, in a flight recorder's trace).
func (c *ConnStat) Duration() float64 { return float64(c.doneNs+c.Last-c.spanStart) / 1e9 }

// Throughput is bytes acknowledged per second between the first and last
// RTT sample (the sender's view), or bytes received per second for a receiver.
func (c *ConnStat) Throughput() float64 {
	span := float64(c.doneSampleNs+c.lastSample-c.firstSample) / 1e9
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
			c.busyBase, c.rwndBase, c.sndbufBase = l.BusyUs, l.RwndLimitedUs, l.SndbufLimitedUs
		}
	}
	c.KernelBusyUs = max(c.KernelBusyUs, l.BusyUs-min(l.BusyUs, c.busyBase))
	c.KernelRwndUs = max(c.KernelRwndUs, l.RwndLimitedUs-min(l.RwndLimitedUs, c.rwndBase))
	c.KernelSndbufUs = max(c.KernelSndbufUs, l.SndbufLimitedUs-min(l.SndbufLimitedUs, c.sndbufBase))
}

// LimitNs is the time in runs of each send-limit reason seen, in ns.
func (c *ConnStat) LimitNs() map[string]int64 { return byReason(&c.limitNs, &c.limitRuns) }

// LimitCount is the decisions of each send-limit reason seen.
func (c *ConnStat) LimitCount() map[string]uint64 { return byReason(&c.limitCount, &c.limitRuns) }

// LimitRuns is the runs of each send-limit reason seen.
func (c *ConnStat) LimitRuns() map[string]uint64 { return byReason(&c.limitRuns, &c.limitRuns) }

func byReason[V int64 | uint64](v *[event.SendlimCount]V, runs *[event.SendlimCount]uint64) map[string]V {
	out := map[string]V{}
	for r := range v {
		if runs[r] > 0 {
			out[event.SendlimReason(r).String()] = v[r]
		}
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

// DevStat is one device's traffic, both directions.
type DevStat struct {
	Name  string
	Netns uint32
	Xmit  DirStat
	Recv  DirStat
}

// DirStat counts one direction of a device.
type DirStat struct {
	Skbs, Bytes, Segs, GroIn, Errors uint64
	MaxBytes                         uint32
	Seconds                          float64 // covered by the intervals that reported
}

// SegsPerSkb shows TSO/GSO (xmit) or GRO (recv) at work when well above one.
func (d *DirStat) SegsPerSkb() float64 {
	if d.Skbs == 0 {
		return 0
	}
	return float64(d.Segs) / float64(d.Skbs)
}

// PacketsPerSecond counts wire packets (segments).
func (d *DirStat) PacketsPerSecond() float64 {
	if d.Seconds == 0 {
		return 0
	}
	return float64(d.Segs) / d.Seconds
}

// CPUStat is one CPU's network softirq time.
type CPUStat struct {
	CPU                uint32
	NetRxNs, NetTxNs   uint64
	NetRxRuns          uint64
	NetTxRuns          uint64
	NapiPolls          uint64
	NapiWork           uint64
	NapiBudgetExhausts uint64
	// The intervals the softirq events covered, per vector.
	NetRxSeconds, NetTxSeconds float64
}

type sockIOKey struct {
	pid uint32
	dir string
}

// SockIOStat is one process's socket calls in one direction.
type SockIOStat struct {
	Pid                  uint32
	Comm, Dir            string
	Calls, Bytes, Errors uint64
	Seconds              float64 // covered by the intervals that reported
}

type qdiscKey struct {
	dev            string
	netns          uint32
	handle, parent uint32
}

// QdiscStat is one qdisc's traffic over the recording.
type QdiscStat struct {
	Dev, Kind          string
	Netns              uint32
	Handle, Parent     uint32
	Enqueues, Dequeues uint64
	Drops, Requeues    uint64
	BacklogMax         uint32
	Wait               *QdiscWait // from qdisc_delay, when it was recorded
}

// QdiscWait is how long packets waited in a qdisc (qdisc_delay).
type QdiscWait struct {
	Packets, Unstamped uint64
	SumNs, MaxNs       uint64
	Hist               [len(wire.QdiscDelayEvent{}.Hist)]uint64
}

// qdisc finds or adds the qdisc the qdisc and qdisc_delay events name.
func (s *Stat) qdisc(dev, kind []int8, netns, handle, parent uint32) *QdiscStat {
	k := qdiscKey{string(event.CString(dev)), netns, handle, parent}
	qs := s.qdiscs[k]
	if qs == nil {
		qs = &QdiscStat{Dev: k.dev, Kind: string(event.CString(kind)), Netns: k.netns, Handle: k.handle, Parent: k.parent}
		s.qdiscs[k] = qs
		s.Qdiscs = append(s.Qdiscs, qs)
	}
	return qs
}

// DropStat is the drops of one reason at one location on one device.
type DropStat struct {
	Reason   uint32
	Location uint64
	Dev      string
	Protocol string // ipv4/tcp, ipv6/icmp, arp ...
	Count    uint64
	// Src and Dst are the last dropped packet's addresses, when it had them.
	Src, Dst netip.AddrPort
}

type resetKey struct {
	netns uint32
	owner string
}

// ResetStat counts the resets of one namespace that no connection owns, by
// what sent or received them: "no socket" (a closed port), "listener",
// "request" (a handshake not yet complete) or "timewait".
type ResetStat struct {
	Netns          uint32
	Owner          string
	Sent, Received uint64
	// Local and Peer are the last reset's addresses.
	Local, Peer netip.AddrPort
}

// resetOwner says what a reset belongs to: "" for a connection (a full
// socket's), else the kind of ResetStat row.
func resetOwner(sock uint64, state event.TCPState) string {
	switch {
	case sock == 0:
		return "no socket"
	case state == event.TCPListen:
		return "listener"
	case state == event.TCPNewSynRecv:
		return "request"
	case state == event.TCPTimeWait:
		return "timewait"
	}
	return ""
}

// NewStat returns an empty summary.
func NewStat() *Stat {
	return &Stat{conns: map[uint64]*ConnStat{}, past: map[lifeKey]*ConnStat{}, devs: map[devKey]*DevStat{}, cpus: map[uint32]*CPUStat{},
		drops: map[dropKey]*DropStat{}, qdiscs: map[qdiscKey]*QdiscStat{}, sockIO: map[sockIOKey]*SockIOStat{},
		resets: map[resetKey]*ResetStat{}}
}

// Add takes one event, in sequence order.
func (s *Stat) Add(ev *event.Event) {
	if s.gapFrom != s.epoch {
		// The first event of a window: the time since the last one is a gap.
		if s.Events > 0 && ev.Time > s.End {
			s.GapNs += ev.Time - s.End
		}
		s.gapFrom = s.epoch
	}
	if s.Events == 0 || ev.Time < s.Start {
		s.Start = ev.Time
	}
	if ev.Time > s.End {
		s.End = ev.Time
	}
	s.Events++
	switch ev.Type {
	case event.TypeTCPConn:
		if o := ev.Conn.Old; o == tcpClose || o == event.TCPListen && ev.Conn.New != tcpClose {
			// A socket begins (listens, connects, or is accepted): whatever
			// its address held before was another socket, freed.
			s.retire(ev.Conn.Sock)
		}
		c := s.conn(&ev.Conn.Socket, ev.Time)
		c.States = append(c.States, ev.Conn.New.String())
		c.established = c.established || ev.Conn.New == event.TCPEstablished && c.runs() == 0
		c.listener = c.listener || ev.Conn.New == event.TCPListen
	case event.TypeTCPSendlim:
		l := &ev.Sendlim
		c := s.conn(&l.Socket, ev.Time)
		if r := int(l.Reason); r < event.SendlimCount {
			c.limitNs[r] += ev.Time - l.Begin
			c.limitCount[r] += uint64(l.Cnt)
			c.limitRuns[r]++
		}
		if l.Probes > 0 {
			c.ProbedRuns++
		}
		c.seeCwnd(l.Cwnd)
		c.addChrono(l)
	case event.TypeTCPRTT:
		r := &ev.RTT
		c := s.conn(&ev.Socket, ev.Time)
		if c.Samples == 0 {
			c.MinRTTus = math.MaxUint32
		}
		if c.Samples == 0 || c.reanchor {
			c.firstAcked, c.firstReceived, c.firstSample, c.lastSample = r.BytesAcked, r.BytesReceived, ev.Time, ev.Time
			c.reanchor = false
		}
		c.Samples++
		c.lastSample = ev.Time
		c.BytesAcked, c.BytesReceived = c.doneAcked+r.BytesAcked-c.firstAcked, c.doneRecvd+r.BytesReceived-c.firstReceived
		if r.MinRttUs > 0 && r.MinRttUs < c.MinRTTus {
			c.MinRTTus = r.MinRttUs
		}
		c.MaxSRTTus = max(c.MaxSRTTus, r.SrttUs)
		c.sumSRTTus += uint64(r.SrttUs)
		c.seeCwnd(r.Cwnd)
	case event.TypeTCPRetrans:
		s.conn(&ev.Socket, ev.Time).RetransSegs += uint64(ev.Retrans.Cnt)
	case event.TypeTCPCong:
		c := s.conn(&ev.Socket, ev.Time)
		c.CongStates[event.TCPCaState(ev.Cong.State).String()]++
		c.seeCwnd(ev.Cong.Cwnd)
	case event.TypeTCPReset:
		owner := resetOwner(ev.Socket.Sock, event.TCPState(ev.Reset.State))
		if owner == "" {
			s.conn(&ev.Socket, ev.Time).Resets++
			break
		}
		k := resetKey{ev.Socket.Netns, owner}
		r := s.resets[k]
		if r == nil {
			r = &ResetStat{Netns: k.netns, Owner: owner}
			s.resets[k] = r
			s.Resets = append(s.Resets, r)
		}
		if ev.Reset.Dir == event.ResetReceived {
			r.Received++
		} else {
			r.Sent++
		}
		r.Local, r.Peer = ev.Socket.Local, ev.Socket.Peer
	case event.TypeDevXmit, event.TypeDevRecv:
		d := &ev.Dev
		dev := s.dev(string(event.CString(d.Name[:])), d.Netns)
		dir := &dev.Xmit
		if ev.Type == event.TypeDevRecv {
			dir = &dev.Recv
		}
		dir.Skbs += d.Skbs
		dir.Bytes += d.Bytes
		dir.Segs += d.Segs
		dir.GroIn += d.GroIn
		dir.Errors += d.Errors
		dir.MaxBytes = max(dir.MaxBytes, d.MaxBytes)
		dir.Seconds += float64(ev.Time-ev.Begin) / 1e9
	case event.TypeSoftirq:
		c := s.cpu(ev.CPU)
		span := float64(ev.Time-ev.Begin) / 1e9
		if ev.Softirq.Vec == 3 {
			c.NetRxNs += ev.Softirq.TimeNs
			c.NetRxRuns += ev.Softirq.Entries
			c.NetRxSeconds += span
		} else {
			c.NetTxNs += ev.Softirq.TimeNs
			c.NetTxRuns += ev.Softirq.Entries
			c.NetTxSeconds += span
		}
	case event.TypeNapiPoll:
		c := s.cpu(ev.CPU)
		c.NapiPolls += ev.Napi.Polls
		c.NapiWork += ev.Napi.Work
		c.NapiBudgetExhausts += ev.Napi.Exhausted
	case event.TypeSockIO:
		io := &ev.SockIO
		k := sockIOKey{io.Pid, event.SockIODir(io.Dir)}
		ps := s.sockIO[k]
		if ps == nil {
			ps = &SockIOStat{Pid: io.Pid, Comm: string(event.CString(io.Comm[:])), Dir: k.dir}
			s.sockIO[k] = ps
			s.SockIO = append(s.SockIO, ps)
		}
		ps.Calls += io.Calls
		ps.Bytes += io.Bytes
		ps.Errors += io.Errors
		ps.Seconds += float64(ev.Time-ev.Begin) / 1e9
	case event.TypeQdisc:
		q := &ev.Qdisc
		qs := s.qdisc(q.Dev[:], q.Kind[:], q.Netns, q.Handle, q.Parent)
		qs.Enqueues += q.Enqueues
		qs.Dequeues += q.Dequeues
		qs.Drops += q.Drops
		qs.Requeues += q.Requeues
		qs.BacklogMax = max(qs.BacklogMax, q.BacklogMax)
	case event.TypeTCPStage:
		c := s.conn(&ev.Socket, ev.Time)
		if c.Stages == nil {
			c.Stages = new([wire.TcpStageSTAGE_MAX]wire.StageHist)
		}
		AddStages(c.Stages, &ev.Stage.Stage)
	case event.TypeQdiscDelay:
		q := &ev.QdiscDelay
		qs := s.qdisc(q.Dev[:], q.Kind[:], q.Netns, q.Handle, q.Parent)
		if qs.Wait == nil {
			qs.Wait = &QdiscWait{}
		}
		w := qs.Wait
		w.Packets += q.Packets
		w.Unstamped += q.Unstamped
		w.SumNs += q.SumNs
		w.MaxNs = max(w.MaxNs, q.MaxNs)
		for i, n := range q.Hist {
			w.Hist[i] += n
		}
	case event.TypeSkbDrop:
		d := &ev.Drop
		k := dropKey{d.Reason, d.Location, string(event.CString(d.Dev[:])), event.ProtocolName(d.Protocol, d.L4proto)}
		ds := s.drops[k]
		if ds == nil {
			ds = &DropStat{Reason: k.reason, Location: k.location, Dev: k.dev, Protocol: k.protocol}
			s.drops[k] = ds
			s.Drops = append(s.Drops, ds)
		}
		ds.Count += d.Cnt
		if ev.Socket.Local.Addr().IsValid() {
			ds.Src, ds.Dst = ev.Socket.Local, ev.Socket.Peer
		}
	}
}

// conn is the connection a socket's event belongs to: the socket's, over
// its life. Events that no longer know the peer (port 0, as after a
// linger-0 close) stay with it; another known peer means the kernel reused
// the socket's address for a new connection.
func (s *Stat) conn(sock *event.Socket, t int64) *ConnStat {
	c := s.conns[sock.Sock]
	peerKnown := sock.Peer.Port() != 0
	// The addresses are compared as values and formatted only when they
	// change: this runs for every event of a trace. A listener has no peer:
	// an event with one is of another socket at the same address.
	if c != nil && peerKnown && (c.peerKnown && c.peerAddr != sock.Peer || c.listener) {
		if old := s.past[lifeKey{sock.Sock, sock.Peer}]; old != nil {
			c = old
		} else {
			s.retire(sock.Sock)
			c = nil
		}
	}
	if c == nil {
		c = &ConnStat{Sock: sock.Sock, Peer: sock.Peer.String(), peerAddr: sock.Peer, Netns: sock.Netns, First: t,
			spanStart: t, epoch: s.epoch, CongStates: map[string]int{}}
		s.conns[sock.Sock] = c
		s.Connections = append(s.Connections, c)
	}
	if peerKnown && !c.peerKnown {
		c.Peer, c.peerAddr, c.peerKnown = sock.Peer.String(), sock.Peer, true
	}
	if (sock.Local.Port() != 0 || c.Local == "") && (c.Local == "" || c.localAddr != sock.Local) {
		c.Local, c.localAddr = sock.Local.String(), sock.Local
	}
	if c.epoch != s.epoch {
		// Seen again after a gap: what came before is banked.
		c.doneNs += c.Last - c.spanStart
		c.spanStart, c.epoch = t, s.epoch
		if c.Samples > 0 {
			c.doneSampleNs += c.lastSample - c.firstSample
			c.doneAcked, c.doneRecvd, c.reanchor = c.BytesAcked, c.BytesReceived, true
		}
	}
	c.Last = t
	return c
}

// retire ends the socket's current connection: events of the socket go to
// a new one, unless they name the old one's peer.
func (s *Stat) retire(sock uint64) {
	c := s.conns[sock]
	if c == nil {
		return
	}
	if c.peerKnown {
		s.past[lifeKey{sock, c.peerAddr}] = c
	}
	delete(s.conns, sock)
}

// runs counts the send-limit runs of every reason.
func (c *ConnStat) runs() uint64 {
	var n uint64
	for _, r := range c.limitRuns {
		n += r
	}
	return n
}

// Active says whether the connection did anything besides changing state;
// a listener is not a connection.
func (c *ConnStat) Active() bool {
	if c.listener {
		return false
	}
	return c.Samples > 0 || c.runs() > 0 || c.RetransSegs > 0 || c.Resets > 0 || len(c.CongStates) > 0 || c.Stages != nil
}

func (s *Stat) dev(name string, netns uint32) *DevStat {
	k := devKey{name, netns}
	d := s.devs[k]
	if d == nil {
		d = &DevStat{Name: name, Netns: netns}
		s.devs[k] = d
		s.Devices = append(s.Devices, d)
	}
	return d
}

func (s *Stat) cpu(n uint32) *CPUStat {
	c := s.cpus[n]
	if c == nil {
		c = &CPUStat{CPU: n}
		s.cpus[n] = c
		s.CPUs = append(s.CPUs, c)
	}
	return c
}

// Seconds is the span of the recording's events.
func (s *Stat) Seconds() float64 { return float64(s.End-s.Start-s.GapNs) / 1e9 }

// Gap says the events that follow come after time nothing recorded (a
// flight recorder's next window): the trace's span, each connection's and
// its rates leave that time out.
func (s *Stat) Gap() { s.epoch++ }

// Sort orders the tables for printing: busiest first.
func (s *Stat) Sort() {
	sort.SliceStable(s.Connections, func(i, j int) bool {
		a, b := s.Connections[i], s.Connections[j]
		return max(a.BytesAcked, a.BytesReceived) > max(b.BytesAcked, b.BytesReceived)
	})
	sort.SliceStable(s.Devices, func(i, j int) bool {
		return s.Devices[i].Xmit.Bytes+s.Devices[i].Recv.Bytes > s.Devices[j].Xmit.Bytes+s.Devices[j].Recv.Bytes
	})
	sort.Slice(s.CPUs, func(i, j int) bool { return s.CPUs[i].CPU < s.CPUs[j].CPU })
	sort.SliceStable(s.Drops, func(i, j int) bool { return s.Drops[i].Count > s.Drops[j].Count })
	sort.SliceStable(s.SockIO, func(i, j int) bool { return s.SockIO[i].Calls > s.SockIO[j].Calls })
}

// AddStages adds tcp_stage's histograms b to a.
func AddStages(a, b *[wire.TcpStageSTAGE_MAX]wire.StageHist) {
	for i := range a {
		h, add := &a[i], &b[i]
		h.Count += add.Count
		h.SumNs += add.SumNs
		for k, n := range add.Hist {
			h.Hist[k] += n
		}
	}
}
