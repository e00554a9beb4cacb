package profile

import (
	"sort"
	"strings"
)

// Context is what the CPU was doing when sampled.
type Context string

// Contexts; a sample takes the innermost one its frames show.
const (
	User    Context = "user"
	Syscall Context = "syscall"
	Softirq Context = "softirq"
	Hardirq Context = "hardirq"
	Kthread Context = "kthread" // kernel work outside any syscall or interrupt (kworker, ksoftirqd's loop)
	Idle    Context = "idle"
)

// Phase is the part of the network stack (or of the kernel around it) a
// kernel sample was spent in.
type Phase string

// Phases in the order a packet's send meets them, then the kernel's helpers.
const (
	PhaseSyscall     Phase = "syscall entry/exit"
	PhaseMitigations Phase = "mitigation stubs"
	PhaseSocket      Phase = "socket"
	PhaseTCP         Phase = "tcp"
	PhaseUDP         Phase = "udp"
	PhaseIP          Phase = "ip"
	PhaseNetfilter   Phase = "netfilter"
	PhaseQdisc       Phase = "qdisc"
	PhaseDevXmit     Phase = "device transmit"
	PhaseNapi        Phase = "napi/gro receive"
	PhaseCopy        Phase = "copy to/from user"
	PhaseMemory      Phase = "memory"
	PhaseSched       Phase = "scheduler"
	PhaseOther       Phase = "other kernel"
	PhaseUser        Phase = "user space"
	PhaseIdle        Phase = "idle"
)

// Phases lists every phase in table order.
var Phases = []Phase{PhaseSyscall, PhaseMitigations, PhaseSocket, PhaseTCP, PhaseUDP, PhaseIP, PhaseNetfilter,
	PhaseQdisc, PhaseDevXmit, PhaseNapi, PhaseCopy, PhaseMemory, PhaseSched, PhaseOther, PhaseUser, PhaseIdle}

// phaseRule assigns the functions named exactly, or starting with a prefix,
// to a phase. Rules are tried in order, so the specific come first
// (tcp_gro_receive is receive, not TCP; ipt_do_table is netfilter, not IP).
type phaseRule struct {
	phase    Phase
	exact    []string
	prefixes []string
}

