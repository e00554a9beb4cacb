package event

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

const (
	afInet  = 2
	afInet6 = 10
)

// Decoder turns trace records into events. It is cheap to copy.
type Decoder struct {
	header *trace.Header
	order  trace.ByteOrder
	native bool
}

// NewDecoder decodes records of a trace with the given header.
func NewDecoder(h *trace.Header) Decoder {
	return Decoder{header: h, order: h.ByteOrder, native: trace.IsNative(h.ByteOrder)}
}

// IsEvent says whether a record type holds a kernel event (as opposed to metadata).
func IsEvent(recordType uint16) bool { return recordType > 0 && recordType < 0x100 }

// Decode fills ev from a kernel-event record. Unknown event types, written by
// a newer skbtrace, return ok=false so callers can count and skip them.
func (d Decoder) Decode(rec trace.Record, ev *Event) (ok bool, err error) {
	switch Type(rec.Type) {
	case TypeTCPConn:
		var w wire.TcpConnEvent
		if err := decodeWire(d, rec, &w); err != nil {
			return false, err
		}
		d.header2(&w.Hdr, ev)
		c := &ev.Conn
		c.Socket = socket(w.Sock, &w.Addrs)
		c.Old, c.New = TCPState(w.Oldstate), TCPState(w.Newstate)
		c.Context = Context(w.Context)
		c.Pid = w.Pid
		c.Comm = *(*[16]byte)(unsafe.Pointer(&w.Comm))
		c.Err = w.Err
		ev.Begin = 0
		return true, nil
	case TypeTCPSendlim:
		var w wire.TcpSendlimEvent
		if err := decodeWireFrom(d, rec, &w, sendlimV1Size); err != nil {
			return false, err
		}
		d.header2(&w.Hdr, ev)
		s := &ev.Sendlim
		s.Socket = socket(w.Sock, &w.Addrs)
		s.Reason = SendlimReason(w.Reason)
		s.Begin = d.header.WallTime(w.BeginNs)
		ev.Begin = s.Begin
		s.Cnt, s.SentPkts = w.Cnt, w.Sentpkts
		s.Cwnd, s.Ssthresh, s.InFlight, s.SndWnd = w.Cwnd, w.Ssthresh, w.InFlight, w.SndWnd
		s.MSS, s.Unsent, s.WmemQueued, s.Sndbuf = w.Mss, w.Unsent, w.WmemQueued, w.Sndbuf
		s.Probes, s.Backoff = w.Probes, w.Backoff
		s.BusyUs, s.RwndLimitedUs, s.SndbufLimitedUs = w.BusyUs, w.RwndLimitedUs, w.SndbufLimitedUs
		return true, nil
	case TypeTCPCong:
		c := &ev.Cong
		return decodeSocketEvent(d, rec, ev, c, &c.Hdr, &c.Addrs, &c.Sock, nil)
	case TypeTCPRetrans:
		r := &ev.Retrans
		return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, &r.BeginNs)
	case TypeTCPRTT:
		r := &ev.RTT
		return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
	case TypeTCPReset:
		r := &ev.Reset
		return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
	case TypeTCPRcvbuf:
		r := &ev.Rcvbuf
		return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
	case TypeSkLimit:
		l := &ev.SkLimit
		return decodeSocketEvent(d, rec, ev, l, &l.Hdr, &l.Addrs, &l.Sock, &l.BeginNs)
	case TypeSkbDrop:
		p := &ev.Drop
		return decodeSocketEvent(d, rec, ev, p, &p.Hdr, &p.Addrs, nil, &p.BeginNs)
	case TypeDevXmit, TypeDevRecv:
		return decodeAggregate(d, rec, ev, &ev.Dev, &ev.Dev.Hdr, &ev.Dev.BeginNs)
	case TypeNapiPoll:
		return decodeAggregate(d, rec, ev, &ev.Napi, &ev.Napi.Hdr, &ev.Napi.BeginNs)
	case TypeSoftirq:
		return decodeAggregate(d, rec, ev, &ev.Softirq, &ev.Softirq.Hdr, &ev.Softirq.BeginNs)
	case TypeQdisc:
		return decodeAggregate(d, rec, ev, &ev.Qdisc, &ev.Qdisc.Hdr, &ev.Qdisc.BeginNs)
	case TypeSockIO:
		return decodeAggregate(d, rec, ev, &ev.SockIO, &ev.SockIO.Hdr, &ev.SockIO.BeginNs)
	}
	return false, nil
}

