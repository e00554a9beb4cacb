package event

import (
	"time"

	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// TypeTCPStage is tcp_stage's event: a socket's sent bytes, timed stage by stage.
const TypeTCPStage = Type(wire.EventTypeEVENT_TCP_STAGE)

// StageNames name the stages of tcp_stage (enum tcp_stage), in order: a
// sent byte's four, then a received one's two.
var StageNames = [wire.TcpStageSTAGE_MAX]string{"send_queue", "qdisc", "driver", "ack", "rx_stack", "rx_queue"}

// SentStages and ReceivedStages are the index ranges of StageNames each
// direction times; a direction's sample count is its last stage's.
var (
	SentStages     = [2]int{int(wire.TcpStageSTAGE_SEND_QUEUE), int(wire.TcpStageSTAGE_ACK) + 1}
	ReceivedStages = [2]int{int(wire.TcpStageSTAGE_RX_STACK), int(wire.TcpStageSTAGE_RX_QUEUE) + 1}
)

var tcpStage = Family{
	ID:   uint16(wire.EventFamilyFAMILY_TCP_STAGE),
	Name: "tcp_stage",
	Description: "where bytes spend their time, one byte per socket and direction at a time: sent, the send queue, qdisc, " +
		"driver, ACK; received, from the driver to TCP and in the receive queue to the reader's copy; histograms per socket and interval",
	Hooks: [][]Hook{
		// The tracepoint where the kernel has it (6.18 here, not 6.12); before, the function's entry.
		{BTFHook(wire.ProgStageAcceptTp, "tcp_sendmsg_locked"), FEntryHook(wire.ProgStageAcceptFentry, "tcp_sendmsg_locked", 3)},
		{BTFHook(wire.ProgStageQueue, "net_dev_queue")},
		{BTFHook(wire.ProgStageDriver, "net_dev_start_xmit")},
		{BTFHook(wire.ProgStageTcpReceive, "tcp_probe")},
		{BTFHook(wire.ProgStageArriveRx, "netif_rx")},
		{BTFHook(wire.ProgStageArriveGro, "napi_gro_receive_entry")},
		{BTFHook(wire.ProgStageArriveSkb, "netif_receive_skb_entry")},
		{BTFHook(wire.ProgStageRead, "tcp_rcv_space_adjust")},
		{BTFHook(wire.ProgStageClose, "inet_sock_set_state")},
	},
	Optional: []OptionalSlot{{Hooks: []Hook{BTFHook(wire.ProgStageDequeue, "qdisc_dequeue")},
		Without: "no qdisc stage: a byte's wait in the qdisc is counted in the driver stage"}},
	// Its device hooks run for every skb, its receive hooks for every
	// packet. Sampled, it starts bytes in the windows and follows each to
	// its end (bpf/tcp_stage.bpf.c says how long ways go on being timed).
	PerPacket: true,
	Paused:    wire.VarTcpStagePaused,
	UnderWay:  []string{wire.VarTxUnderWay, wire.VarRxUnderWay},
	// A busy flow's next packet comes within milliseconds of its arming
	// (a slow one's is chained only after a long way).
	Fresh:    wire.VarRxArmedNs,
	FreshFor: 20 * time.Millisecond,
	Events:   []EventKind{{Type: TypeTCPStage, Action: "tcp_stage", decode: decodeTCPStage, Fields: fieldsTCPStage}},
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
	f.Uint("rx_samples", s.Stage[wire.TcpStageSTAGE_RX_QUEUE].Count)
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
