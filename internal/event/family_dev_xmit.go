package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var devXmit = Family{
	ID:          uint16(wire.EventFamilyFAMILY_DEV_XMIT),
	Name:        "dev_xmit",
	Description: "skbs, bytes and segments per skb handed to each device (TSO/GSO at work), per interval",
	Hooks:       Slots(BTFHook(wire.ProgDevXmit, "net_dev_xmit")),
	PerPacket:   true,
	Events:      []EventKind{{Type: TypeDevXmit, Action: "dev_xmit", decode: decodeDev, Fields: fieldsDev}},
}

// decodeDev decodes dev_xmit and dev_recv, one layout.
func decodeDev(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.Dev, &ev.Dev.Hdr, &ev.Dev.BeginNs)
}

func fieldsDev(f Fields, ev *Event, names Names) {
	d := &ev.Dev
	f.Bytes("dev", CString(d.Name[:]))
	f.Netns(d.Netns)
	f.Uint("skbs", d.Skbs)
	f.Uint("bytes", d.Bytes)
	f.Uint("segs", d.Segs)
	f.Uint("max_bytes", uint64(d.MaxBytes))
	if ev.Type == TypeDevRecv {
		f.Uint("gro_in", d.GroIn)
	} else {
		f.Uint("errors", d.Errors)
	}
	f.Hist("segs_hist", d.Hist[:])
	f.Time("begin", ev.Begin)
}
