// Package perfetto exports a trace in the Chrome trace event format (its
// JSON Object Format), which ui.perfetto.dev and chrome://tracing open:
//
//   - a process per network namespace ("netns NAME") and a thread per TCP
//     connection ("local -> peer"): a socket with one peer, as stat counts
//     connections;
//   - each tcp_sendlim run is a complete event (ph X) on its connection's
//     thread, named by its reason, with its counts and the socket's state at
//     its end as args;
//   - cwnd, segments in flight, srtt and throughput (segments sent over a
//     run; bytes acknowledged, and received, between tcp_rtt samples) are
//     counters (ph C) of the namespace's process, one per connection and
//     quantity;
//   - tcp_conn and congestion-state changes, retransmits, resets and drops
//     are instant events (ph i) on their connection's thread; resets and
//     drops that match no connection (in either direction) are instants of
//     their namespace's process;
//   - NET_RX and NET_TX softirq time is each CPU's share of the interval it
//     was measured over, counters of a "CPUs" process.
//
// tcp_rcvbuf, sk_limit, dev_xmit, dev_recv, napi_poll, qdisc and sock_io
// events are skipped.
//
// ts is wall-clock time in µs since the Unix epoch, nanoseconds as three
// decimals. No origin known when the first event is written is safe: the
// recorder attaches before it reads its clock anchor, and a run begins
// before the event that reports it. Perfetto reads the decimals exactly;
// readers that parse numbers as doubles (chrome://tracing, encoding/json)
// get them to about 0.25 µs.
package perfetto

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
)

// flushSize is how much output is buffered before it is written.
const flushSize = 64 << 10

// Exporter streams events as trace events; memory grows with the sockets
// in use (a connection is forgotten when its socket begins another),
// namespaces and CPUs seen, not with the events.
type Exporter struct {
	w     io.Writer
	sum   *analyze.Summary
	buf   []byte
	err   error
	wrote bool // an event: the next needs a comma
	nargs int
	// lastID numbers processes and threads alike: Perfetto takes a tid
	// equal to some pid for that process's main thread.
	lastID uint32
	// maxTs is the latest ts written: a renaming metadata event goes after
	// it, so that importers that sort by ts apply it last.
	maxTs int64

	procs    map[uint32]*proc // by namespace inode
	procList []*proc
	cpus     *proc
	conns    map[uint64]*conn // by socket: its current connection
	// connList are the current connections in the order they began (with
	// ended ones until there are more of them than current ones).
	connList []*conn
	ended    int
	// Connections by their addresses, for drops: in a namespace, and in any.
	byAddrsNs map[addrsNsKey]*conn
	byAddrs   map[addrsKey]*conn
	softirqs  map[softirqKey]*softirqTrack
	softList  []*softirqTrack
	protocols map[uint32]string
	scratch   []byte
}

type proc struct {
	pid   uint32
	inode uint32
	name  string // as last written
}

type conn struct {
	proc        *proc
	sock        uint64
	ended       bool
	tid         uint32
	local, peer netip.AddrPort
	// label is "local->peer", JSON-escaped, for the counters' names.
	label string
	// runEnd is the end of the latest send-limit run.
	runEnd int64
	// The previous tcp_rtt sample's bytes acknowledged and received.
	acked, received sample
	// Each counter's last value, once written (shown).
	last  [counterKinds]float64
	shown [counterKinds]bool
}

// A connection's counters.
type counterKind int

const (
	cwnd counterKind = iota
	inFlight
	srtt
	sentRate
	ackedRate
	receivedRate
	counterKinds
)

// counterNames are each counter's name before the connection's label, and
// its value's key, which Perfetto appends to the name.
var counterNames = [counterKinds][2]string{
	cwnd:         {"cwnd ", "segments"},
	inFlight:     {"inflight ", "segments"},
	srtt:         {"srtt ", "us"},
	sentRate:     {"throughput sent ", "bit/s"},
	ackedRate:    {"throughput acked ", "bit/s"},
	receivedRate: {"throughput received ", "bit/s"},
}

