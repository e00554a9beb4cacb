package profile

import (
	"slices"
	"testing"
)

// Kernel stacks below are innermost frame first, as the kernel gives them,
// with the function names of Linux 6.x on x86-64.

// syscallSendto is the bottom of a sendto(2) on 6.x.
var syscallSendto = []string{"__sys_sendto", "__x64_sys_sendto", "x64_sys_call", "do_syscall_64",
	"entry_SYSCALL_64_after_hwframe"}

// loopbackRx is a packet received on lo within the sender's own
// __dev_queue_xmit: the softirq runs when the send re-enables bottom halves.
var loopbackRx = slices.Concat(
	[]string{"ip_local_deliver", "ip_rcv", "__netif_receive_skb_one_core", "__netif_receive_skb",
		"process_backlog", "__napi_poll", "net_rx_action", "handle_softirqs", "do_softirq", "__local_bh_enable_ip",
		"__dev_queue_xmit", "ip_finish_output2", "ip_output", "ip_send_skb", "udp_send_skb", "udp_sendmsg"},
	syscallSendto)

// idleLoop is an idle CPU halted in the guest.
var idleLoop = []string{"pv_native_safe_halt", "default_idle", "default_idle_call", "do_idle", "cpu_startup_entry",
	"start_secondary", "common_startup_64"}