var phaseRules = []phaseRule{
	// The sleeping locks of PREEMPT_RT kernels are, like _raw_spin_lock,
	// no phase of their own: the code that takes them pays for them (and
	// they are no routes, which "rt_" below is for).
	{PhaseOther, nil, []string{"rt_spin_", "rt_read_", "rt_write_", "rt_mutex"}},
	// Spectre/Meltdown-era stubs the compiler puts on indirect calls and
	// returns, and the buffer clearing on kernel exit: time in them is the
	// mitigations' own cost (seed 003).
	{PhaseMitigations, []string{"clear_bhb_loop", "write_ibpb", "entry_ibpb", "untrain_ret", "entry_untrain_ret",
		"zen_untrain_ret", "retbleed_return_thunk", "retbleed_untrain_ret", "call_depth_return_thunk",
		"x86_clear_cpu_buffers", "mds_clear_cpu_buffers", "clear_cpu_buffers", "__x86_return_thunk",
		"its_return_thunk", "srso_return_thunk", "srso_alias_return_thunk", "srso_safe_ret", "srso_alias_safe_ret",
		"srso_untrain_ret", "srso_alias_untrain_ret"},
		[]string{"__x86_indirect_thunk_", "__x86_indirect_its_thunk_", "__x86_indirect_call_thunk_",
			"__x86_indirect_jump_thunk_", "__pfx___x86_indirect"}},
	{PhaseCopy, []string{"rep_movs_alternative", "memcpy", "__memcpy", "memcpy_orig", "memcpy_erms", "memmove",
		"__memmove", "skb_copy_datagram_iter", "__skb_datagram_iter", "simple_copy_to_iter", "skb_copy_bits",
		"csum_partial_copy_generic", "csum_and_copy_from_user", "csum_and_copy_to_user", "skb_do_copy_data_nocache",
		"skb_add_data_nocache", "copy_page", "clear_user", "__clear_user", "fault_in_readable", "fault_in_iov_iter_readable"},
		[]string{"copy_user_", "copy_from_user", "copy_to_user", "_copy_from_", "_copy_to_", "__copy_from_", "__copy_to_",
			"copy_page_", "copyin", "copyout", "_copy_from_iter", "_copy_to_iter", "csum_and_copy", "skb_copy_datagram_"}},
	{PhaseMemory, []string{"__alloc_skb", "alloc_skb_with_frags", "__build_skb", "build_skb", "napi_build_skb",
		"__napi_alloc_skb", "napi_alloc_skb", "__netdev_alloc_skb", "skb_free_head", "__kfree_skb", "kfree_skb_reason",
		"sk_skb_reason_drop", "consume_skb", "napi_consume_skb", "__consume_stateless_skb", "kfree_skbmem",
		"skb_release_data", "skb_release_head_state", "skb_release_all", "__skb_clone", "skb_clone", "pskb_expand_head",
		"skb_page_frag_refill", "sk_page_frag_refill", "mem_cgroup_charge_skmem", "mem_cgroup_uncharge_skmem",
		"get_page_from_freelist", "refill_obj_stock", "mod_objcg_state", "free_unref_page", "free_unref_folios",
		"__free_pages", "__folio_put", "put_page", "skb_attempt_defer_free", "kfree", "kmalloc_reserve",
		"tcp_stream_alloc_skb", "sk_stream_alloc_skb"},
		[]string{"kmalloc", "__kmalloc", "kmem_cache_", "kfree_", "__kfree", "slab_", "__slab_", "___slab_",
			"alloc_pages", "__alloc_pages", "free_pages", "free_unref_", "page_frag_", "__page_frag_", "page_pool_",
			"__page_pool_", "__sk_mem_", "sk_mem_", "__mod_memcg", "memcg_", "obj_cgroup_", "rmqueue", "__rmqueue",
			"__kmem_cache_", "kvmalloc", "kvfree", "__folio_alloc", "folio_alloc", "skb_release_", "__put_page"}},
	{PhaseSched, []string{"schedule", "__schedule", "schedule_idle", "try_to_wake_up", "context_switch",
		"finish_task_switch", "__switch_to", "__switch_to_asm", "update_curr", "update_load_avg", "resched_curr",
		"autoremove_wake_function", "default_wake_function", "woken_wake_function", "wake_up_process",
		"schedule_timeout", "preempt_schedule", "preempt_schedule_common", "__cond_resched", "check_preempt_curr",
		"wakeup_preempt", "set_next_entity", "put_prev_entity", "newidle_balance", "sched_balance_newidle"},
		[]string{"pick_next_", "__pick_next_", "enqueue_task", "dequeue_task", "enqueue_entity", "dequeue_entity",
			"ttwu_", "select_task_rq", "__wake_up", "wake_up_", "psi_", "sched_", "finish_task_switch",
			"update_cfs_", "update_rq_", "reweight_", "load_balance", "__update_load_avg", "schedule_", "raw_spin_rq_"}},
	{PhaseNetfilter, []string{"nf_hook_slow", "nf_hook_slow_list"},
		[]string{"nf_", "nft_", "__nft_", "nf_tables_", "ipt_", "ip6t_", "ebt_", "arpt_", "xt_", "__nf_", "nf_conntrack",
			"__nf_conntrack", "ipv4_conntrack", "ipv6_conntrack", "nf_ct_", "nf_nat_", "br_nf_", "iptable_",
			"ip6table_", "nft_do_chain", "hash_conntrack", "ipv4_confirm", "ipv6_confirm", "nf_confirm", "nf_checksum"}},
	{PhaseQdisc, []string{"__dev_xmit_skb", "sch_direct_xmit", "dev_qdisc_enqueue", "tcf_classify", "tc_run",
		"sch_handle_egress", "sch_handle_ingress"},
		[]string{"__qdisc_", "qdisc_", "pfifo_", "bfifo_", "fq_codel_", "fq_", "codel_", "htb_", "tbf_", "netem_",
			"prio_", "sfq_", "cake_", "mq_", "mqprio_", "noqueue_", "tcf_", "cls_bpf_", "u32_", "fl_classify",
			"tcx_", "ingress_", "clsact_", "red_", "choke_", "drr_", "hfsc_", "cbs_", "etf_", "taprio_", "skbprio_"}},
	{PhaseNapi, []string{"net_rx_action", "__napi_poll", "napi_poll", "process_backlog", "netif_receive_skb",
		"netif_receive_skb_list_internal", "__netif_receive_skb", "__netif_receive_skb_core", "__netif_receive_skb_one_core",
		"__netif_receive_skb_list_core", "netif_rx", "__netif_rx", "netif_rx_internal", "enqueue_to_backlog",
		"dev_gro_receive", "gro_normal_list", "napi_complete_done", "__napi_schedule", "napi_schedule",
		"eth_type_trans", "veth_poll", "veth_xdp_rcv", "veth_xdp_rcv_skb", "veth_forward_skb", "virtnet_poll",
		"receive_buf", "deliver_skb", "get_rps_cpu", "rps_trigger_softirq", "do_xdp_generic", "netif_receive_generic_xdp",
		"skb_gro_receive", "skb_gro_receive_list", "tcp_gro_receive", "tcp4_gro_receive", "tcp6_gro_receive",
		"udp_gro_receive", "udp4_gro_receive", "udp6_gro_receive", "inet_gro_receive", "ipv6_gro_receive",
		"tcp_gro_complete", "tcp4_gro_complete", "inet_gro_complete", "udp4_gro_complete", "ipv6_gro_complete",
		"vxlan_gro_receive", "eth_gro_receive", "__skb_gro_checksum_complete", "napi_skb_finish"},
		[]string{"napi_gro_", "gro_", "__napi_", "napi_", "netif_receive_", "__netif_receive_", "e1000_clean", "igb_clean",
			"ixgbe_clean", "i40e_napi", "mlx5e_napi", "mlx5e_poll", "bpf_prog_run_generic_xdp",
			// before "virtnet_" and "veth_" (transmit) and "tcp_", "udp_"
			"virtnet_receive", "virtnet_rq_", "veth_xdp_rcv", "tcp_gro_", "tcp4_gro_", "tcp6_gro_", "udp_gro_",
			"udp4_gro_", "udp6_gro_"}},
	{PhaseDevXmit, []string{"__dev_queue_xmit", "dev_queue_xmit", "dev_hard_start_xmit", "xmit_one", "netdev_start_xmit",
		"validate_xmit_skb", "validate_xmit_skb_list", "__skb_gso_segment", "skb_mac_gso_segment", "skb_segment",
		"skb_segment_list", "inet_gso_segment", "ipv6_gso_segment", "tcp_gso_segment", "tcp4_gso_segment",
		"tcp6_gso_segment", "__tcp_gso_segment", "__udp_gso_segment", "udp4_ufo_fragment",
		"dev_queue_xmit_nit", "veth_xmit", "loopback_xmit", "start_xmit", "br_dev_xmit", "vxlan_xmit", "vxlan_xmit_one",
		"udp_tunnel_xmit_skb", "iptunnel_xmit", "ip_tunnel_xmit", "dev_direct_xmit", "skb_checksum_help",
		"netif_skb_features", "skb_csum_hwoffload_help", "skb_network_protocol", "dev_xmit_recursion"},
		[]string{"e1000_xmit", "igb_xmit", "ixgbe_xmit", "mlx5e_xmit", "i40e_lan_xmit", "virtnet_", "xmit_skb",
			"free_old_xmit", "veth_", "bond_start_xmit", "team_xmit", "macvlan_start_xmit", "ipvlan_start_xmit",
			"__dev_direct_xmit", "validate_xmit_"}},
	{PhaseTCP, nil, []string{"tcp_", "__tcp_", "tcp4_", "tcp6_", "tcp_v4_", "tcp_v6_", "inet_csk_", "__inet_csk_",
		"inet_twsk_", "cubictcp_", "bictcp_", "bbr_", "dctcp_", "htcp_", "minmax_", "__inet_lookup_established",
		"inet_lookup_established", "__inet6_lookup_established", "inet_ehashfn", "sk_stream_", "tso_", "inet_sk_rx_dst_set"}},
	{PhaseUDP, []string{"skb_consume_udp", "__skb_recv_udp", "__skb_try_recv_from_queue", "__skb_wait_for_more_packets"},
		[]string{"udp_", "__udp", "udpv6_", "udp6_", "__udp4_", "__udp6_", "udp4_", "udp_v4_", "udp_v6_", "__udp_"}},
	{PhaseIP, nil, []string{"ip_", "__ip_", "ip6_", "__ip6_", "ipv6_", "ipv4_", "ip_route_", "fib_", "fib4_", "fib6_",
		"__fib_", "__fib6_", "rt_", "rt6_", "dst_", "__dst_", "neigh_", "__neigh_", "arp_", "ndisc_", "icmp_", "icmpv6_",
		"raw_", "raw_v4_", "l3mdev_", "xfrm_", "__xfrm", "rt_dst_", "ipv4_dst_", "inet_addr_type",
		"vxlan_rcv", "vxlan_", "udp_tunnel_", "iptunnel_", "nexthop_", "inet_gso_", "ip_list_rcv", "ip_sublist_rcv"}},
	{PhaseSocket, []string{"lock_sock_nested", "release_sock", "__release_sock", "sk_wait_data", "sockfd_lookup_light",
		"move_addr_to_kernel", "import_single_range", "import_iovec", "__import_iovec", "import_ubuf", "copy_msghdr_from_user",
		"__copy_msghdr", "sendmsg_copy_msghdr", "recvmsg_copy_msghdr", "vfs_write", "vfs_read", "new_sync_write",
		"new_sync_read", "ksys_write", "ksys_read", "fdget", "__fdget", "__fget_light", "fdget_pos", "__fdget_pos",
		"do_select", "core_sys_select", "do_sys_poll", "do_poll", "do_epoll_wait", "ep_poll", "ep_send_events",
		"ep_poll_callback", "ep_item_poll", "datagram_poll", "skb_set_owner_w", "skb_free_datagram",
		"__skb_recv_datagram", "skb_recv_datagram", "__skb_try_recv_datagram", "inet_sendmsg", "inet_recvmsg",
		"inet6_sendmsg", "inet6_recvmsg", "inet_send_prepare", "inet_autobind", "__sock_sendmsg", "sock_sendmsg",
		"sock_recvmsg", "__sys_sendto", "__sys_recvfrom", "__sys_sendmsg", "___sys_sendmsg", "____sys_sendmsg",
		"__sys_recvmsg", "___sys_recvmsg", "____sys_recvmsg", "__sys_sendmmsg", "__sys_recvmmsg", "do_recvmmsg",
		"__sys_connect", "__sys_accept4", "do_accept", "__sys_setsockopt", "__sys_getsockopt", "select_estimate_accuracy",
		"poll_select_finish", "poll_freewait", "__pollwait", "add_wait_queue", "remove_wait_queue"},
		[]string{"sock_", "__sock_", "sk_", "__sk_", "__x64_sys_send", "__x64_sys_recv", "__x64_sys_write",
			"__x64_sys_read", "__x64_sys_select", "__x64_sys_pselect", "__x64_sys_poll", "__x64_sys_ppoll",
			"__x64_sys_epoll", "__x64_sys_connect", "__x64_sys_accept", "__x64_sys_socket", "__x64_sys_setsockopt",
			"__x64_sys_getsockopt", "ep_", "__ep_", "sys_send", "sys_recv", "sys_write",
			"sys_read", "sys_select", "sys_poll", "sock_write_iter", "sock_read_iter", "rw_verify_area", "security_socket_",
			"security_sock_", "apparmor_socket_", "selinux_socket_", "aa_sk_perm", "__cgroup_bpf_run_filter"}},
	// Entry and exit of the syscall itself, with the work the kernel does on
	// the way back to user space; a leaf here is time the syscall path costs
	// whatever the call.
	{PhaseSyscall, []string{"entry_SYSCALL_64", "entry_SYSCALL_64_after_hwframe", "entry_SYSCALL_64_safe_stack",
		"do_syscall_64", "x64_sys_call", "syscall_return_via_sysret", "entry_SYSRETQ_unsafe_stack", "entry_SYSRETQ_end",
		"syscall_exit_to_user_mode", "syscall_exit_to_user_mode_prepare", "syscall_exit_work", "syscall_enter_from_user_mode",
		"syscall_trace_enter", "exit_to_user_mode_prepare", "exit_to_user_mode_loop", "fpregs_restore_userregs",
		"switch_fpu_return", "restore_fpregs_from_fpstate", "__audit_syscall_entry", "__audit_syscall_exit",
		"__do_fast_syscall_32", "do_fast_syscall_32", "do_int80_syscall_32", "entry_SYSENTER_compat",
		"entry_SYSCALL_compat", "irqentry_exit_to_user_mode", "__rseq_handle_notify_resume", "rseq_ip_fixup"},
		[]string{"syscall_exit_", "syscall_enter_", "exit_to_user_mode", "__x64_sys_", "__ia32_sys_", "arch_exit_to_user_mode",
			"__do_sys_", "__se_sys_"}},
}

