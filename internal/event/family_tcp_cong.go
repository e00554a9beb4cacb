package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var tcpCong = Family{
	ID:          uint16(wire.EventFamilyFAMILY_TCP_CONG),
	Name:        "tcp_cong",
	Description: "congestion-state changes (Open, Disorder, CWR, Recovery, Loss) with cwnd, ssthresh and RTO",
	Hooks: [][]Hook{{
		BTFHook(wire.ProgTcpCong, "tcp_cong_state_set"),
		FEntryHook(wire.ProgTcpCongFentry, "tcp_set_ca_state", 2),
		FEntryHook(wire.ProgTcpCongFentry, "cubictcp_state", 2), // CUBIC's state hook, 5.13-5.18
		FEntryHook(wire.ProgTcpCongFentry, "bictcp_state", 2),   // the same, before 5.13
	}},
	Events: []EventKind{{Type: TypeTCPCong, Action: "tcp_cong", decode: decodeTCPCong, Fields: fieldsTCPCong}},
}

func decodeTCPCong(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	c := &ev.Cong
	return decodeSocketEvent(d, rec, ev, c, &c.Hdr, &c.Addrs, &c.Sock, nil)
}

func fieldsTCPCong(f Fields, ev *Event, names Names) {
	c := &ev.Cong
	f.Flag("state", TCPCaState(c.State).String())
	f.Socket(&ev.Socket)
	f.Uint("cwnd", uint64(c.Cwnd))
	f.Uint("ssthresh", uint64(c.Ssthresh))
	f.Uint("snd_nxt", uint64(c.SndNxt))
	f.Uint("snd_una", uint64(c.SndUna))
	f.Uint("rto_us", uint64(c.RtoUs))
}
