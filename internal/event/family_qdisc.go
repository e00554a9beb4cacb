package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var qdisc = Family{
	ID:          uint16(wire.EventFamilyFAMILY_QDISC),
	Name:        "qdisc",
	Description: "qdisc enqueues, dequeues, drops, requeues and backlog, per interval",
	Hooks: Slots(BTFHook(wire.ProgQdiscEnqueue, "qdisc_enqueue"),
		BTFHook(wire.ProgQdiscDequeue, "qdisc_dequeue")),
	Events: []EventKind{{Type: TypeQdisc, Action: "qdisc", decode: decodeQdisc, Fields: fieldsQdisc}},
}

func decodeQdisc(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.Qdisc, &ev.Qdisc.Hdr, &ev.Qdisc.BeginNs)
}

// qdiscFields names a qdisc as tc qdisc show does: qdisc's and qdisc_delay's lines begin so.
func qdiscFields(f Fields, dev, kind []int8, netns, handle, parent uint32) {
	f.Bytes("dev", CString(dev))
	f.Netns(netns)
	f.Bytes("kind", CString(kind))
	f.Str("handle", QdiscHandle(handle))
	f.Str("parent", QdiscHandle(parent))
}

func fieldsQdisc(f Fields, ev *Event, names Names) {
	q := &ev.Qdisc
	qdiscFields(f, q.Dev[:], q.Kind[:], q.Netns, q.Handle, q.Parent)
	f.Uint("enqueues", q.Enqueues)
	f.Uint("dequeues", q.Dequeues)
	f.Uint("drops", q.Drops)
	f.Uint("requeues", q.Requeues)
	f.Uint("overlimits", q.Overlimits)
	f.Uint("backlog_max", uint64(q.BacklogMax))
	f.Uint("qlen_max", uint64(q.QlenMax))
	f.Uint("backlog", uint64(q.Backlog))
	f.Uint("qlen", uint64(q.Qlen))
	f.Time("begin", ev.Begin)
}
