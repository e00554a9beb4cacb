// Package tracetest builds trace files from events for tests and benchmarks,
// in either byte order, through the same generated wire structs the kernel
// side fills.
package tracetest

import (
	"encoding/binary"
	"io"
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// Header is a fixed header: wall time = boot time + 1.7e18 ns.
func Header(o trace.ByteOrder) trace.Header {
	return trace.Header{
		ByteOrder: o, BootAnchorNs: 0, WallAnchorNs: 1_700_000_000_000_000_000, CPUs: 2,
		Hostname: "fixture", Kernel: "6.18.0", Machine: "x86_64", Tool: "tracetest", Command: "skbtrace record",
	}
}

// Addrs builds the wire form of a socket's addresses.
func Addrs(local, peer netip.AddrPort, netns uint32) wire.SockAddrs {
	a := wire.SockAddrs{Sport: local.Port(), Dport: peer.Port(), Netns: netns, Family: 2}
	if local.Addr().Is4() {
		l, p := local.Addr().As4(), peer.Addr().As4()
		copy(a.Saddr[:], l[:])
		copy(a.Daddr[:], p[:])
	} else {
		a.Family = 10
		a.Saddr, a.Daddr = local.Addr().As16(), peer.Addr().As16()
	}
	return a
}

// Conn is a tcp_conn event.
func Conn(seq, tsNs uint64, cpu uint32, sock uint64, a wire.SockAddrs, oldState, newState uint8, pid uint32, comm string) *wire.TcpConnEvent {
	e := &wire.TcpConnEvent{
		Hdr:  wire.EventHeader{Seq: seq, TsNs: tsNs, Cpu: cpu, Type: uint16(wire.EventTypeEVENT_TCP_CONN)},
		Sock: sock, Addrs: a, Oldstate: oldState, Newstate: newState, Pid: pid,
	}
	if pid == 0 {
		e.Context = uint8(wire.EventContextCONTEXT_SOFTIRQ)
	}
	for i := 0; i < len(comm) && i < 15; i++ {
		e.Comm[i] = int8(comm[i])
	}
	return e
}

// Sendlim is a tcp_sendlim event with the given reason and counts.
func Sendlim(seq, tsNs, beginNs uint64, cpu uint32, sock uint64, a wire.SockAddrs, reason uint8, cnt, sent uint32) *wire.TcpSendlimEvent {
	return &wire.TcpSendlimEvent{
		Hdr:  wire.EventHeader{Seq: seq, TsNs: tsNs, Cpu: cpu, Type: uint16(wire.EventTypeEVENT_TCP_SENDLIM)},
		Sock: sock, BeginNs: beginNs, Addrs: a, Reason: reason, Cnt: cnt, Sentpkts: sent,
		Cwnd: 10, Ssthresh: 7, InFlight: 10, SndWnd: 65535, Mss: 1448, Unsent: 3000, WmemQueued: 16384, Sndbuf: 16384,
	}
}

// Writer appends wire structs to a trace.
type Writer struct {
	*trace.Writer
	buf []byte
}

// NewWriter starts a trace in byte order o.
func NewWriter(w io.Writer, o trace.ByteOrder) (*Writer, error) {
	tw, err := trace.NewWriter(w, Header(o))
	if err != nil {
		return nil, err
	}
	return &Writer{Writer: tw}, nil
}

// Event appends one wire struct (a *probe.Skbtrace...Event) as a record of its type.
func (w *Writer) Event(typ uint16, ev any) error {
	var err error
	w.buf, err = binary.Append(w.buf[:0], w.ByteOrder(), ev)
	if err != nil {
		return err
	}
	return w.Append(typ, w.buf)
}
