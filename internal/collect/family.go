package collect

import (
	"fmt"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/probe"
)

// Family is a set of events a user selects with -e, and the hooks it needs.
type Family struct {
	Name        string
	ID          uint16 // enum event_family, the key of loss accounting
	Description string
	Hooks       []probe.Hook
	// Fallback hooks replace Hooks on kernels that lack one of them.
	Fallback []probe.Hook
	// Consts are switches of programs the family shares with others.
	Consts map[string]any
	// Drain, for families that aggregate in kernel maps, turns what the
	// maps counted since the previous drain into events.
	Drain drainFunc
	// PerPacket families fire for every packet, skb or socket call: the ones
	// Options.Sample attaches only part of the time.
	PerPacket bool
}

// Families lists every family in the order `skbtrace events` prints them.
var Families = []Family{
	{
		Name:        "tcp_conn",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_CONN),
		Description: "TCP state changes with addresses, namespace, pid and command",
		Hooks:       []probe.Hook{tracepoint(probe.SkbtraceProgTcpConn, "sock", "inet_sock_set_state")},
	},
	{
		Name:        "tcp_sendlim",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_SENDLIM),
		Description: "why an established sender is not sending more, decided per ACK and folded in the kernel",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgTcpProbe, "tcp_probe"),
			btf(probe.SkbtraceProgTcpSendlimClose, "tcp_destroy_sock"),
			iter(probe.SkbtraceProgSendlimOpenRuns),
		},
		Consts: map[string]any{probe.SkbtraceVarEnableSendlim: true},
	},
	{
		Name:        "tcp_cong",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_CONG),
		Description: "congestion-state changes (Open, Disorder, CWR, Recovery, Loss) with cwnd, ssthresh and RTO",
		Hooks:       []probe.Hook{btf(probe.SkbtraceProgTcpCong, "tcp_cong_state_set")},
	},
	{
		Name:        "tcp_retrans",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_RETRANS),
		Description: "retransmitted segments, folded per socket per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgTcpRetrans, "tcp_retransmit_skb"),
			btf(probe.SkbtraceProgTcpRetransClose, "tcp_destroy_sock"),
			iter(probe.SkbtraceProgRetransOpenRuns),
		},
	},
	{
		Name:        "tcp_rtt",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_RTT),
		Description: "per-socket samples of RTT, cwnd, windows and delivery rate, at most one per --rtt-interval",
		Hooks:       []probe.Hook{btf(probe.SkbtraceProgTcpProbe, "tcp_probe")},
		Consts:      map[string]any{probe.SkbtraceVarEnableRtt: true},
	},
	{
		Name:        "tcp_reset",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_RESET),
		Description: "resets sent (with the kernel's reason) and received",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgTcpResetSent, "tcp_send_reset"),
			btf(probe.SkbtraceProgTcpResetReceived, "tcp_receive_reset"),
		},
	},
	{
		Name:        "tcp_rcvbuf",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_RCVBUF),
		Description: "receive-buffer autotuning steps",
		Hooks:       []probe.Hook{btf(probe.SkbtraceProgTcpRcvbuf, "tcp_rcvbuf_grow")},
		Fallback:    []probe.Hook{btf(probe.SkbtraceProgTcpRcvbufAdjust, "tcp_rcv_space_adjust")},
	},
	{
		Name:        "sk_limit",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_SK_LIMIT),
		Description: "sockets over their send or receive memory limit, or with a full receive queue, per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgSkLimitExceed, "sock_exceed_buf_limit"),
			btf(probe.SkbtraceProgSkLimitRcvqueue, "sock_rcvqueue_full"),
		},
		Drain: drainSkLimit,
	},
	{
		Name:        "skb_drop",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_SKB_DROP),
		Description: "dropped packets by reason, location and device, per interval",
		Hooks:       []probe.Hook{btf(probe.SkbtraceProgSkbDrop, "kfree_skb")},
		Drain:       drainSkbDrop,
	},
	{
		Name:        "dev_xmit",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_DEV_XMIT),
		Description: "skbs, bytes and segments per skb handed to each device (TSO/GSO at work), per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgDevXmit, "net_dev_start_xmit"),
			btf(probe.SkbtraceProgDevXmitDone, "net_dev_xmit"),
		},
		Drain:     drainDevXmit,
		PerPacket: true,
	},
	{
		Name:        "dev_recv",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_DEV_RECV),
		Description: "skbs, bytes and segments per skb received from each device (GRO at work), per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgDevRecv, "netif_receive_skb"),
			btf(probe.SkbtraceProgDevRecvGro, "napi_gro_receive_entry"),
		},
		Drain:     drainDevRecv,
		PerPacket: true,
	},
	{
		Name:        "napi_poll",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_NAPI_POLL),
		Description: "NAPI polls per device and CPU: work against budget, per interval",
		Hooks:       []probe.Hook{btf(probe.SkbtraceProgNapiPoll, "napi_poll")},
		Drain:       drainNapi,
		PerPacket:   true,
	},
	{
		Name:        "softirq",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_SOFTIRQ),
		Description: "NET_RX and NET_TX softirq time per CPU, per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgSoftirqEnter, "softirq_entry"),
			btf(probe.SkbtraceProgSoftirqLeave, "softirq_exit"),
		},
		Drain:     drainSoftirq,
		PerPacket: true,
	},
	{
		Name:        "qdisc",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_QDISC),
		Description: "qdisc enqueues, dequeues, drops, requeues and backlog, per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgQdiscEnqueue, "qdisc_enqueue"),
			btf(probe.SkbtraceProgQdiscDequeue, "qdisc_dequeue"),
		},
		Drain: drainQdisc,
	},
	{
		Name:        "sock_io",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_SOCK_IO),
		Description: "socket send and receive calls per process: calls, bytes, size histogram, per interval",
		Hooks: []probe.Hook{
			btf(probe.SkbtraceProgSockIoSend, "sock_send_length"),
			btf(probe.SkbtraceProgSockIoRecv, "sock_recv_length"),
		},
		Drain:     drainSockIO,
		PerPacket: true,
	},
}

