package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// TypeTCPStage is tcp_stage's event: a socket's sent bytes, timed stage by stage.
const TypeTCPStage = Type(wire.EventTypeEVENT_TCP_STAGE)

// StageNames name the stages of tcp_stage (enum tcp_stage), in order.
var StageNames = [wire.TcpStageSTAGE_MAX]string{"send_queue", "qdisc", "driver", "ack"}

var tcpStage = Family{
	ID:   uint16(wire.EventFamilyFAMILY_TCP_STAGE),
	Name: "tcp_stage",
	Description: "where a sender's bytes spend their time, one byte per socket at a time: send queue, qdisc, driver, " +
		"ACK; histograms per socket and interval",
	Hooks: [][]Hook{
		// The tracepoint where the kernel has it (6.18 here, not 6.12); before, the function's entry.
		{BTFHook(wire.ProgStageAcceptTp, "tcp_sendmsg_locked"), FEntryHook(wire.ProgStageAcceptFentry, "tcp_sendmsg_locked", 3)},
		{BTFHook(wire.ProgStageQueue, "net_dev_queue")},
		{BTFHook(wire.ProgStageDriver, "net_dev_start_xmit")},
		{BTFHook(wire.ProgStageAck, "tcp_probe")},
	},
	Optional: []OptionalSlot{{Hooks: []Hook{BTFHook(wire.ProgStageDequeue, "qdisc_dequeue")},
		Without: "no qdisc stage: a byte's wait in the qdisc is counted in the driver stage"}},
	// Its device hooks run for every skb.
	PerPacket: true,
	Events:    []EventKind{{Type: TypeTCPStage, Action: "tcp_stage", decode: decodeTCPStage, Fields: fieldsTCPStage}},
}

// decodeTCPStage decodes into a value of the event's own: its histograms
// would triple the size of every Event, and it comes once a second per
// socket.
func decodeTCPStage(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	w := new(wire.TcpStageEvent)
	ok, err := decodeSocketEvent(d, rec, ev, w, &w.Hdr, &w.Addrs, &w.Sock, &w.BeginNs)
	ev.Stage = w
	return ok, err
}

func fieldsTCPStage(f Fields, ev *Event, _ Names) {
	s := ev.Stage
	f.Socket(&ev.Socket)
	f.Uint("samples", s.Stage[wire.TcpStageSTAGE_ACK].Count)
	for i, name := range StageNames {
		h := &s.Stage[i]
		if h.Count == 0 {
			continue
		}
		f.Uint(name+"_p50_us", QuantileUs(h.Hist[:], StageBits, 0.5))
		f.Uint(name+"_p99_us", QuantileUs(h.Hist[:], StageBits, 0.99))
		f.Uint(name+"_mean_us", h.SumNs/h.Count/1000)
	}
	f.Time("begin", ev.Begin)
}
