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
	action string // of the record being decoded, for errors
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
	k := Type(rec.Type).Kind()
	if k == nil {
		return false, nil
	}
	d.action = k.Action
	return k.decode(d, rec, ev)
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

// decodeWireFrom decodes a struct whose later fields were appended over
// time: a body of at least minSize bytes is accepted, the rest zeroed.
func decodeWireFrom[T any](d Decoder, rec trace.Record, w *T, minSize int) error {
	size := int(unsafe.Sizeof(*w))
	if len(rec.Body) < minSize {
		return fmt.Errorf("%s record at offset %d has %d bytes, want %d",
			d.action, rec.Offset, len(rec.Body), size)
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
		return fmt.Errorf("decoding %s record at offset %d: %w", d.action, rec.Offset, err)
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
