package collect

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// Family is a set of events a user selects with -e, and the hooks it needs.
type Family struct {
	Name        string
	ID          uint16 // enum event_family, the key of loss accounting
	Description string
	// Hooks are the family's attach points, each with its alternatives in
	// order of preference: tracepoints first, kernel functions where a
	// kernel lacks the tracepoint. The first that loads and attaches is used.
	Hooks [][]probe.Hook
	// PacketFiltered, where set, stands for Hooks under a packet filter
	// (--filter): a count Hooks take per poll must then be taken per packet,
	// the only place the filter can judge.
	PacketFiltered [][]probe.Hook
	// Optional are attach points the family runs without, at the cost each names.
	Optional []probe.OptionalSlot
	// Consts are switches of programs the family shares with others, for
	// its Hooks: PacketFiltered's hooks run without them.
	Consts map[string]any
	// Drain, for families that aggregate in kernel maps, turns what the
	// maps counted since the previous drain into events.
	Drain drainFunc
	// PerPacket families fire for every packet, skb or socket call: the ones
	// Options.Sample attaches only part of the time.
	PerPacket bool
	// Paused names the variable that stops the family's part of a program
	// it shares with a family that runs all the time: sampling sets it
	// rather than detaching that program.
	Paused string
}

// Families lists every family in the order `skbtrace events` prints them,
// each named by event.FamilyName.
var Families = named([]Family{
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_CONN),
		Description: "TCP state changes with addresses, namespace, pid and command",
		Hooks:       slots(tracepoint(probe.SkbtraceProgTcpConn, "sock", "inet_sock_set_state")),
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_SENDLIM),
		Description: "why an established sender is not sending more, decided per ACK and folded in the kernel",
		Hooks: slots(btf(probe.SkbtraceProgTcpProbe, "tcp_probe"),
			btf(probe.SkbtraceProgTcpSendlimClose, "tcp_destroy_sock"),
			btf(probe.SkbtraceProgSendlimState, "inet_sock_set_state"),
			iter(probe.SkbtraceProgSendlimOpenRuns)),
		// Decisions between ACKs: a stalled sender gets none.
		Optional: []probe.OptionalSlot{
			{Hooks: []probe.Hook{btf(probe.SkbtraceProgSendlimXmit, "net_dev_queue")},
				Without: "no end of a stall at the send that resumes it: zero-window, cork, Nagle and timeout runs end at the next decision, an ACK later"},
			{Hooks: []probe.Hook{btf(probe.SkbtraceProgSockSend, "sock_send_length"),
				fexit(probe.SkbtraceProgSendlimWriteFexit, "tcp_sendmsg", 3)},
				Without: "no decision after writes: cork, zero-window and local-drop stalls that begin at a write are decided only at the next ACK"},
			{Hooks: []probe.Hook{btf(probe.SkbtraceProgSendlimRetrans, "tcp_retransmit_skb")},
				Without: "no decision at retransmissions: timeouts are decided only at the next ACK"},
		},
		Consts: map[string]any{probe.SkbtraceVarEnableSendlim: true, probe.SkbtraceVarEnableSendlimWrite: true},
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_CONG),
		Description: "congestion-state changes (Open, Disorder, CWR, Recovery, Loss) with cwnd, ssthresh and RTO",
		Hooks: [][]probe.Hook{{
			btf(probe.SkbtraceProgTcpCong, "tcp_cong_state_set"),
			fentry(probe.SkbtraceProgTcpCongFentry, "tcp_set_ca_state", 2),
			fentry(probe.SkbtraceProgTcpCongFentry, "cubictcp_state", 2), // CUBIC's state hook, 5.13-5.18
			fentry(probe.SkbtraceProgTcpCongFentry, "bictcp_state", 2),   // the same, before 5.13
		}},
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_RETRANS),
		Description: "retransmitted segments, folded per socket per interval",
		Hooks: slots(btf(probe.SkbtraceProgTcpRetrans, "tcp_retransmit_skb"),
			btf(probe.SkbtraceProgTcpRetransClose, "tcp_destroy_sock"),
			iter(probe.SkbtraceProgRetransOpenRuns)),
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_RTT),
		Description: "per-socket samples of RTT, cwnd, windows and delivery rate, at most one per --rtt-interval",
		// The close hook takes a last sample, with the totals of the last ACK.
		Hooks: slots(btf(probe.SkbtraceProgTcpProbe, "tcp_probe"),
			btf(probe.SkbtraceProgTcpSendlimClose, "tcp_destroy_sock")),
		Consts: map[string]any{probe.SkbtraceVarEnableRtt: true},
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_RESET),
		Description: "resets sent (with the kernel's reason) and received",
		// tcp_send_reset fires for every reset from the version with its
		// reason (6.10); before, only for full sockets, so the functions that
		// send resets stand in, or the tracepoint's resets of full sockets.
		Hooks: [][]probe.Hook{
			{everyReset, fentry(probe.SkbtraceProgTcpResetSentFentry, "tcp_v4_send_reset", 2), fullSockResets},
			{everyReset, fentry(probe.SkbtraceProgTcpResetSentFentry, "tcp_v6_send_reset", 2), fullSockResets},
			{everyReset, fentry(probe.SkbtraceProgTcpResetActiveFentry, "tcp_send_active_reset", 2), fullSockResets},
			{btf(probe.SkbtraceProgTcpResetReceived, "tcp_receive_reset")},
		},
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_TCP_RCVBUF),
		Description: "receive-buffer autotuning steps",
		Hooks: [][]probe.Hook{
			{btf(probe.SkbtraceProgTcpRcvbuf, "tcp_rcvbuf_grow"), btf(probe.SkbtraceProgTcpRcvbufAdjust, "tcp_rcv_space_adjust")},
			{btf(probe.SkbtraceProgTcpRcvbufClose, "tcp_destroy_sock")},
		},
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_SK_LIMIT),
		Description: "sockets over their send or receive memory limit, or with a full receive queue, per interval",
		Hooks: slots(btf(probe.SkbtraceProgSkLimitExceed, "sock_exceed_buf_limit"),
			btf(probe.SkbtraceProgSkLimitRcvqueue, "sock_rcvqueue_full")),
		Drain: drainSkLimit,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_SKB_DROP),
		Description: "dropped packets by reason, location and device, per interval",
		Hooks:       slots(btf(probe.SkbtraceProgSkbDrop, "kfree_skb")),
		Drain:       drainSkbDrop,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_DEV_XMIT),
		Description: "skbs, bytes and segments per skb handed to each device (TSO/GSO at work), per interval",
		Hooks:       slots(btf(probe.SkbtraceProgDevXmit, "net_dev_xmit")),
		Drain:       drainDevXmit,
		PerPacket:   true,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_DEV_RECV),
		Description: "skbs, bytes and segments per skb received from each device (GRO at work), per interval",
		// What GRO was handed comes from the device's NAPI polls (the
		// napi_poll family's program, run once for both), not from a second
		// run per wire packet.
		Hooks: slots(btf(probe.SkbtraceProgDevRecv, "netif_receive_skb"),
			btf(probe.SkbtraceProgNapiPoll, "napi_poll")),
		Consts: map[string]any{probe.SkbtraceVarEnableDevRecvPolled: true},
		PacketFiltered: slots(btf(probe.SkbtraceProgDevRecv, "netif_receive_skb"),
			btf(probe.SkbtraceProgDevRecvGro, "napi_gro_receive_entry")),
		Drain:     drainDevRecv,
		PerPacket: true,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_NAPI_POLL),
		Description: "NAPI polls per device and CPU: work against budget, per interval",
		Hooks:       slots(btf(probe.SkbtraceProgNapiPoll, "napi_poll")),
		Consts:      map[string]any{probe.SkbtraceVarEnableNapiStats: true},
		Drain:       drainNapi,
		PerPacket:   true,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_SOFTIRQ),
		Description: "NET_RX and NET_TX softirq time per CPU, per interval",
		Hooks: slots(btf(probe.SkbtraceProgSoftirqEnter, "softirq_entry"),
			btf(probe.SkbtraceProgSoftirqLeave, "softirq_exit")),
		Drain:     drainSoftirq,
		PerPacket: true,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_QDISC),
		Description: "qdisc enqueues, dequeues, drops, requeues and backlog, per interval",
		Hooks: slots(btf(probe.SkbtraceProgQdiscEnqueue, "qdisc_enqueue"),
			btf(probe.SkbtraceProgQdiscDequeue, "qdisc_dequeue")),
		Drain: drainQdisc,
	},
	{
		ID:          uint16(wire.EventFamilyFAMILY_SOCK_IO),
		Description: "socket send and receive calls per process: calls, bytes, size histogram, per interval",
		// Where the tracepoints are missing, the IPv4 and IPv6 calls, each an attach point.
		Hooks: [][]probe.Hook{
			{btf(probe.SkbtraceProgSockSend, "sock_send_length"), fexit(probe.SkbtraceProgSockIoSendFexit, "inet_sendmsg", 3)},
			{btf(probe.SkbtraceProgSockSend, "sock_send_length"), fexit(probe.SkbtraceProgSockIoSendFexit, "inet6_sendmsg", 3)},
			{btf(probe.SkbtraceProgSockIoRecv, "sock_recv_length"), fexit(probe.SkbtraceProgSockIoRecvFexit, "inet_recvmsg", 4)},
			{btf(probe.SkbtraceProgSockIoRecv, "sock_recv_length"), fexit(probe.SkbtraceProgSockIoRecvFexit, "inet6_recvmsg", 4)},
		},
		Consts:    map[string]any{probe.SkbtraceVarEnableSockIoSend: true},
		Paused:    probe.SkbtraceVarSockIoSendPaused,
		Drain:     drainSockIO,
		PerPacket: true,
	},
})

