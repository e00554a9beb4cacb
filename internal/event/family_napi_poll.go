package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var napiPoll = Family{
	ID:          uint16(wire.EventFamilyFAMILY_NAPI_POLL),
	Name:        "napi_poll",
	Description: "NAPI polls per device and CPU: work against budget, per interval",
	Hooks:       Slots(BTFHook(wire.ProgNapiPoll, "napi_poll")),
	Consts:      map[string]any{wire.VarEnableNapiStats: true},
	PerPacket:   true,
	Events:      []EventKind{{Type: TypeNapiPoll, Action: "napi_poll", decode: decodeNapiPoll, Fields: fieldsNapiPoll}},
}

func decodeNapiPoll(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.Napi, &ev.Napi.Hdr, &ev.Napi.BeginNs)
}

func fieldsNapiPoll(f Fields, ev *Event, names Names) {
	n := &ev.Napi
	f.Bytes("dev", CString(n.Name[:]))
	f.Netns(n.Netns)
	f.Uint("polls", n.Polls)
	f.Uint("work", n.Work)
	f.Uint("budget", uint64(n.Budget))
	f.Uint("exhausted", n.Exhausted)
	f.Time("begin", ev.Begin)
}
