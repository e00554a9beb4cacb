package event

import (
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpSendlim = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_SENDLIM),
	Name:        "tcp_sendlim",
	Description: "why an established sender is not sending more, decided per ACK and folded in the kernel",
	Hooks: Slots(BTFHook(wire.ProgTcpProbe, "tcp_probe"),
		BTFHook(wire.ProgTcpSendlimClose, "tcp_destroy_sock"),
		BTFHook(wire.ProgSendlimState, "inet_sock_set_state"),
		IterHook(wire.ProgSendlimOpenRuns)),
	// Decisions between ACKs: a stalled sender gets none.
	Optional: []OptionalSlot{
		{Hooks: []Hook{BTFHook(wire.ProgSendlimXmit, "net_dev_queue")},
			Without: "no end of a stall at the send that resumes it: zero-window, cork, Nagle and timeout runs end at the next decision, an ACK later"},
		{Hooks: []Hook{BTFHook(wire.ProgSockSend, "sock_send_length"),
			FExitHook(wire.ProgSendlimWriteFexit, "tcp_sendmsg", 3)},
			Without: "no decision after writes: cork, zero-window and local-drop stalls that begin at a write are decided only at the next ACK"},
		{Hooks: []Hook{BTFHook(wire.ProgSendlimRetrans, "tcp_retransmit_skb")},
			Without: "no decision at retransmissions: timeouts are decided only at the next ACK"},
	},
	Consts: map[string]any{wire.VarEnableSendlim: true, wire.VarEnableSendlimWrite: true},
	Events: []EventKind{{Type: TypeTCPSendlim, Action: "tcp_sendlim", decode: decodeTCPSendlim}},
}

// sendlimV1Size is tcp_sendlim's size before the kernel's chrono totals
// were appended (trace format 1.1): older records read them as zero.
const sendlimV1Size = int(unsafe.Offsetof(wire.TcpSendlimEvent{}.BusyUs))

func decodeTCPSendlim(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	var w wire.TcpSendlimEvent
	if err := decodeWireFrom(d, rec, &w, sendlimV1Size); err != nil {
		return false, err
	}
	d.header2(&w.Hdr, ev)
	s := &ev.Sendlim
	s.Socket = socket(w.Sock, &w.Addrs)
	s.Reason = SendlimReason(w.Reason)
	s.Begin = d.header.WallTime(w.BeginNs)
	ev.Begin = s.Begin
	s.Cnt, s.SentPkts = w.Cnt, w.Sentpkts
	s.Cwnd, s.Ssthresh, s.InFlight, s.SndWnd = w.Cwnd, w.Ssthresh, w.InFlight, w.SndWnd
	s.MSS, s.Unsent, s.WmemQueued, s.Sndbuf = w.Mss, w.Unsent, w.WmemQueued, w.Sndbuf
	s.Probes, s.Backoff = w.Probes, w.Backoff
	s.BusyUs, s.RwndLimitedUs, s.SndbufLimitedUs = w.BusyUs, w.RwndLimitedUs, w.SndbufLimitedUs
	return true, nil
}
