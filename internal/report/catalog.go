package report

import (
	"strconv"

	"github.com/skbtrace/skbtrace/internal/event"
)

// fields receives an event's fields in order; the text and JSON forms
// implement it, so each family's fields are listed once.
type fields interface {
	flag(key, v string) // the [FLAG] of the text form; key names it in JSON
	str(key, v string)
	bytes(key string, v []byte)
	uint(key string, v uint64)
	time(key string, ns int64)
	hist(key string, v []uint64)
	socket(s *event.Socket, names Names)
	// netns names a namespace: the text form by its name (or inode), JSON
	// by its inode with the name beside it, as the socket fields are.
	netns(inode uint32, names Names)
}

// catalogFields lists the fields of the families after tcp_conn and tcp_sendlim.
func catalogFields(f fields, ev *event.Event, names Names) {
	switch ev.Type {
	case event.TypeTCPCong:
		c := &ev.Cong
		f.flag("state", event.TCPCaState(c.State).String())
		f.socket(&ev.Socket, names)
		f.uint("cwnd", uint64(c.Cwnd))
		f.uint("ssthresh", uint64(c.Ssthresh))
		f.uint("snd_nxt", uint64(c.SndNxt))
		f.uint("snd_una", uint64(c.SndUna))
		f.uint("rto_us", uint64(c.RtoUs))
	case event.TypeTCPRetrans:
		r := &ev.Retrans
		f.socket(&ev.Socket, names)
		f.str("state", event.TCPState(r.State).String())
		f.time("begin", ev.Begin)
		f.uint("cnt", uint64(r.Cnt))
		f.uint("skbs", uint64(r.Skbs))
	case event.TypeTCPRTT:
		r := &ev.RTT
		f.socket(&ev.Socket, names)
		f.uint("srtt_us", uint64(r.SrttUs))
		f.uint("rttvar_us", uint64(r.RttvarUs))
		f.uint("min_rtt_us", uint64(r.MinRttUs))
		f.uint("cwnd", uint64(r.Cwnd))
		f.uint("ssthresh", uint64(r.Ssthresh))
		f.uint("inflight", uint64(r.InFlight))
		f.uint("snd_wnd", uint64(r.SndWnd))
		f.uint("rcv_wnd", uint64(r.RcvWnd))
		f.uint("delivery_rate", r.DeliveryRate)
		f.uint("bytes_acked", r.BytesAcked)
		f.uint("bytes_received", r.BytesReceived)
	case event.TypeTCPReset:
		r := &ev.Reset
		f.flag("dir", event.ResetDir(r.Dir))
		f.socket(&ev.Socket, names)
		if r.Sock != 0 {
			f.str("state", event.TCPState(r.State).String())
		}
		var reason string
		if r.Dir == 0 {
			reason = enumName(names, r.Reason, Names.ResetReason)
		}
		if p := event.ResetPathOf(r, reason); p != event.ResetPathUnknown {
			f.str("path", p.String())
		}
		if r.Dir == 0 {
			f.str("reason", reason)
		}
	case event.TypeTCPRcvbuf:
		r := &ev.Rcvbuf
		f.socket(&ev.Socket, names)
		f.uint("rcvbuf", uint64(r.Rcvbuf))
		f.uint("old", uint64(r.OldRcvbuf))
		f.uint("rcv_space", uint64(r.RcvSpace))
		f.uint("window_clamp", uint64(r.WindowClamp))
		f.uint("rcv_wnd", uint64(r.RcvWnd))
		f.uint("rmem_alloc", uint64(r.RmemAlloc))
	case event.TypeSkLimit:
		l := &ev.SkLimit
		f.flag("kind", event.SkLimitKind(l.Kind))
		f.socket(&ev.Socket, names)
		f.time("begin", ev.Begin)
		f.uint("cnt", l.Cnt)
	case event.TypeSkbDrop:
		d := &ev.Drop
		f.flag("reason", enumName(names, d.Reason, Names.DropReason))
		f.bytes("dev", event.CString(d.Dev[:]))
		f.str("location", symbol(names, d.Location))
		f.str("protocol", event.ProtocolName(d.Protocol, d.L4proto))
		if ev.Socket.Local.Addr().IsValid() {
			// A dropped packet may be inbound or outbound: its own source and destination.
			f.str("src", ev.Socket.Local.String())
			f.str("dst", ev.Socket.Peer.String())
		}
		netns(f, d.Netns, names)
		if ev.Socket.NetnsByAddr {
			f.str("netns_by", "addr")
		}
		f.uint("cnt", d.Cnt)
		f.time("begin", ev.Begin)
	case event.TypeDevXmit, event.TypeDevRecv:
		d := &ev.Dev
		f.bytes("dev", event.CString(d.Name[:]))
		netns(f, d.Netns, names)
		f.uint("skbs", d.Skbs)
		f.uint("bytes", d.Bytes)
		f.uint("segs", d.Segs)
		f.uint("max_bytes", uint64(d.MaxBytes))
		if ev.Type == event.TypeDevRecv {
			f.uint("gro_in", d.GroIn)
		} else {
			f.uint("errors", d.Errors)
		}
		f.hist("segs_hist", d.Hist[:])
		f.time("begin", ev.Begin)
	case event.TypeNapiPoll:
		n := &ev.Napi
		f.bytes("dev", event.CString(n.Name[:]))
		netns(f, n.Netns, names)
		f.uint("polls", n.Polls)
		f.uint("work", n.Work)
		f.uint("budget", uint64(n.Budget))
		f.uint("exhausted", n.Exhausted)
		f.time("begin", ev.Begin)
	case event.TypeSoftirq:
		s := &ev.Softirq
		f.flag("vec", event.SoftirqVec(s.Vec))
		f.uint("entries", s.Entries)
		f.uint("time_ns", s.TimeNs)
		f.time("begin", ev.Begin)
	case event.TypeQdisc:
		q := &ev.Qdisc
		f.bytes("dev", event.CString(q.Dev[:]))
		netns(f, q.Netns, names)
		f.bytes("kind", event.CString(q.Kind[:]))
		f.str("handle", event.QdiscHandle(q.Handle))
		f.str("parent", event.QdiscHandle(q.Parent))
		f.uint("enqueues", q.Enqueues)
		f.uint("dequeues", q.Dequeues)
		f.uint("drops", q.Drops)
		f.uint("requeues", q.Requeues)
		f.uint("overlimits", q.Overlimits)
		f.uint("backlog_max", uint64(q.BacklogMax))
		f.uint("qlen_max", uint64(q.QlenMax))
		f.uint("backlog", uint64(q.Backlog))
		f.uint("qlen", uint64(q.Qlen))
		f.time("begin", ev.Begin)
	case event.TypeSockIO:
		s := &ev.SockIO
		f.flag("dir", event.SockIODir(s.Dir))
		f.uint("pid", uint64(s.Pid))
		f.bytes("comm", event.CString(s.Comm[:]))
		f.uint("calls", s.Calls)
		f.uint("bytes", s.Bytes)
		f.uint("errors", s.Errors)
		f.hist("size_hist", s.Hist[:])
		f.time("begin", ev.Begin)
	}
}