func TestClassify(t *testing.T) {
	cases := []struct {
		name    string
		pid     uint32
		kernel  []string
		context Context
		phase   Phase
	}{
		{"udp send copies from user", 100,
			slices.Concat([]string{"memcpy_orig", "_copy_from_iter", "ip_generic_getfrag", "__ip_append_data",
				"ip_make_skb", "udp_sendmsg"}, syscallSendto),
			Syscall, PhaseCopy},
		{"udp send copies with rep movs", 100,
			slices.Concat([]string{"rep_movs_alternative", "_copy_from_iter", "ip_generic_getfrag", "__ip_append_data",
				"ip_make_skb", "udp_sendmsg"}, syscallSendto),
			Syscall, PhaseCopy},
		// The send path below the softirq must not make it a syscall sample:
		// the innermost context mark wins.
		{"nftables on loopback receive in a send", 100,
			slices.Concat([]string{"nft_do_chain.isra.0", "nft_do_chain_ipv4", "nf_hook_slow"}, loopbackRx),
			Softirq, PhaseNetfilter},
		{"nftables cold path", 100,
			slices.Concat([]string{"nft_do_chain.cold", "nft_do_chain_ipv4", "nf_hook_slow"}, loopbackRx),
			Softirq, PhaseNetfilter},
		{"conntrack lookup", 100,
			slices.Concat([]string{"__nf_conntrack_find_get", "nf_conntrack_in", "ipv4_conntrack_in", "nf_hook_slow"},
				loopbackRx),
			Softirq, PhaseNetfilter},
		// An unknown leaf (a static function) takes the phase of the
		// nearest caller that has one.
		{"unknown leaf in udp receive", 100,
			slices.Concat([]string{"some_static_helper", "__udp4_lib_rcv", "ip_protocol_deliver_rcu",
				"ip_local_deliver_finish"}, loopbackRx),
			Softirq, PhaseUDP},
		{"retpoline thunk in a syscall", 100,
			slices.Concat([]string{"__x86_indirect_thunk_rax"}, syscallSendto),
			Syscall, PhaseMitigations},
		{"return thunk in a syscall", 100,
			slices.Concat([]string{"srso_alias_return_thunk", "udp_sendmsg"}, syscallSendto),
			Syscall, PhaseMitigations},
		{"branch history clearing on entry", 100,
			[]string{"clear_bhb_loop", "entry_SYSCALL_64_after_hwframe"},
			Syscall, PhaseMitigations},
		{"syscall entry alone", 100, []string{"entry_SYSCALL_64"}, Syscall, PhaseSyscall},
		{"syscall exit work", 100,
			[]string{"syscall_exit_to_user_mode", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"},
			Syscall, PhaseSyscall},
		// A spin lock is nobody's phase: the qdisc that takes it pays for it.
		{"qdisc lock contention", 100,
			slices.Concat([]string{"native_queued_spin_lock_slowpath", "_raw_spin_lock", "__dev_xmit_skb",
				"__dev_queue_xmit", "ip_finish_output2", "ip_output", "ip_send_skb", "udp_send_skb", "udp_sendmsg"},
				syscallSendto),
			Syscall, PhaseQdisc},
		{"tcp send", 100,
			[]string{"tcp_sendmsg_locked", "tcp_sendmsg", "inet_sendmsg", "__sock_sendmsg", "__sys_sendto",
				"__x64_sys_sendto", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"},
			Syscall, PhaseTCP},
		{"tcp receive copy", 100,
			[]string{"rep_movs_alternative", "_copy_to_iter", "simple_copy_to_iter", "__skb_datagram_iter",
				"skb_copy_datagram_iter", "tcp_recvmsg_locked", "tcp_recvmsg", "inet_recvmsg", "sock_recvmsg",
				"__sys_recvfrom", "__x64_sys_recvfrom", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"},
			Syscall, PhaseCopy},
		{"timer interrupt in user space", 100,
			[]string{"update_process_times", "tick_nohz_handler", "__hrtimer_run_queues", "hrtimer_interrupt",
				"__sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt"},
			Hardirq, PhaseOther},
		// A NIC interrupt taken inside a send is the interrupt's time.
		{"nic interrupt in a syscall", 100,
			slices.Concat([]string{"__napi_schedule", "vring_interrupt", "vp_vring_interrupt",
				"__handle_irq_event_percpu", "handle_irq_event", "handle_edge_irq", "__common_interrupt",
				"common_interrupt", "asm_common_interrupt", "_copy_from_iter", "ip_generic_getfrag",
				"__ip_append_data", "ip_make_skb", "udp_sendmsg"}, syscallSendto),
			Hardirq, PhaseNapi},
		{"idle", 0, idleLoop, Idle, PhaseIdle},
		{"idle without a stack", 0, []string{"[unknown kernel]"}, Idle, PhaseIdle},
		// A softirq served on an idle CPU is busy time, not idle.
		{"softirq on an idle cpu", 0,
			slices.Concat([]string{"net_rx_action", "handle_softirqs", "__irq_exit_rcu", "sysvec_call_function_single",
				"asm_sysvec_call_function_single"}, idleLoop),
			Softirq, PhaseNapi},
		{"tcp receive in a softirq on an idle cpu", 0,
			slices.Concat([]string{"__inet_lookup_established", "tcp_v4_rcv", "ip_protocol_deliver_rcu",
				"ip_local_deliver_finish", "__netif_receive_skb_one_core", "process_backlog", "__napi_poll",
				"net_rx_action", "handle_softirqs", "__irq_exit_rcu", "sysvec_call_function_single",
				"asm_sysvec_call_function_single"}, idleLoop),
			Softirq, PhaseTCP},
		{"timer interrupt on an idle cpu", 0,
			slices.Concat([]string{"__hrtimer_run_queues", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt",
				"sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt"}, idleLoop),
			Hardirq, PhaseOther},
		{"ksoftirqd", 15,
			[]string{"napi_gro_receive", "virtnet_poll", "__napi_poll", "net_rx_action", "handle_softirqs",
				"run_ksoftirqd", "smpboot_thread_fn", "kthread", "ret_from_fork", "ret_from_fork_asm"},
			Softirq, PhaseNapi},
		{"kworker", 42,
			[]string{"vmstat_update", "process_one_work", "worker_thread", "kthread", "ret_from_fork",
				"ret_from_fork_asm"},
			Kthread, PhaseOther},
		{"user space", 100, nil, User, PhaseUser},
		{"idle task without kernel frames", 0, nil, Idle, PhaseIdle},

		// The cases below were misclassified by a rule meant for other
		// functions (raw sockets' "raw_", routes' "rt_", all of virtio_net
		// as transmit, every syscall's __do_sys_ as socket).
		{"run queue lock in a wakeup", 100,
			slices.Concat([]string{"native_queued_spin_lock_slowpath", "_raw_spin_lock", "raw_spin_rq_lock_nested",
				"try_to_wake_up", "__wake_up_common", "__wake_up_sync_key", "sock_def_readable",
				"__udp_enqueue_schedule_skb", "udp_queue_rcv_one_skb", "udp_unicast_rcv_skb", "__udp4_lib_rcv",
				"ip_protocol_deliver_rcu", "ip_local_deliver_finish"}, loopbackRx),
			Softirq, PhaseSched},
		{"PREEMPT_RT lock in the qdisc", 100,
			slices.Concat([]string{"rtlock_slowlock_locked", "rt_spin_lock", "__dev_xmit_skb", "__dev_queue_xmit",
				"ip_finish_output2", "ip_output", "ip_send_skb", "udp_send_skb", "udp_sendmsg"}, syscallSendto),
			Syscall, PhaseQdisc},
		{"virtio_net receive refill", 0,
			slices.Concat([]string{"try_fill_recv", "virtnet_receive", "virtnet_poll", "__napi_poll", "net_rx_action",
				"handle_softirqs", "__irq_exit_rcu", "common_interrupt", "asm_common_interrupt"}, idleLoop),
			Softirq, PhaseNapi},
		{"virtio_net transmit completion", 100,
			slices.Concat([]string{"virtqueue_get_buf_ctx_split", "virtqueue_get_buf_ctx", "free_old_xmit",
				"start_xmit", "dev_hard_start_xmit", "sch_direct_xmit", "__dev_xmit_skb", "__dev_queue_xmit",
				"ip_finish_output2", "ip_output", "ip_send_skb", "udp_send_skb", "udp_sendmsg"}, syscallSendto),
			Syscall, PhaseDevXmit},
		{"wait4 is no socket call", 100,
			[]string{"do_wait", "kernel_wait4", "__do_sys_wait4", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"},
			Syscall, PhaseSyscall},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Sample{Pid: c.pid, Tgid: c.pid, Kernel: c.kernel, Context: Hardirq, Phase: PhaseDevXmit}
			Classify(&s)
			if s.Context != c.context || s.Phase != c.phase {
				t.Errorf("Classify = %s, %q; want %s, %q", s.Context, s.Phase, c.context, c.phase)
			}
		})
	}
}

func TestFramePhase(t *testing.T) {
	for fn, want := range map[string]Phase{
		// Specific rules come before the protocol prefixes they share.
		"tcp_gro_receive":          PhaseNapi,
		"tcp4_gro_receive":         PhaseNapi,
		"udp_gro_receive":          PhaseNapi,
		"ipt_do_table":             PhaseNetfilter,
		"ip6t_do_table":            PhaseNetfilter,
		"ipv4_conntrack_in":        PhaseNetfilter,
		"tcp_gso_segment":          PhaseDevXmit,
		"__sk_mem_schedule":        PhaseMemory,
		"sk_stream_wait_memory":    PhaseTCP,
		"tcp_sendmsg_locked":       PhaseTCP,
		"tcp_ack":                  PhaseTCP,
		"udp_sendmsg":              PhaseUDP,
		"__udp4_lib_rcv":           PhaseUDP,
		"ip_finish_output2":        PhaseIP,
		"fib_table_lookup":         PhaseIP,
		"rt_dst_alloc":             PhaseIP,
		"raw_local_deliver":        PhaseIP,
		"nf_hook_slow":             PhaseNetfilter,
		"__dev_xmit_skb":           PhaseQdisc,
		"pfifo_fast_dequeue":       PhaseQdisc,
		"fq_codel_enqueue":         PhaseQdisc,
		"dev_hard_start_xmit":      PhaseDevXmit,
		"virtnet_poll":             PhaseNapi,
		"virtnet_poll_tx":          PhaseDevXmit,
		"process_backlog":          PhaseNapi,
		"skb_copy_datagram_iter":   PhaseCopy,
		"_copy_to_iter":            PhaseCopy,
		"kmem_cache_alloc_node":    PhaseMemory,
		"kmem_cache_free":          PhaseMemory,
		"kfree_skb_reason":         PhaseMemory,
		"napi_consume_skb":         PhaseMemory,
		"__schedule":               PhaseSched,
		"try_to_wake_up":           PhaseSched,
		"__x86_indirect_thunk_r11": PhaseMitigations,
		"__x86_return_thunk":       PhaseMitigations,
		"entry_SYSCALL_64":         PhaseSyscall,
		"__x64_sys_futex":          PhaseSyscall,
		"__x64_sys_sendto":         PhaseSocket,
		"__sys_sendto":             PhaseSocket,
		"sock_def_readable":        PhaseSocket,
		"lock_sock_nested":         PhaseSocket,
		"do_epoll_wait":            PhaseSocket,
		"_raw_spin_lock":           PhaseOther,
		"vmstat_update":            PhaseOther,
		"":                         PhaseOther,

		// Clone suffixes of the compiler and module tags of kallsyms.
		"nft_do_chain.cold":               PhaseNetfilter,
		"nft_do_chain.isra.0":             PhaseNetfilter,
		"tcp_ack.isra.0":                  PhaseTCP,
		"__udp4_lib_lookup.constprop.0":   PhaseUDP,
		"memcpy.cold":                     PhaseCopy,
		"veth_xmit [veth]":                PhaseDevXmit,
		"veth_poll [veth]":                PhaseNapi,
		"nf_conntrack_in [nf_conntrack]":  PhaseNetfilter,
		"ipt_do_table [ip_tables]":        PhaseNetfilter,
		"fq_codel_dequeue [sch_fq_codel]": PhaseQdisc,
		"virtnet_poll.cold [virtio_net]":  PhaseNapi,
		"unknown_fn [some_module]":        PhaseOther,

		// Misclassified before (see TestClassify).
		"raw_spin_rq_lock_nested": PhaseSched,
		"rt_spin_lock":            PhaseOther,
		"rt_mutex_slowlock":       PhaseOther,
		"virtnet_receive":         PhaseNapi,
		"virtnet_rq_get_buf":      PhaseNapi,
		"veth_xdp_rcv_one":        PhaseNapi,
		"veth_xdp_rcv_bulk_skb":   PhaseNapi,
		"tcp_gro_pull_header":     PhaseNapi,
		"udp_gro_receive_segment": PhaseNapi,
		"virtqueue_get_buf_ctx":   PhaseOther,
		"__do_sys_wait4":          PhaseSyscall,
	} {
		if got := FramePhase(fn); got != want {
			t.Errorf("FramePhase(%q) = %q, want %q", fn, got, want)
		}
	}
}

// Every phase a rule gives must be in Phases, or PhaseTable would count its
// samples as busy but never show them.
func TestPhasesListsEveryRule(t *testing.T) {
	for _, r := range phaseRules {
		if !slices.Contains(Phases, r.phase) {
			t.Errorf("phase %q has rules but is not in Phases", r.phase)
		}
	}
}