var (
	phaseExact  = map[string]Phase{}
	prefixRules []prefixRule
)

type prefixRule struct {
	prefix string
	phase  Phase
}

func init() {
	for _, r := range phaseRules {
		for _, n := range r.exact {
			if _, dup := phaseExact[n]; !dup {
				phaseExact[n] = r.phase
			}
		}
		for _, p := range r.prefixes {
			prefixRules = append(prefixRules, prefixRule{p, r.phase})
		}
	}
}

// baseName strips the compiler's clone suffixes (tcp_ack.isra.0, memcpy.cold)
// and the module tag kallsyms appends ("[veth]").
func baseName(fn string) string {
	if i := strings.IndexByte(fn, ' '); i >= 0 {
		fn = fn[:i]
	}
	if i := strings.IndexByte(fn, '.'); i > 0 {
		fn = fn[:i]
	}
	return fn
}

// FramePhase is the phase one kernel function belongs to, or PhaseOther.
func FramePhase(fn string) Phase {
	fn = baseName(fn)
	if p, ok := phaseExact[fn]; ok {
		return p
	}
	for _, r := range prefixRules {
		if strings.HasPrefix(fn, r.prefix) {
			return r.phase
		}
	}
	return PhaseOther
}

var (
	softirqMarks = map[string]bool{"handle_softirqs": true, "__do_softirq": true, "do_softirq": true,
		"net_rx_action": true, "net_tx_action": true, "run_ksoftirqd": true}
	syscallMarks = map[string]bool{"do_syscall_64": true, "entry_SYSCALL_64": true, "entry_SYSCALL_64_after_hwframe": true,
		"__do_fast_syscall_32": true, "do_int80_syscall_32": true, "x64_sys_call": true}
	idleMarks = map[string]bool{"do_idle": true, "cpu_startup_entry": true, "default_idle": true,
		"default_idle_call": true, "cpuidle_enter": true, "cpuidle_enter_state": true, "pv_native_safe_halt": true,
		"native_safe_halt": true, "acpi_idle_enter": true, "intel_idle": true, "poll_idle": true, "mwait_idle": true,
		"cpu_idle_poll": true, "arch_cpu_idle": true, "start_secondary": true, "schedule_idle": true}
)

