package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var skLimit = Family{
	ID:          uint16(wire.EventFamilyFAMILY_SK_LIMIT),
	Name:        "sk_limit",
	Description: "sockets over their send or receive memory limit, or with a full receive queue, per interval",
	Hooks: Slots(BTFHook(wire.ProgSkLimitExceed, "sock_exceed_buf_limit"),
		BTFHook(wire.ProgSkLimitRcvqueue, "sock_rcvqueue_full")),
	Events: []EventKind{{Type: TypeSkLimit, Action: "sk_limit", decode: decodeSkLimit, Fields: fieldsSkLimit}},
}

func decodeSkLimit(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	l := &ev.SkLimit
	return decodeSocketEvent(d, rec, ev, l, &l.Hdr, &l.Addrs, &l.Sock, &l.BeginNs)
}

func fieldsSkLimit(f Fields, ev *Event, names Names) {
	l := &ev.SkLimit
	f.Flag("kind", SkLimitKind(l.Kind))
	f.Socket(&ev.Socket)
	f.Time("begin", ev.Begin)
	f.Uint("cnt", l.Cnt)
}