// sample is a byte total as of a time.
type sample struct {
	ok    bool
	bytes uint64
	t     int64
}

type addrsKey struct{ a, b netip.AddrPort }

type addrsNsKey struct {
	netns uint32
	addrsKey
}

type softirqKey struct{ cpu, vec uint32 }

type softirqTrack struct {
	softirqKey
	end   int64 // of the latest interval
	last  float64
	shown bool
}

// New starts an export to w. sum is filled while the trace is replayed
// (names of namespaces, drop reasons, the header); it is read at Close too.
func New(w io.Writer, sum *analyze.Summary) *Exporter {
	x := &Exporter{
		w: w, sum: sum, buf: make([]byte, 0, flushSize+4096),
		procs: map[uint32]*proc{}, conns: map[uint64]*conn{},
		byAddrsNs: map[addrsNsKey]*conn{}, byAddrs: map[addrsKey]*conn{}, softirqs: map[softirqKey]*softirqTrack{},
		protocols: map[uint32]string{},
	}
	x.buf = append(x.buf, "{\"traceEvents\":[\n"...)
	return x
}

// Category names: the event families the events come from.
const (
	catConn    = "tcp_conn"
	catSendlim = "tcp_sendlim"
	catCong    = "tcp_cong"
	catRetrans = "tcp_retrans"
	catRTT     = "tcp_rtt"
	catReset   = "tcp_reset"
	catDrop    = "skb_drop"
	catSoftirq = "softirq"
)

// Add writes one event; events arrive in sequence order. After a write
// error it returns that error and writes nothing more.
func (x *Exporter) Add(ev *event.Event) error {
	if x.err != nil {
		return x.err
	}
	switch ev.Type {
	case event.TypeTCPConn:
		x.addConn(ev)
	case event.TypeTCPSendlim:
		x.addSendlim(ev)
	case event.TypeTCPRTT:
		x.addRTT(ev)
	case event.TypeTCPCong:
		c := x.conn(&ev.Socket, ev.Time)
		g := &ev.Cong
		x.instant(c, catCong, ev.Time)
		x.buf = append(x.buf, "CA "...)
		x.buf = append(x.buf, event.TCPCaState(g.State).String()...)
		x.argsOpen('t')
		x.argU("cwnd", uint64(g.Cwnd))
		x.argU("ssthresh", uint64(g.Ssthresh))
		x.argU("rto_us", uint64(g.RtoUs))
		x.end()
		x.counter(c, cwnd, catCong, ev.Time, float64(g.Cwnd))
	case event.TypeTCPRetrans:
		c := x.conn(&ev.Socket, ev.Time)
		r := &ev.Retrans
		x.instant(c, catRetrans, ev.Time)
		x.buf = append(x.buf, "retrans"...)
		x.argsOpen('t')
		x.argU("segs", uint64(r.Cnt))
		x.argU("skbs", uint64(r.Skbs))
		x.argS("state", event.TCPState(r.State).String())
		x.argMicros("interval_us", ev.Time-ev.Begin)
		x.end()
	case event.TypeTCPReset:
		x.addReset(ev)
	case event.TypeSkbDrop:
		x.addDrop(ev)
	case event.TypeSoftirq:
		x.addSoftirq(ev)
	}
	x.maybeFlush()
	return x.err
}

// tcpClose is TCP_CLOSE: a change from it starts a socket's new life.
const tcpClose event.TCPState = 7

func (x *Exporter) addConn(ev *event.Event) {
	e := &ev.Conn
	// A socket's new life is a new connection, on a thread of its own,
	// even to the same peer.
	if old := x.conns[e.Sock]; old != nil && (e.Old == tcpClose || e.Old == event.TCPListen && e.New != tcpClose) {
		x.endConn(old)
	}
	c := x.conn(&e.Socket, ev.Time)
	x.instant(c, catConn, ev.Time)
	x.buf = append(x.buf, e.New.String()...)
	x.argsOpen('t')
	x.argS("from", e.Old.String())
	if e.Context == event.ContextTask {
		x.argU("pid", uint64(e.Pid))
		x.argB("comm", cstr(e.Comm[:]))
	} else {
		x.argS("context", e.Context.String())
	}
	if e.Err != 0 {
		x.argS("err", event.Errno(e.Err))
	}
	x.end()
}