func tracepoint(prog, group, name string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.Tracepoint, Group: group, Name: name}
}

func btf(prog, name string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.BTFTracepoint, Name: name}
}

func iter(prog string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.Iterator, Name: "bpf_sk_storage_map"}
}

func init() {
	analyze.FamilyName = func(id uint16) string {
		for _, f := range Families {
			if f.ID == id {
				return f.Name
			}
		}
		return fmt.Sprintf("family%d", id)
	}
}

// CanRun says why a family cannot run on this kernel, or nil.
func (f Family) CanRun() error {
	_, err := f.Usable()
	return err
}

// Usable returns the hooks the family attaches on this kernel: its own, or
// its fallback where one of its own is missing.
func (f Family) Usable() ([]probe.Hook, error) {
	err := checkHooks(f.Hooks)
	if err == nil {
		return f.Hooks, nil
	}
	if f.Fallback != nil && checkHooks(f.Fallback) == nil {
		return f.Fallback, nil
	}
	return nil, err
}

func checkHooks(hooks []probe.Hook) error {
	for _, h := range hooks {
		if err := probe.CheckHook(h); err != nil {
			return err
		}
	}
	return nil
}

// Skipped is a family left out of an automatic selection, and why.
type Skipped struct {
	Family Family
	Reason error
}

// Select resolves -e. "all" or no names selects every family that can run
// and reports the others as skipped; a family named explicitly that cannot
// run is an error.
func Select(names []string) ([]Family, []Skipped, error) {
	auto := len(names) == 0 || (len(names) == 1 && names[0] == "all")
	if auto {
		var run []Family
		var skipped []Skipped
		for _, f := range Families {
			if err := f.CanRun(); err != nil {
				skipped = append(skipped, Skipped{f, err})
				continue
			}
			run = append(run, f)
		}
		if len(run) == 0 {
			return nil, skipped, fmt.Errorf("no event family can run on this kernel: %v", skipped[0].Reason)
		}
		return run, skipped, nil
	}
	var run []Family
	seen := map[string]bool{}
	for _, n := range names {
		f, ok := ByName(n)
		if !ok {
			return nil, nil, fmt.Errorf("unknown event family %q (known: %s)", n, strings.Join(familyNames(), ", "))
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		if err := f.CanRun(); err != nil {
			return nil, nil, fmt.Errorf("event family %s cannot run: %w", n, err)
		}
		run = append(run, f)
	}
	return run, nil, nil
}

// ByName finds a family.
func ByName(name string) (Family, bool) {
	for _, f := range Families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

func familyNames() []string {
	var out []string
	for _, f := range Families {
		out = append(out, f.Name)
	}
	return out
}