var (
	everyReset     = probe.Hook{Program: probe.SkbtraceProgTcpResetSent, Kind: probe.BTFTracepoint, Name: "tcp_send_reset", Args: 3}
	fullSockResets = btf(probe.SkbtraceProgTcpResetSent, "tcp_send_reset")
)

func tracepoint(prog, group, name string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.Tracepoint, Group: group, Name: name}
}

func btf(prog, name string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.BTFTracepoint, Name: name}
}

func fentry(prog, fn string, args int) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.FEntry, Name: fn, Args: args}
}

func fexit(prog, fn string, args int) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.FExit, Name: fn, Args: args}
}

// slots gives each hook a slot of its own, with no alternative.
func slots(hooks ...probe.Hook) [][]probe.Hook {
	out := make([][]probe.Hook, len(hooks))
	for i, h := range hooks {
		out[i] = []probe.Hook{h}
	}
	return out
}

func iter(prog string) probe.Hook {
	return probe.Hook{Program: prog, Kind: probe.Iterator, Name: "bpf_sk_storage_map"}
}

func named(fams []Family) []Family {
	for i := range fams {
		fams[i].Name = event.FamilyName(fams[i].ID)
	}
	return fams
}

// Select resolves -e. No names, or "all", selects every family: Start
// skips those this kernel cannot run and says why. Families named
// explicitly are required: Start fails if one cannot run.
func Select(names []string) (fams []Family, required bool, err error) {
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return Families, false, nil
	}
	seen := map[string]bool{}
	for _, n := range names {
		f, ok := ByName(n)
		if !ok {
			return nil, false, fmt.Errorf("unknown event family %q (known: %s)", n, strings.Join(familyNames(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			fams = append(fams, f)
		}
	}
	return fams, true, nil
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

// Status is what Start does with a family on this kernel.
type Status struct {
	Family  Family
	Hooks   []probe.Hook // the hook chosen for each attach point, when it runs
	Without []string     // optional attach points it runs without: the cost, and why
	Err     error        // why it does not run
}

// Check says what Start does with every family. With the privileges to
// load programs it decides as Start does, by loading and attaching them
// all for a moment (loaded is true); without, from the kernel's BTF and
// tracefs alone, which cannot see what the verifier would reject.
func Check() (statuses []Status, feat probe.Features, loaded bool, err error) {
	if host.CheckTracingCaps() == nil {
		rec, err := Start(Options{Families: Families, RingBytes: 1 << 16})
		if err != nil {
			return nil, feat, false, err
		}
		defer rec.Close()
		byName := map[string]Status{}
		for _, r := range rec.Running {
			byName[r.Family.Name] = Status{Family: r.Family, Hooks: r.Hooks, Without: r.Without}
		}
		for _, s := range rec.Skipped {
			byName[s.Family.Name] = Status{Family: s.Family, Err: s.Reason}
		}
		for _, f := range Families {
			statuses = append(statuses, byName[f.Name])
		}
		return statuses, rec.Features(), true, nil
	}
	for _, f := range Families {
		st := Status{Family: f}
		for _, slot := range f.Hooks {
			var errs []string
			found := false
			for _, h := range slot {
				if err := probe.CheckHook(h); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", h, err))
					continue
				}
				if !slices.Contains(st.Hooks, h) { // a hook slots share is listed once, as when loading
					st.Hooks = append(st.Hooks, h)
				}
				found = true
				break
			}
			if !found {
				st.Hooks, st.Err = nil, errors.New(strings.Join(errs, "; "))
				break
			}
		}
		for _, o := range f.Optional {
			if st.Err != nil {
				break
			}
			st.Hooks, st.Without = probe.ChooseOptional(o, st.Hooks, st.Without, probe.CheckHook)
		}
		statuses = append(statuses, st)
	}
	return statuses, feat, false, nil
}
