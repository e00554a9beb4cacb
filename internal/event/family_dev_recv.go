package event

import "github.com/skbtrace/skbtrace/internal/wire"

var devRecv = Family{
	ID:          uint16(wire.EventFamilyFAMILY_DEV_RECV),
	Name:        "dev_recv",
	Description: "skbs, bytes and segments per skb received from each device (GRO at work), per interval",
	// What GRO was handed comes from the device's NAPI polls (the
	// napi_poll family's program, run once for both), not from a second
	// run per wire packet.
	Hooks: Slots(BTFHook(wire.ProgDevRecv, "netif_receive_skb"),
		BTFHook(wire.ProgNapiPoll, "napi_poll")),
	Consts: map[string]any{wire.VarEnableDevRecvPolled: true},
	PacketFiltered: Slots(BTFHook(wire.ProgDevRecv, "netif_receive_skb"),
		BTFHook(wire.ProgDevRecvGro, "napi_gro_receive_entry")),
	PerPacket: true,
	Events:    []EventKind{{Type: TypeDevRecv, Action: "dev_recv", decode: decodeDev, Fields: fieldsDev}},
}
