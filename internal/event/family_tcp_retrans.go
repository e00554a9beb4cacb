package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpRetrans = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_RETRANS),
	Name:        "tcp_retrans",
	Description: "retransmitted segments, folded per socket per interval",
	Hooks: Slots(BTFHook(wire.ProgTcpRetrans, "tcp_retransmit_skb"),
		BTFHook(wire.ProgTcpRetransClose, "tcp_destroy_sock"),
		IterHook(wire.ProgRetransOpenRuns)),
	Events: []EventKind{{Type: TypeTCPRetrans, Action: "tcp_retrans", decode: decodeTCPRetrans, Fields: fieldsTCPRetrans}},
}

func decodeTCPRetrans(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	r := &ev.Retrans
	return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, &r.BeginNs)
}

func fieldsTCPRetrans(f Fields, ev *Event, names Names) {
	r := &ev.Retrans
	f.Socket(&ev.Socket)
	f.Str("state", TCPState(r.State).String())
	f.Time("begin", ev.Begin)
	f.Uint("cnt", uint64(r.Cnt))
	f.Uint("skbs", uint64(r.Skbs))
}