// endConn ends a connection's rate counters and forgets it, when its
// socket began another: memory follows the sockets in use, whose addresses
// the kernel reuses, not every connection the trace saw. A connection
// stays past its close, whose last runs and samples come after it.
func (x *Exporter) endConn(c *conn) {
	x.endCounters(c)
	c.ended = true
	if x.conns[c.sock] == c {
		delete(x.conns, c.sock)
	}
	if c.local.Port() != 0 && c.peer.Port() != 0 {
		k := addrsKey{unmap(c.local), unmap(c.peer)}
		if x.byAddrs[k] == c {
			delete(x.byAddrs, k)
		}
		if kn := (addrsNsKey{c.proc.inode, k}); x.byAddrsNs[kn] == c {
			delete(x.byAddrsNs, kn)
		}
	}
	if x.ended++; x.ended > len(x.connList)/2 {
		open := x.connList[:0]
		for _, c := range x.connList {
			if !c.ended {
				open = append(open, c)
			}
		}
		clear(x.connList[len(open):])
		x.connList, x.ended = open, 0
	}
}

// endCounters drops a connection's rates to zero where its data ended.
func (x *Exporter) endCounters(c *conn) {
	if c.shown[sentRate] {
		x.counter(c, sentRate, catSendlim, c.runEnd, 0)
	}
	if c.shown[ackedRate] {
		x.counter(c, ackedRate, catRTT, c.acked.t, 0)
	}
	if c.shown[receivedRate] {
		x.counter(c, receivedRate, catRTT, c.received.t, 0)
	}
}

func (x *Exporter) addSendlim(ev *event.Event) {
	s := &ev.Sendlim
	c := x.conn(&s.Socket, ev.Time)
	// A run ends when the event reporting it is stamped, a few hundred ns
	// after the next run began: the next run starts where the last ended,
	// so that one socket's spans nest in none. A run that arrives late,
	// wholly before the last end, keeps its times.
	begin := s.Begin
	if begin < c.runEnd && ev.Time > c.runEnd {
		begin = c.runEnd
	}
	x.open('X', catSendlim, c.proc.pid, c.tid, begin)
	x.buf = append(x.buf, s.Reason.String()...)
	x.argsOpenDur(max(0, ev.Time-begin))
	x.argU("cnt", uint64(s.Cnt))
	x.argU("sent_pkts", uint64(s.SentPkts))
	x.argU("cwnd", uint64(s.Cwnd))
	x.argU("ssthresh", uint64(s.Ssthresh))
	x.argU("inflight", uint64(s.InFlight))
	x.argU("snd_wnd", uint64(s.SndWnd))
	x.argU("mss", uint64(s.MSS))
	x.argU("unsent", uint64(s.Unsent))
	x.argU("wmem_queued", uint64(s.WmemQueued))
	x.argU("sndbuf", uint64(s.Sndbuf))
	if s.Probes > 0 {
		x.argU("probes", uint64(s.Probes))
	}
	if s.Backoff > 0 {
		x.argU("backoff", uint64(s.Backoff))
	}
	x.end()
	x.counter(c, cwnd, catSendlim, ev.Time, float64(s.Cwnd))
	x.counter(c, inFlight, catSendlim, ev.Time, float64(s.InFlight))
	// Throughput holds from a run's begin to the next run's; a gap (lost
	// events) drops it to zero rather than drawing the last rate across.
	// A receiver's runs send nothing: it gets no counter.
	if c.shown[sentRate] && begin > c.runEnd {
		x.counter(c, sentRate, catSendlim, c.runEnd, 0)
	}
	if ev.Time > s.Begin && (s.SentPkts > 0 || c.shown[sentRate]) {
		bits := float64(s.SentPkts) * float64(s.MSS) * 8
		x.counter(c, sentRate, catSendlim, begin, bits*1e9/float64(ev.Time-s.Begin))
	}
	c.runEnd = max(c.runEnd, ev.Time)
}

