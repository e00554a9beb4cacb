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
	epoch, gapFrom int32
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
	// past holds a socket's earlier connections, by socket and both ends:
	// the kernel reuses a freed socket's memory (iperf3's server re-listens
	// in the accepted socket's, a client's next connect gets the last one's),
	// and an event of the earlier life read after the new one began
	// (tcp_stage's flush) still belongs to it.
	past   map[lifeKey]*ConnStat
	devs   map[devKey]*DevStat
	cpus   map[uint32]*CPUStat
	drops  map[dropKey]*DropStat
	qdiscs map[qdiscKey]*QdiscStat
	resets map[resetKey]*ResetStat
}

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
		if newLife(ev.Conn.Old, ev.Conn.New) {
			// Whatever the socket's address held before was another
			// connection (or socket), even to the same peer.
			s.retire(ev.Conn.Sock)
		}
		c := s.conn(&ev.Conn.Socket, ev.Time)
		c.states += string([]byte{byte(ev.Conn.New)})
		c.established = c.established || ev.Conn.New == event.TCPEstablished && c.runs() == 0
		c.listener = c.listener || ev.Conn.New == event.TCPListen
		c.closed = c.closed || ev.Conn.New == tcpClose
	case event.TypeTCPSendlim:
		l := &ev.Sendlim
		c := s.conn(&l.Socket, ev.Time)
		if int(l.Reason) < event.SendlimCount {
			e := c.limit(l.Reason)
			e.ns += ev.Time - l.Begin
			e.count += uint64(l.Cnt)
			e.runs++
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
		done := c.banked()
		c.BytesAcked, c.BytesReceived = done.acked+r.BytesAcked-c.firstAcked, done.recvd+r.BytesReceived-c.firstReceived
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
		c.CongStates.add(event.TCPCaState(ev.Cong.State))
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
			c.Stages = &StageHists{}
		}
		c.Stages.Add(&ev.Stage.Stage)
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
