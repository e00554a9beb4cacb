package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var skbDrop = Family{
	ID:          uint16(wire.EventFamilyFAMILY_SKB_DROP),
	Name:        "skb_drop",
	Description: "dropped packets by reason, location and device, per interval",
	Hooks:       Slots(BTFHook(wire.ProgSkbDrop, "kfree_skb")),
	Events:      []EventKind{{Type: TypeSkbDrop, Action: "skb_drop", decode: decodeSkbDrop, Fields: fieldsSkbDrop}},
}

func decodeSkbDrop(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	p := &ev.Drop
	return decodeSocketEvent(d, rec, ev, p, &p.Hdr, &p.Addrs, nil, &p.BeginNs)
}

func fieldsSkbDrop(f Fields, ev *Event, names Names) {
	d := &ev.Drop
	f.Flag("reason", EnumName(names, d.Reason, Names.DropReason))
	f.Bytes("dev", CString(d.Dev[:]))
	f.Str("location", SymbolName(names, d.Location))
	f.Str("protocol", ProtocolName(d.Protocol, d.L4proto))
	if ev.Socket.Local.Addr().IsValid() {
		// A dropped packet may be inbound or outbound: its own source and destination.
		f.Str("src", ev.Socket.Local.String())
		f.Str("dst", ev.Socket.Peer.String())
	}
	f.Netns(d.Netns)
	if ev.Socket.NetnsByAddr {
		f.Str("netns_by", "addr")
	}
	f.Uint("cnt", d.Cnt)
	f.Time("begin", ev.Begin)
}
