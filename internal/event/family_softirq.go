package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var softirq = Family{
	ID:          uint16(wire.EventFamilyFAMILY_SOFTIRQ),
	Name:        "softirq",
	Description: "NET_RX and NET_TX softirq time per CPU, per interval",
	Hooks: Slots(BTFHook(wire.ProgSoftirqEnter, "softirq_entry"),
		BTFHook(wire.ProgSoftirqLeave, "softirq_exit")),
	PerPacket: true,
	Events:    []EventKind{{Type: TypeSoftirq, Action: "softirq", decode: decodeSoftirq, Fields: fieldsSoftirq}},
}

func decodeSoftirq(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.Softirq, &ev.Softirq.Hdr, &ev.Softirq.BeginNs)
}

func fieldsSoftirq(f Fields, ev *Event, names Names) {
	s := &ev.Softirq
	f.Flag("vec", SoftirqVec(s.Vec))
	f.Uint("entries", s.Entries)
	f.Uint("time_ns", s.TimeNs)
	f.Time("begin", ev.Begin)
}
