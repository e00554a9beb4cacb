package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpRcvbuf = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_RCVBUF),
	Name:        "tcp_rcvbuf",
	Description: "receive-buffer autotuning steps",
	Hooks: [][]Hook{
		{BTFHook(wire.ProgTcpRcvbuf, "tcp_rcvbuf_grow"), BTFHook(wire.ProgTcpRcvbufAdjust, "tcp_rcv_space_adjust")},
		{BTFHook(wire.ProgTcpRcvbufClose, "tcp_destroy_sock")},
	},
	Events: []EventKind{{Type: TypeTCPRcvbuf, Action: "tcp_rcvbuf", decode: decodeTCPRcvbuf, Fields: fieldsTCPRcvbuf}},
}

func decodeTCPRcvbuf(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	r := &ev.Rcvbuf
	return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
}

func fieldsTCPRcvbuf(f Fields, ev *Event, names Names) {
	r := &ev.Rcvbuf
	f.Socket(&ev.Socket)
	f.Uint("rcvbuf", uint64(r.Rcvbuf))
	f.Uint("old", uint64(r.OldRcvbuf))
	f.Uint("rcv_space", uint64(r.RcvSpace))
	f.Uint("window_clamp", uint64(r.WindowClamp))
	f.Uint("rcv_wnd", uint64(r.RcvWnd))
	f.Uint("rmem_alloc", uint64(r.RmemAlloc))
}
