package event

import (
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpConn = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_CONN),
	Name:        "tcp_conn",
	Description: "TCP state changes with addresses, namespace, pid and command",
	Hooks:       Slots(TracepointHook(wire.ProgTcpConn, "sock", "inet_sock_set_state")),
	Events:      []EventKind{{Type: TypeTCPConn, Action: "tcp_conn", decode: decodeTCPConn}},
}

func decodeTCPConn(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	var w wire.TcpConnEvent
	if err := decodeWire(d, rec, &w); err != nil {
		return false, err
	}
	d.header2(&w.Hdr, ev)
	c := &ev.Conn
	c.Socket = socket(w.Sock, &w.Addrs)
	c.Old, c.New = TCPState(w.Oldstate), TCPState(w.Newstate)
	c.Context = Context(w.Context)
	c.Pid = w.Pid
	c.Comm = *(*[16]byte)(unsafe.Pointer(&w.Comm))
	c.Err = w.Err
	ev.Begin = 0
	return true, nil
}