func hardirqMark(fn string) bool {
	return strings.HasPrefix(fn, "asm_sysvec_") || strings.HasPrefix(fn, "sysvec_") || strings.HasPrefix(fn, "__sysvec_") ||
		fn == "asm_common_interrupt" || fn == "common_interrupt" || strings.HasPrefix(fn, "handle_irq_event") ||
		fn == "handle_edge_irq" || fn == "handle_fasteoi_irq" || fn == "__handle_irq_event_percpu" ||
		fn == "hrtimer_interrupt" || fn == "asm_call_irq_on_stack" || fn == "irq_enter_rcu"
}

// Classify gives a sample its context and phase from its frames: the
// innermost context mark, and the innermost frame that belongs to a phase
// (a spin lock inside the qdisc is the qdisc's time).
func Classify(s *Sample) {
	if len(s.Kernel) == 0 {
		s.Context, s.Phase = User, PhaseUser
		if s.Pid == 0 {
			s.Context, s.Phase = Idle, PhaseIdle
		}
		return
	}
	s.Context = ""
	idle := false
	for _, f := range s.Kernel {
		fn := baseName(f)
		switch {
		case s.Context != "":
		case softirqMarks[fn]:
			s.Context = Softirq
		case hardirqMark(fn):
			s.Context = Hardirq
		case syscallMarks[fn] || strings.HasPrefix(fn, "__x64_sys_"):
			s.Context = Syscall
		}
		if idleMarks[fn] {
			idle = true
		}
	}
	if s.Context == "" {
		s.Context = Kthread
		if s.Pid == 0 || idle {
			s.Context, s.Phase = Idle, PhaseIdle
			return
		}
	}
	// The search stops at the edge of an interrupt: a timer interrupt that
	// lands in a copy is the interrupt's time, not the copy's.
	s.Phase = PhaseOther
	for _, f := range s.Kernel {
		if p := FramePhase(f); p != PhaseOther {
			s.Phase = p
			return
		}
		if fn := baseName(f); softirqMarks[fn] || hardirqMark(fn) {
			return
		}
	}
}

