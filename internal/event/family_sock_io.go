package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var sockIO = Family{
	ID:          uint16(wire.EventFamilyFAMILY_SOCK_IO),
	Name:        "sock_io",
	Description: "socket send and receive calls per process: calls, bytes, size histogram, per interval",
	// Where the tracepoints are missing, the IPv4 and IPv6 calls, each an attach point.
	Hooks: [][]Hook{
		{BTFHook(wire.ProgSockSend, "sock_send_length"), FExitHook(wire.ProgSockIoSendFexit, "inet_sendmsg", 3)},
		{BTFHook(wire.ProgSockSend, "sock_send_length"), FExitHook(wire.ProgSockIoSendFexit, "inet6_sendmsg", 3)},
		{BTFHook(wire.ProgSockIoRecv, "sock_recv_length"), FExitHook(wire.ProgSockIoRecvFexit, "inet_recvmsg", 4)},
		{BTFHook(wire.ProgSockIoRecv, "sock_recv_length"), FExitHook(wire.ProgSockIoRecvFexit, "inet6_recvmsg", 4)},
	},
	Consts:    map[string]any{wire.VarEnableSockIoSend: true},
	Paused:    wire.VarSockIoSendPaused,
	PerPacket: true,
	Events:    []EventKind{{Type: TypeSockIO, Action: "sock_io", decode: decodeSockIO, Fields: fieldsSockIO}},
}

func decodeSockIO(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.SockIO, &ev.SockIO.Hdr, &ev.SockIO.BeginNs)
}

func fieldsSockIO(f Fields, ev *Event, names Names) {
	s := &ev.SockIO
	f.Flag("dir", SockIODir(s.Dir))
	f.Uint("pid", uint64(s.Pid))
	f.Bytes("comm", CString(s.Comm[:]))
	f.Uint("calls", s.Calls)
	f.Uint("bytes", s.Bytes)
	f.Uint("errors", s.Errors)
	f.Hist("size_hist", s.Hist[:])
	f.Time("begin", ev.Begin)
}
