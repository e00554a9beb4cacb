package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpReset = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_RESET),
	Name:        "tcp_reset",
	Description: "resets sent (with the kernel's reason) and received",
	// tcp_send_reset fires for every reset from the version with its
	// reason (6.10); before, only for full sockets, so the functions that
	// send resets stand in, or the tracepoint's resets of full sockets.
	Hooks: [][]Hook{
		{everyReset, FEntryHook(wire.ProgTcpResetSentFentry, "tcp_v4_send_reset", 2), fullSockResets},
		{everyReset, FEntryHook(wire.ProgTcpResetSentFentry, "tcp_v6_send_reset", 2), fullSockResets},
		{everyReset, FEntryHook(wire.ProgTcpResetActiveFentry, "tcp_send_active_reset", 2), fullSockResets},
		{BTFHook(wire.ProgTcpResetReceived, "tcp_receive_reset")},
	},
	Events: []EventKind{{Type: TypeTCPReset, Action: "tcp_reset", decode: decodeTCPReset, Fields: fieldsTCPReset}},
}

var (
	everyReset     = Hook{Program: wire.ProgTcpResetSent, Kind: BTFTracepoint, Name: "tcp_send_reset", Args: 3}
	fullSockResets = BTFHook(wire.ProgTcpResetSent, "tcp_send_reset")
)

func decodeTCPReset(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	r := &ev.Reset
	return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
}

func fieldsTCPReset(f Fields, ev *Event, names Names) {
	r := &ev.Reset
	f.Flag("dir", ResetDir(r.Dir))
	f.Socket(&ev.Socket)
	if r.Sock != 0 {
		f.Str("state", TCPState(r.State).String())
	}
	var reason string
	if r.Dir == 0 {
		reason = EnumName(names, r.Reason, Names.ResetReason)
	}
	if p := ResetPathOf(r, reason); p != ResetPathUnknown {
		f.Str("path", p.String())
	}
	if r.Dir == 0 {
		f.Str("reason", reason)
	}
}