func netns(f fields, inode uint32, names Names) { f.netns(inode, names) }

func (t *textFields) netns(inode uint32, names Names) { t.b = appendNetns(t.b, inode, names) }

func (j *jsonFields) netns(inode uint32, names Names) {
	j.b = jsonUint(j.b, "netns", uint64(inode))
	if names != nil {
		if n := names.NetnsName(inode); n != "" {
			j.b = jsonString(j.b, "netns_name", n)
		}
	}
}

func enumName(names Names, v uint32, lookup func(Names, uint32) string) string {
	if names != nil {
		if n := lookup(names, v); n != "" {
			return n
		}
	}
	return strconv.FormatUint(uint64(v), 10)
}

func symbol(names Names, addr uint64) string {
	if names != nil {
		if s := names.Symbol(addr); s != "" {
			return s
		}
	}
	return "0x" + strconv.FormatUint(addr, 16)
}

type textFields struct{ b []byte }

func (t *textFields) flag(_, v string) {
	t.b = append(t.b, " ["...)
	t.b = append(t.b, v...)
	t.b = append(t.b, ']')
}

func (t *textFields) key(k string) {
	t.b = append(t.b, ' ')
	t.b = append(t.b, k...)
	t.b = append(t.b, '=')
}

func (t *textFields) str(k, v string)          { t.key(k); t.b = appendToken(t.b, []byte(v)) }
func (t *textFields) bytes(k string, v []byte) { t.key(k); t.b = appendToken(t.b, v) }
func (t *textFields) uint(k string, v uint64)  { t.key(k); t.b = strconv.AppendUint(t.b, v, 10) }
func (t *textFields) time(k string, ns int64)  { t.key(k); t.b = appendTime(t.b, ns) }

func (t *textFields) hist(k string, v []uint64) {
	t.key(k)
	for i, n := range v {
		if i > 0 {
			t.b = append(t.b, ',')
		}
		t.b = strconv.AppendUint(t.b, n, 10)
	}
}

func (t *textFields) socket(s *event.Socket, names Names) {
	t.b = appendSocket(t.b, s)
	t.b = appendNetns(t.b, s.Netns, names)
	if s.NetnsByAddr {
		t.b = append(t.b, " netns_by=addr"...)
	}
}

type jsonFields struct{ b []byte }

func (j *jsonFields) flag(k, v string)         { j.b = jsonString(j.b, k, v) }
func (j *jsonFields) str(k, v string)          { j.b = jsonString(j.b, k, v) }
func (j *jsonFields) bytes(k string, v []byte) { j.b = jsonString(j.b, k, string(v)) }
func (j *jsonFields) uint(k string, v uint64)  { j.b = jsonUint(j.b, k, v) }

func (j *jsonFields) time(k string, ns int64) {
	j.b = append(j.b, `,"`...)
	j.b = append(j.b, k...)
	j.b = append(j.b, `":"`...)
	j.b = appendTime(j.b, ns)
	j.b = append(j.b, '"')
}

func (j *jsonFields) hist(k string, v []uint64) {
	j.b = append(j.b, `,"`...)
	j.b = append(j.b, k...)
	j.b = append(j.b, `":[`...)
	for i, n := range v {
		if i > 0 {
			j.b = append(j.b, ',')
		}
		j.b = strconv.AppendUint(j.b, n, 10)
	}
	j.b = append(j.b, ']')
}

func (j *jsonFields) socket(s *event.Socket, names Names) { j.b = jsonSocket(j.b, s, names) }