func (x *Exporter) addRTT(ev *event.Event) {
	r := &ev.RTT
	c := x.conn(&ev.Socket, ev.Time)
	x.counter(c, srtt, catRTT, ev.Time, float64(r.SrttUs))
	x.counter(c, cwnd, catRTT, ev.Time, float64(r.Cwnd))
	x.counter(c, inFlight, catRTT, ev.Time, float64(r.InFlight))
	x.rate(c, ackedRate, &c.acked, r.BytesAcked, ev.Time)
	x.rate(c, receivedRate, &c.received, r.BytesReceived, ev.Time)
}

// rate writes the rate of a byte total between its previous sample and
// this one, which holds from the previous; a total that never moved (the
// bytes a receiver had acknowledged) gets no counter.
func (x *Exporter) rate(c *conn, k counterKind, prev *sample, bytes uint64, t int64) {
	if prev.ok && bytes >= prev.bytes && t > prev.t && (bytes > prev.bytes || c.shown[k]) {
		x.counter(c, k, catRTT, prev.t, float64(bytes-prev.bytes)*8e9/float64(t-prev.t))
	}
	*prev = sample{true, bytes, t}
}

// addReset puts a reset on its connection; one sent for no socket, or by a
// listener for a segment no connection of its own took, on the namespace's
// process.
func (x *Exporter) addReset(ev *event.Event) {
	r := &ev.Reset
	reason := x.sum.Names.ResetReason(r.Reason)
	onConn := ev.Socket.Sock != 0 && event.TCPState(r.State) != event.TCPListen
	if onConn {
		x.instant(x.conn(&ev.Socket, ev.Time), catReset, ev.Time)
	} else {
		x.processInstant(ev.Socket.Netns, catReset, ev.Time)
	}
	x.buf = append(x.buf, "reset "...)
	x.buf = append(x.buf, event.ResetDir(r.Dir)...)
	x.argsOpen(scope(onConn))
	if r.Dir == event.ResetSent {
		if reason != "" {
			x.argS("reason", reason)
		} else {
			x.argU("reason", uint64(r.Reason))
		}
	}
	x.argS("path", event.ResetPathOf(r, reason).String())
	x.argS("state", event.TCPState(r.State).String())
	if !onConn {
		x.argAddr("local", ev.Socket.Local)
		x.argAddr("peer", ev.Socket.Peer)
	}
	x.end()
}

// addDrop puts a drop on the connection its packet belongs to: the
// connection of the namespace it was dropped in, either direction (data or
// its ACKs), else of any namespace; else on the namespace's process.
func (x *Exporter) addDrop(ev *event.Event) {
	d := &ev.Drop
	c := x.match(d.Netns, ev.Socket.Local, ev.Socket.Peer)
	if c != nil {
		x.instant(c, catDrop, ev.Time)
	} else {
		x.processInstant(d.Netns, catDrop, ev.Time)
	}
	reason := x.sum.Names.DropReason(d.Reason)
	x.buf = append(x.buf, "drop "...)
	if reason != "" {
		x.buf = appendString(x.buf, reason)
	} else {
		x.buf = strconv.AppendUint(x.buf, uint64(d.Reason), 10)
	}
	x.argsOpen(scope(c != nil))
	x.argU("cnt", d.Cnt)
	x.argMicros("interval_us", ev.Time-ev.Begin)
	if reason != "" {
		x.argS("reason", reason)
	} else {
		x.argU("reason", uint64(d.Reason))
	}
	if sym := x.sum.Names.Symbol(d.Location); sym != "" {
		x.argS("location", sym)
	} else {
		x.scratch = append(x.scratch[:0], "0x"...)
		x.scratch = strconv.AppendUint(x.scratch, d.Location, 16)
		x.argB("location", x.scratch)
	}
	if name := event.CString(d.Dev[:]); len(name) > 0 {
		x.argB("dev", name)
	}
	x.argS("protocol", x.protocol(d.Protocol, d.L4proto))
	if ev.Socket.Local.Addr().IsValid() {
		x.argAddr("src", ev.Socket.Local)
		x.argAddr("dst", ev.Socket.Peer)
	}
	x.end()
}