// decodeAggregate decodes an event the recorder wrote from kernel maps.
func decodeAggregate[T any](d Decoder, rec trace.Record, ev *Event, w *T, hdr *wire.EventHeader, begin *uint64) (bool, error) {
	if err := decodeWire(d, rec, w); err != nil {
		return false, err
	}
	d.header2(hdr, ev)
	ev.Begin = d.header.WallTime(*begin)
	return true, nil
}

// decodeSocketEvent decodes an event about one socket into its wire member
// and ev.Socket. sockField points at the member's sock address, if it has one;
// begin at its begin time, for folded or aggregated events.
func decodeSocketEvent[T any](d Decoder, rec trace.Record, ev *Event, w *T, hdr *wire.EventHeader, addrs *wire.SockAddrs, sockField *uint64, begin *uint64) (bool, error) {
	if err := decodeWire(d, rec, w); err != nil {
		return false, err
	}
	d.header2(hdr, ev)
	var sock uint64
	if sockField != nil {
		sock = *sockField
	}
	ev.Socket = socket(sock, addrs)
	ev.Begin = 0
	if begin != nil {
		ev.Begin = d.header.WallTime(*begin)
	}
	return true, nil
}

func (d Decoder) header2(h *wire.EventHeader, ev *Event) {
	ev.Type = Type(h.Type)
	ev.Seq = h.Seq
	ev.Time = d.header.WallTime(h.TsNs)
	ev.CPU = h.Cpu
}

// decodeWire copies a record body into its wire struct. Records in this
// machine's byte order are copied directly (the struct layout is the C one);
// others go through encoding/binary. A body longer than the struct is
// accepted, so fields appended by a later version are skipped.
func decodeWire[T any](d Decoder, rec trace.Record, w *T) error {
	return decodeWireFrom(d, rec, w, int(unsafe.Sizeof(*w)))
}

// sendlimV1Size is tcp_sendlim's size before the kernel's chrono totals
// were appended (trace format 1.1): older records read them as zero.
const sendlimV1Size = int(unsafe.Offsetof(wire.TcpSendlimEvent{}.BusyUs))

// decodeWireFrom decodes a struct whose later fields were appended over
// time: a body of at least minSize bytes is accepted, the rest zeroed.
func decodeWireFrom[T any](d Decoder, rec trace.Record, w *T, minSize int) error {
	size := int(unsafe.Sizeof(*w))
	if len(rec.Body) < minSize {
		return fmt.Errorf("%s record at offset %d has %d bytes, want %d",
			Type(rec.Type).Action(), rec.Offset, len(rec.Body), size)
	}
	body := rec.Body
	if len(body) < size {
		body = make([]byte, size)
		copy(body, rec.Body)
	}
	if d.native {
		*w = *(*T)(unsafe.Pointer(unsafe.SliceData(body)))
		return nil
	}
	if _, err := binary.Decode(body[:size], d.order, w); err != nil {
		return fmt.Errorf("decoding %s record at offset %d: %w", Type(rec.Type).Action(), rec.Offset, err)
	}
	return nil
}

func socket(sock uint64, a *wire.SockAddrs) Socket {
	return Socket{
		Sock:        sock,
		Local:       netip.AddrPortFrom(addr(a.Family, &a.Saddr), a.Sport),
		Peer:        netip.AddrPortFrom(addr(a.Family, &a.Daddr), a.Dport),
		Netns:       a.Netns,
		NetnsByAddr: a.NetnsByAddr != 0,
	}
}

func addr(family uint16, b *[16]uint8) netip.Addr {
	switch family {
	case afInet:
		return netip.AddrFrom4([4]byte(b[:4]))
	case afInet6:
		return netip.AddrFrom16(*b)
	}
	return netip.Addr{}
}
