package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpRTT = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_RTT),
	Name:        "tcp_rtt",
	Description: "per-socket samples of RTT, cwnd, windows and delivery rate, at most one per --rtt-interval",
	// The close hook takes a last sample, with the totals of the last ACK.
	Hooks: Slots(BTFHook(wire.ProgTcpProbe, "tcp_probe"),
		BTFHook(wire.ProgTcpSendlimClose, "tcp_destroy_sock")),
	Consts: map[string]any{wire.VarEnableRtt: true},
	Events: []EventKind{{Type: TypeTCPRTT, Action: "tcp_rtt", decode: decodeTCPRTT, Fields: fieldsTCPRTT}},
}

func decodeTCPRTT(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	r := &ev.RTT
	return decodeSocketEvent(d, rec, ev, r, &r.Hdr, &r.Addrs, &r.Sock, nil)
}

func fieldsTCPRTT(f Fields, ev *Event, names Names) {
	r := &ev.RTT
	f.Socket(&ev.Socket)
	f.Uint("srtt_us", uint64(r.SrttUs))
	f.Uint("rttvar_us", uint64(r.RttvarUs))
	f.Uint("min_rtt_us", uint64(r.MinRttUs))
	f.Uint("cwnd", uint64(r.Cwnd))
	f.Uint("ssthresh", uint64(r.Ssthresh))
	f.Uint("inflight", uint64(r.InFlight))
	f.Uint("snd_wnd", uint64(r.SndWnd))
	f.Uint("rcv_wnd", uint64(r.RcvWnd))
	f.Uint("delivery_rate", r.DeliveryRate)
	f.Uint("bytes_acked", r.BytesAcked)
	f.Uint("bytes_received", r.BytesReceived)
}