func (x *Exporter) addSoftirq(ev *event.Event) {
	// Only the network vectors are recorded; an interval of no length has
	// no share.
	v := ev.Softirq.Vec
	if v != 2 && v != 3 || ev.Time <= ev.Begin {
		return
	}
	k := softirqKey{ev.CPU, v}
	t := x.softirqs[k]
	if t == nil {
		t = &softirqTrack{softirqKey: k}
		x.softirqs[k] = t
		x.softList = append(x.softList, t)
	}
	// An interval without softirqs has no event: the share drops to zero.
	if t.shown && ev.Begin > t.end {
		x.softirqCounter(t, t.end, 0)
	}
	x.softirqCounter(t, ev.Begin, min(1, float64(ev.Softirq.TimeNs)/float64(ev.Time-ev.Begin)))
	t.end = max(t.end, ev.Time)
}

func (x *Exporter) softirqCounter(t *softirqTrack, ts int64, share float64) {
	if t.shown && t.last == share {
		return
	}
	t.last, t.shown = share, true
	if x.cpus == nil {
		x.cpus = &proc{pid: x.newID(), name: "CPUs"}
		x.meta("process_name", x.cpus.pid, x.cpus.pid, ts, x.cpus.name)
	}
	x.open('C', catSoftirq, x.cpus.pid, x.cpus.pid, ts)
	x.buf = append(x.buf, "softirq CPU "...)
	x.buf = strconv.AppendUint(x.buf, uint64(t.cpu), 10)
	x.argsOpen(0)
	x.argF(event.SoftirqVec(t.vec), share, 4)
	x.end()
}

// Close ends the counters still running, renames namespaces whose names
// the trace gave after their first event, and finishes the document with
// the recording's metadata. It returns the first write error.
func (x *Exporter) Close() error {
	for _, p := range x.procList {
		if name := x.netnsLabel(p.inode); name != p.name {
			p.name = name
			x.meta("process_name", p.pid, p.pid, x.maxTs+1, name)
		}
	}
	for _, c := range x.connList {
		if !c.ended {
			x.endCounters(c)
		}
	}
	for _, t := range x.softList {
		x.softirqCounter(t, t.end, 0)
	}
	h := &x.sum.Header
	b := append(x.buf, "\n],\n\"displayTimeUnit\":\"ns\",\n\"metadata\":{"...)
	b = appendField(b, "hostname", h.Hostname, true)
	b = appendField(b, "kernel", h.Kernel, true)
	b = appendField(b, "machine", h.Machine, true)
	b = appendField(b, "cpus", strconv.FormatUint(uint64(h.CPUs), 10), false)
	b = appendField(b, "tool", h.Tool, true)
	b = appendField(b, "command", h.Command, true)
	b = appendField(b, "recording_start", time.Unix(0, h.WallAnchorNs).UTC().Format(time.RFC3339Nano), true)
	b = appendField(b, "events", strconv.FormatUint(x.sum.Matched, 10), false)
	b = appendField(b, "lost_events", strconv.FormatUint(x.sum.TotalLost(), 10), false)
	b = appendField(b, "ended", strconv.FormatBool(x.sum.Ended), false)
	b = appendField(b, "timestamps", "ts is wall-clock microseconds since the Unix epoch", true)
	b[len(b)-1] = '}' // the last field's comma
	x.buf = append(b, "}\n"...)
	x.flush()
	return x.err
}