// PhaseRow is one phase's share of the busy CPU time and its cost per
// packet and per byte in the profile's window.
type PhaseRow struct {
	Phase       Phase
	Samples     uint64
	Share       float64 // of the busy (not idle) samples
	Ns          float64 // CPU time
	NsPerPacket float64 // 0 when no packets were counted
	NsPerByte   float64
}

// PhaseTable sums the samples per phase, busiest first; idle is left out.
func (p *Profile) PhaseTable() []PhaseRow {
	by := map[Phase]uint64{}
	var busy uint64
	for _, s := range p.Samples {
		if s.Phase == PhaseIdle {
			continue
		}
		by[s.Phase] += s.Count
		busy += s.Count
	}
	ns := p.NsPerSample()
	pk, by8 := p.Meta.Traffic.Packets(), p.Meta.Traffic.Bytes()
	var out []PhaseRow
	for _, ph := range Phases {
		n := by[ph]
		if n == 0 {
			continue
		}
		r := PhaseRow{Phase: ph, Samples: n, Share: float64(n) / float64(busy), Ns: float64(n) * ns}
		if pk > 0 {
			r.NsPerPacket = r.Ns / float64(pk)
		}
		if by8 > 0 {
			r.NsPerByte = r.Ns / float64(by8)
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Samples > out[j].Samples })
	return out
}