// conn is the connection a socket's event belongs to: the socket's, until
// an event names another peer. Events that no longer know the peer (port 0,
// as after a linger-0 close) stay with it; a local port first known at the
// handshake renames its thread.
func (x *Exporter) conn(s *event.Socket, t int64) *conn {
	c := x.conns[s.Sock]
	peerKnown := s.Peer.Port() != 0
	if c != nil && (!peerKnown || s.Peer == c.peer) {
		if s.Local.Port() != 0 && s.Local != c.local {
			c.local = s.Local
			x.nameConn(c, x.maxTs+1)
		}
		return c
	}
	if c != nil {
		x.endConn(c)
	}
	c = &conn{proc: x.proc(s.Netns, t), sock: s.Sock, tid: x.newID(), local: s.Local, peer: s.Peer}
	x.conns[s.Sock] = c
	x.connList = append(x.connList, c)
	x.nameConn(c, t)
	return c
}

// nameConn writes the connection's thread name, makes its counters' label
// and indexes it by its addresses.
func (x *Exporter) nameConn(c *conn, ts int64) {
	local, peer := c.local.String(), c.peer.String()
	c.label = string(appendString(nil, local+"->"+peer))
	x.meta("thread_name", c.proc.pid, c.tid, ts, local+" -> "+peer)
	if c.local.Port() != 0 && c.peer.Port() != 0 {
		k := addrsKey{unmap(c.local), unmap(c.peer)}
		x.byAddrs[k] = c
		x.byAddrsNs[addrsNsKey{c.proc.inode, k}] = c
	}
}

// match is the connection of a packet from src to dst dropped in netns.
func (x *Exporter) match(netns uint32, src, dst netip.AddrPort) *conn {
	if src.Port() == 0 || dst.Port() == 0 {
		return nil
	}
	fwd := addrsKey{unmap(src), unmap(dst)}
	rev := addrsKey{fwd.b, fwd.a}
	if c := x.byAddrsNs[addrsNsKey{netns, fwd}]; c != nil {
		return c
	}
	if c := x.byAddrsNs[addrsNsKey{netns, rev}]; c != nil {
		return c
	}
	if c := x.byAddrs[fwd]; c != nil {
		return c
	}
	return x.byAddrs[rev]
}

// protocol names a packet's protocols once per pair: event.ProtocolName
// builds the name.
func (x *Exporter) protocol(ethertype uint16, l4 uint8) string {
	k := uint32(ethertype)<<8 | uint32(l4)
	name, ok := x.protocols[k]
	if !ok {
		name = event.ProtocolName(ethertype, l4)
		x.protocols[k] = name
	}
	return name
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

func (x *Exporter) proc(inode uint32, t int64) *proc {
	if p := x.procs[inode]; p != nil {
		return p
	}
	p := &proc{pid: x.newID(), inode: inode, name: x.netnsLabel(inode)}
	x.procs[inode] = p
	x.procList = append(x.procList, p)
	x.meta("process_name", p.pid, p.pid, t, p.name)
	return p
}

func (x *Exporter) netnsLabel(inode uint32) string {
	if name := x.sum.Names.NetnsName(inode); name != "" {
		return "netns " + name
	}
	return "netns " + strconv.FormatUint(uint64(inode), 10)
}

func (x *Exporter) argB(k string, v []byte) {
	x.argKey(k)
	x.buf = append(x.buf, '"')
	x.buf = appendString(x.buf, v)
	x.buf = append(x.buf, '"')
}

func (x *Exporter) argAddr(k string, a netip.AddrPort) {
	x.scratch = a.AppendTo(x.scratch[:0])
	x.argB(k, x.scratch)
}

// cstr is a NUL-padded name's bytes up to the NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// meta writes a metadata event naming a process or thread.
func (x *Exporter) meta(kind string, pid, tid uint32, ts int64, name string) {
	x.open('M', "", pid, tid, ts)
	x.buf = append(x.buf, kind...)
	x.argsOpen(0)
	x.argS("name", name)
	x.end()
}

func (x *Exporter) maybeFlush() {
	if len(x.buf) >= flushSize {
		x.flush()
	}
}

func (x *Exporter) flush() {
	if x.err == nil && len(x.buf) > 0 {
		if _, err := x.w.Write(x.buf); err != nil {
			x.err = fmt.Errorf("writing the perfetto trace: %w", err)
		}
	}
	x.buf = x.buf[:0]
}
