// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * skbtrace kernel side. Tracepoints first; kernel functions (fentry/fexit)
 * only where a kernel lacks the tracepoint. One object serves every kernel
 * from 5.10: what a kernel lacks is pruned at load time through read-only
 * switches the loader sets from the kernel's BTF, so the verifier never sees it.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define SOCK_NOSPACE 2
#define TSQ_THROTTLED 0
#define TSQ_QUEUED 1
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2
#define TCP_ESTABLISHED 1
#define TCP_FIN_WAIT1 4
#define TCP_FIN_WAIT2 5
#define TCP_TIME_WAIT 6
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LISTEN 10
#define TCP_NEW_SYN_RECV 12
#define TCP_CA_LOSS 4
#define ICSK_TIME_PROBE0 3

/* Filters, set by user space before load so the verifier prunes what is off; zero means any. */
const volatile __u16 filter_port = 0;
const volatile __u32 filter_netns = 0;
const volatile __u16 filter_family = 0;
const volatile __u8 filter_addr[16] = {};
/*
 * The filtered namespace's own addresses (loopback left out), as in struct
 * sock_addrs: an event whose namespace cannot be read (0) passes the
 * namespace filter when one of its addresses is among them.
 */
#define FILTER_NETNS_ADDRS 16
const volatile __u32 filter_netns_naddrs = 0;
const volatile __u64 filter_netns_addrs[FILTER_NETNS_ADDRS][2] = {};

/* Never read: they give these types BTF entries, from which bpf2go generates the Go types. */
const struct tcp_conn_event *_tcp_conn_event __attribute__((unused));
const struct tcp_cong_event *_tcp_cong_event __attribute__((unused));
const struct tcp_retrans_event *_tcp_retrans_event __attribute__((unused));
const struct tcp_rtt_event *_tcp_rtt_event __attribute__((unused));
const struct tcp_reset_event *_tcp_reset_event __attribute__((unused));
const struct tcp_rcvbuf_event *_tcp_rcvbuf_event __attribute__((unused));
const struct dev_event *_dev_event __attribute__((unused));
const struct napi_event *_napi_event __attribute__((unused));
const struct softirq_event *_softirq_event __attribute__((unused));
const struct qdisc_event *_qdisc_event __attribute__((unused));
const struct sock_io_event *_sock_io_event __attribute__((unused));
const struct skb_drop_event *_skb_drop_event __attribute__((unused));
const struct sk_limit_event *_sk_limit_event __attribute__((unused));
const enum sk_limit_kind *_sk_limit_kind __attribute__((unused));
const enum sock_io_dir *_sock_io_dir __attribute__((unused));
const enum reset_dir *_reset_dir __attribute__((unused));
const enum reset_path *_reset_path __attribute__((unused));
const enum histogram_buckets *_histogram_buckets __attribute__((unused));
const enum event_type *_event_type __attribute__((unused));
const enum event_family *_event_family __attribute__((unused));
const enum sendlim_reason *_sendlim_reason __attribute__((unused));
const enum event_context *_event_context __attribute__((unused));
const enum context_filter *_context_filter __attribute__((unused));

/* The kernel's HZ, from the coarse clock's resolution: the once-a-second rule counts jiffies. */
const volatile __u64 jiffies_per_sec = 1000;

/*
 * Every event takes the next number, so order across CPUs is exact and gaps
 * reveal loss. Kernels without BPF atomic fetch (before 5.12) cannot run the
 * fetch-and-add: the loader replaces it with zero there, and the recorder
 * numbers events in ring-buffer order, which the ring's reservation lock
 * makes a total order across CPUs as well.
 */
__u64 seq_counter = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* user space may resize before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FAMILY_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/*
 * Per-socket state lives in socket storage, freed with the socket. Tracing
 * programs may use socket storage from 5.11; before that the state lives in
 * an LRU hash keyed by the socket's address, deleted when the socket is
 * destroyed. The loader says which (and shrinks the unused map).
 */
const volatile bool use_sk_storage = true;

#define SOCK_STATE(name, state_type)                                                                          \
	struct {                                                                                        \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);                                                  \
		__uint(map_flags, BPF_F_NO_PREALLOC);                                                   \
		__type(key, int);                                                                       \
		__type(value, state_type);                                                                    \
	} name SEC(".maps");                                                                            \
	struct {                                                                                        \
		__uint(type, BPF_MAP_TYPE_LRU_HASH);                                                    \
		__uint(max_entries, 65536);                                                             \
		__type(key, __u64);                                                                     \
		__type(value, state_type);                                                                    \
	} name##_by_sock SEC(".maps");                                                                  \
                                                                                                        \
	static __always_inline state_type *name##_get(struct sock *sk, bool create)                         \
	{                                                                                               \
		__u64 key = (__u64)sk;                                                                  \
		state_type *v, zero = {};                                                                     \
                                                                                                        \
		if (use_sk_storage)                                                                     \
			return bpf_sk_storage_get(&name, sk, 0, create ? BPF_SK_STORAGE_GET_F_CREATE : 0); \
		v = bpf_map_lookup_elem(&name##_by_sock, &key);                                        \
		if (v || !create)                                                                       \
			return v;                                                                       \
		bpf_map_update_elem(&name##_by_sock, &key, &zero, BPF_NOEXIST);                         \
		return bpf_map_lookup_elem(&name##_by_sock, &key);                                     \
	}                                                                                               \
                                                                                                        \
	static __always_inline void name##_delete(struct sock *sk)                                     \
	{                                                                                               \
		__u64 key = (__u64)sk;                                                                  \
                                                                                                        \
		if (use_sk_storage)                                                                     \
			bpf_sk_storage_delete(&name, sk);                                               \
		else                                                                                    \
			bpf_map_delete_elem(&name##_by_sock, &key);                                     \
	}

SOCK_STATE(sendlim_runs, struct sendlim_run)

/*
 * Softirqs run on the per-CPU IRQ stack (do_softirq_own_stack), so an event
 * raised on a stack outside the current task's is softirq work, and the task
 * is merely the one interrupted. The stack pointer comes from the pt_regs
 * that perf_fetch_caller_regs() filled for the tracepoint, which the kernel
 * stores over the record's common header for BPF. (preempt_count is out of
 * reach: per-CPU data symbols need typed ksyms, and this program's own frame
 * may sit on a private BPF stack.) Kernels that run softirqs on the task
 * stack (PREEMPT_RT, ksoftirqd) report the task.
 */
const volatile __u64 thread_size = 16384;

static __always_inline __u8 stack_context(const struct pt_regs *regs)
{
	/* The untyped task helper and a probe read: the typed one needs 5.11. */
	struct task_struct *task = (void *)bpf_get_current_task();
	__u64 sp = BPF_CORE_READ(regs, sp);

	return sp - (__u64)BPF_CORE_READ(task, stack) < thread_size ? CONTEXT_TASK : CONTEXT_SOFTIRQ;
}

static __always_inline void count_lost(__u32 family)
{
	__u64 *n = bpf_map_lookup_elem(&lost, &family);

	if (n)
		*n += 1;
}

/*
 * Waking the reader for every event would cost a context switch each on
 * CPUs busy with the traffic; user space drains on a short timer instead,
 * and is woken early only when an eighth of the ring is waiting.
 */
const volatile __u64 wakeup_bytes = 512 << 10;

static __always_inline void submit_event(void *e)
{
	__u64 flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
										      : BPF_RB_NO_WAKEUP;

	bpf_ringbuf_submit(e, flags);
}

/*
 * --cpu and --context: an event is kept by the CPU and the context that
 * write it (or count it, for the families the kernel aggregates). A run
 * folded over several calls (send limits, retransmits) is written by the
 * call that ends it.
 */
#define CPU_FILTER_WORDS 16 /* 1024 CPUs */
const volatile bool filter_cpus_on = false;
const volatile __u64 filter_cpus[CPU_FILTER_WORDS] = {};
/* A mask of enum context_filter; zero keeps every context. */
const volatile __u8 filter_contexts = 0;

/*
 * preempt_count, which says the context exactly, is a per-CPU variable the
 * programs cannot reach where kallsyms lists no data symbols; so hooks at
 * softirq and interrupt entry and exit keep a per-CPU copy of the part
 * that matters (attached only with --context).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_context);
} cpu_contexts SEC(".maps");

static __always_inline bool cpu_passes(void)
{
	__u32 cpu, word;

	if (!filter_cpus_on)
		return true;
	cpu = bpf_get_smp_processor_id();
	word = cpu / 64;
	barrier_var(word);
	return word < CPU_FILTER_WORDS && ((filter_cpus[word] >> (cpu % 64)) & 1);
}

static __always_inline bool here_passes(void)
{
	if (!cpu_passes())
		return false;
	if (filter_contexts) {
		__u32 zero = 0;
		struct cpu_context *c = bpf_map_lookup_elem(&cpu_contexts, &zero);
		__u8 now = CONTEXT_FILTER_TASK;

		if (c && c->hardirq)
			now = CONTEXT_FILTER_HARDIRQ;
		else if (c && c->softirq)
			now = CONTEXT_FILTER_SOFTIRQ;
		if (!(filter_contexts & now))
			return false;
	}
	return true;
}

static __always_inline void set_cpu_context(bool softirq, __u32 v)
{
	__u32 zero = 0;
	struct cpu_context *c = bpf_map_lookup_elem(&cpu_contexts, &zero);

	if (!c)
		return;
	if (softirq)
		c->softirq = v;
	else
		c->hardirq = v;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(context_softirq_enter, unsigned int vec)
{
	set_cpu_context(true, 1);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(context_softirq_exit, unsigned int vec)
{
	set_cpu_context(true, 0);
	return 0;
}

SEC("tp_btf/irq_handler_entry")
int BPF_PROG(context_hardirq_enter, int irq)
{
	set_cpu_context(false, 1);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(context_hardirq_exit, int irq)
{
	set_cpu_context(false, 0);
	return 0;
}

static __always_inline void *reserve_event(__u32 family, __u64 size, __u16 type)
{
	if (!here_passes())
		return NULL;
	__u64 seq = __sync_fetch_and_add(&seq_counter, 1);
	struct event_header *hdr = bpf_ringbuf_reserve(&events, size, 0);

	if (!hdr) {
		count_lost(family);
		return NULL;
	}
	hdr->seq = seq;
	hdr->ts_ns = bpf_ktime_get_boot_ns();
	hdr->cpu = bpf_get_smp_processor_id();
	hdr->type = type;
	hdr->_pad = 0;
	return hdr;
}

/* Compares with the filter address; an IPv4 filter also matches its IPv4-mapped IPv6 form. */
static __always_inline bool addr_is(const __u8 *a, __u16 family)
{
	if (filter_family == AF_INET) {
		int off = 0;

		if (family == AF_INET6) {
			off = 12;
#pragma unroll
			for (int i = 0; i < 12; i++) {
				if (a[i] != (i < 10 ? 0 : 0xff))
					return false;
			}
		}
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (a[off + i] != filter_addr[i])
				return false;
		}
		return true;
	}
	if (family != AF_INET6)
		return false;
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (a[i] != filter_addr[i])
			return false;
	}
	return true;
}

static __always_inline bool addr_in_filter_netns(const __u8 *addr)
{
	__u64 hi, lo;

	__builtin_memcpy(&hi, addr, 8);
	__builtin_memcpy(&lo, addr + 8, 8);
	for (int i = 0; i < FILTER_NETNS_ADDRS; i++) {
		if (i >= filter_netns_naddrs)
			break;
		if (hi == filter_netns_addrs[i][0] && lo == filter_netns_addrs[i][1])
			return true;
	}
	return false;
}

/* Whether the namespace filter takes a's namespace, or by its addresses when it has none. */
static __always_inline bool netns_passes(__u32 *netns, struct sock_addrs *a)
{
	if (!filter_netns || *netns == filter_netns)
		return true;
	if (*netns || !a || !(addr_in_filter_netns(a->saddr) || addr_in_filter_netns(a->daddr)))
		return false;
	*netns = filter_netns;
	a->netns_by_addr = 1;
	return true;
}

static __always_inline bool filter_match(struct sock_addrs *a)
{
	if (!netns_passes(&a->netns, a))
		return false;
	if (filter_port && a->sport != filter_port && a->dport != filter_port)
		return false;
	if (filter_family && !addr_is(a->saddr, a->family) && !addr_is(a->daddr, a->family))
		return false;
	return true;
}

/* Reads a socket's addresses from a trusted BTF pointer, with plain loads. */
static __always_inline void read_sock_addrs_btf(const struct sock *sk, struct sock_addrs *a)
{
	a->family = sk->__sk_common.skc_family;
	a->sport = sk->__sk_common.skc_num;
	a->dport = __builtin_bswap16(sk->__sk_common.skc_dport);
	a->netns = sk->__sk_common.skc_net.net->ns.inum;
	if (a->family == AF_INET6) {
		__builtin_memcpy(a->saddr, &sk->__sk_common.skc_v6_rcv_saddr, 16);
		__builtin_memcpy(a->daddr, &sk->__sk_common.skc_v6_daddr, 16);
	} else {
		__builtin_memcpy(a->saddr, &sk->__sk_common.skc_rcv_saddr, 4);
		__builtin_memcpy(a->daddr, &sk->__sk_common.skc_daddr, 4);
	}
}

/* Weak: kernels before 6.2 lack it, and the loader turns its address into zero there. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* Segments an skb carries: its GSO segment count, or one. */
static __always_inline __u32 skb_segs(const struct sk_buff *skb)
{
	void *end = skb->head + skb->end;
	__u16 size, segs;

	if (bpf_rdonly_cast) {
		/* A typed read-only view, so the reads are plain loads rather than probe-read helper calls. */
		struct skb_shared_info *shinfo = bpf_rdonly_cast(end, bpf_core_type_id_kernel(struct skb_shared_info));

		size = shinfo->gso_size;
		segs = shinfo->gso_segs;
	} else {
		const struct skb_shared_info *shinfo = end;

		size = BPF_CORE_READ(shinfo, gso_size);
		segs = size ? BPF_CORE_READ(shinfo, gso_segs) : 0;
	}
	if (!size)
		return 1;
	return segs ? segs : 1;
}

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

#define NET_HEADER_UNSET 0xffff /* (u16)~0U: skb_reset_network_header() not called yet */

/*
 * Reads an skb's IP addresses and TCP/UDP ports, as the packet has them;
 * returns the L4 protocol. The ports are read right after the IP header,
 * never at skb->transport_header: before ip_rcv_core() that offset still
 * points at the IP header (__netif_receive_skb_core() resets it there), so
 * a packet a tap (AF_PACKET) queued on receive would yield the header's
 * first bytes (0x4500) as ports. A non-first fragment has no ports; an
 * IPv6 packet has them only when TCP or UDP follows the fixed header.
 */
static __always_inline __u8 skb_addrs(const struct sk_buff *skb, struct sock_addrs *a)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header, th;
	__u16 proto = __builtin_bswap16(skb->protocol);
	__u8 l4;

	if (nh == NET_HEADER_UNSET)
		return 0;
	if (proto == ETH_P_IP) {
		struct iphdr_wire ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), head + nh) || (ip.version_ihl >> 4) != 4)
			return 0;
		a->family = AF_INET;
		__builtin_memcpy(a->saddr, ip.saddr, 4);
		__builtin_memcpy(a->daddr, ip.daddr, 4);
		l4 = ip.protocol;
		if (__builtin_bswap16(ip.frag_off) & 0x1fff)
			return l4;
		th = nh + (ip.version_ihl & 0xf) * 4;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr_wire ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), head + nh) || (*(__u8 *)&ip6 >> 4) != 6)
			return 0;
		a->family = AF_INET6;
		__builtin_memcpy(a->saddr, ip6.saddr, 16);
		__builtin_memcpy(a->daddr, ip6.daddr, 16);
		l4 = ip6.nexthdr;
		th = nh + sizeof(ip6);
	} else {
		return 0;
	}
	if (l4 == IPPROTO_TCP || l4 == IPPROTO_UDP) {
		__be16 ports[2];

		if (!bpf_probe_read_kernel(ports, sizeof(ports), head + th)) {
			a->sport = __builtin_bswap16(ports[0]);
			a->dport = __builtin_bswap16(ports[1]);
		}
	}
	return l4;
}

/*
 * -F: the loader replaces this function's body with the classic BPF program
 * compiled from the pcap expression, translated to eBPF. It reads the packet
 * from its IP header: data is the header's kernel address, linear the bytes
 * readable there, len the packet's length from the header. Returns non-zero
 * for a packet that matches. The body here never runs; using every argument
 * keeps clang from dropping any.
 */
const volatile bool filter_packets = false;

static __noinline int packet_filter(__u64 data, __u64 linear, __u64 len)
{
	return data != 0 && linear <= len;
}

/* Whether -F keeps an skb whose IP header is at l3 (data at receive, the network header elsewhere). */
static __always_inline bool packet_passes(const struct sk_buff *skb, const unsigned char *l3)
{
	const unsigned char *tail, *data;
	__u64 linear = 0;

	if (!filter_packets)
		return true;
	tail = skb->head + skb->tail;
	data = skb->data;
	if (tail > l3)
		linear = tail - l3;
	return packet_filter((__u64)l3, linear, skb->len - (l3 - data));
}

/*
 * A classic tracepoint: its record already holds the addresses, so only the
 * namespace needs a read through the socket.
 */
SEC("tracepoint/sock/inet_sock_set_state")
int tcp_conn(struct trace_event_raw_inet_sock_set_state *ctx)
{
	struct trace_event_raw_inet_sock_set_state t;
	struct sock_addrs a = {};
	struct tcp_conn_event *e;

	/* One copy of the whole record: the verifier wants constant offsets into the context. */
	if (bpf_probe_read_kernel(&t, sizeof(t), ctx) || t.protocol != IPPROTO_TCP)
		return 0;
	a.family = t.family;
	a.sport = t.sport;
	a.dport = t.dport;
	if (a.family == AF_INET6) {
		__builtin_memcpy(a.saddr, t.saddr_v6, 16);
		__builtin_memcpy(a.daddr, t.daddr_v6, 16);
	} else {
		__builtin_memcpy(a.saddr, t.saddr, 4);
		__builtin_memcpy(a.daddr, t.daddr, 4);
	}
	a.netns = BPF_CORE_READ((const struct sock *)t.skaddr, __sk_common.skc_net.net, ns.inum);
	if (!filter_match(&a))
		return 0;

	e = reserve_event(FAMILY_TCP_CONN, sizeof(*e), EVENT_TCP_CONN);
	if (!e)
		return 0;
	e->sock = (__u64)t.skaddr;
	e->addrs = a;
	e->oldstate = t.oldstate;
	e->newstate = t.newstate;
	e->context = stack_context(t.regs);
	/* tcp_reset() and tcp_done_with_error() set the error before the socket closes. */
	e->err = t.newstate == TCP_CLOSE ? BPF_CORE_READ((const struct sock *)t.skaddr, sk_err) : 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	submit_event(e);
	return 0;
}

static __always_inline unsigned long tsq_flags(const struct sock *sk, const struct tcp_sock *tp)
{
	if (bpf_core_field_exists(sk->sk_tsq_flags))
		return sk->sk_tsq_flags;
	return ((const struct tcp_sock___pre68 *)tp)->tsq_flags;
}

/*
 * A sub-MSS tail held by a cork: TCP_CORK (nonagle's CORK bit), or a write
 * with MSG_MORE, which leaves the tail unmarked for push (tcp_push() sets
 * pushed_seq only without MSG_MORE) and is pushed only by the next write.
 */
static __always_inline bool cork_holds(const struct tcp_sock *tp, __u8 nonagle)
{
	return (nonagle & TCP_NAGLE_CORK) || (__s32)(tp->write_seq - tp->pushed_seq) > 0;
}

/* tcp_nagle_check() with tcp_minshall_check(): a sub-MSS tail waits for the ACK of a small segment. */
static __always_inline bool nagle_holds(const struct tcp_sock *tp, __u8 nonagle)
{
	__u32 sml = tp->snd_sml, una = tp->snd_una, nxt = tp->snd_nxt;

	return !nonagle && tp->packets_out && (__s32)(sml - una) > 0 && (__s32)(sml - nxt) <= 0;
}

/* tcp_tso_autosize(): a millisecond of the pacing rate, at least two segments. */
static __always_inline __u32 tso_goal_segs(const struct sock *sk, __u32 mss)
{
	__u64 bytes = sk->sk_pacing_rate >> sk->sk_pacing_shift;
	__u32 segs = mss ? bytes / mss : 0;
	__u32 max_segs = sk->sk_gso_max_segs;

	if (segs < 2)
		segs = 2;
	return segs < max_segs ? segs : max_segs;
}

/* The pacing timer holds the next departure for more than min_hold_ns. */
static __always_inline bool pacing_holds(const struct sock *sk, const struct tcp_sock *tp, __u64 min_hold_ns)
{
	__u64 departure, now;

	if (!sk->sk_pacing_status)
		return false;
	departure = tp->tcp_wstamp_ns;
	now = bpf_ktime_get_ns();
	return departure > now && departure - now > min_hold_ns;
}

/*
 * The order matters: a limit that stops data the application has queued
 * ranks before the question whether the application queued enough.
 */
static __always_inline __u8 classify(const struct sock *sk, const struct tcp_sock *tp, __u32 unsent,
				     __u32 in_flight, __u32 cwnd, __u32 mss, __u32 una, __u32 nxt,
				     __u32 snd_wnd)
{
	/* After an RTO the sender waits out the timer, then resends from snd_una. */
	if (tp->packets_out && BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state) == TCP_CA_LOSS)
		return SENDLIM_RTO;
	if (unsent) {
		__u32 wnd_end = una + snd_wnd;
		__u32 wnd_room = (__s32)(wnd_end - nxt) > 0 ? wnd_end - nxt : 0;
		__u32 cwnd_room = in_flight < cwnd ? (cwnd - in_flight) * mss : 0;
		__u32 room = wnd_room < cwnd_room ? wnd_room : cwnd_room;
		__u32 tso_frame = tso_goal_segs(sk, mss) * mss;
		__u8 nonagle = BPF_CORE_READ_BITFIELD(tp, nonagle);
		bool held_tail;
		unsigned long tsq;

		if (in_flight >= cwnd)
			return SENDLIM_CWND;
		if (wnd_room < (unsent < mss ? unsent : mss))
			return SENDLIM_SWND;
		/*
		 * Only a partial tail waits: full segments go out corked or not.
		 * A held tail limits only when it leaves the pipe idle (less than
		 * an MSS outstanding: the Nagle x delayed-ACK stall). Behind a
		 * full pipe it costs nothing: the sender waits for more data, below.
		 */
		held_tail = unsent < mss && (cork_holds(tp, nonagle) || nagle_holds(tp, nonagle));
		if (held_tail && nxt - una < mss)
			return cork_holds(tp, nonagle) ? SENDLIM_CORK : SENDLIM_NAGLE;
		if (held_tail)
			goto nothing_sendable;
		tsq = tsq_flags(sk, tp);
		if (tsq & (1UL << TSQ_THROTTLED))
			return SENDLIM_TSQ;
		/*
		 * Pacing caps throughput only when the pacing rate is below
		 * cwnd/RTT, and then its holds add up to a real share of the RTT.
		 * Shorter holds (BBR spreading a TSO burst by microseconds) do
		 * not: count holds over RTT/8.
		 */
		if (pacing_holds(sk, tp, (__u64)(tp->srtt_us >> 3) * 1000 / 8))
			return SENDLIM_PACING;
		/*
		 * Nothing outstanding, nothing holding the data back, yet unsent,
		 * and the probe timer armed: tcp_write_xmit() tried, the transmit
		 * failed (a qdisc or device refused it), and the timer retries. A
		 * send that the pacing timer stopped arms the probe timer too, so
		 * that timer must not be queued, nor the transmit it queues
		 * (TSQ_QUEUED), nor the departure ahead.
		 */
		if (!tp->packets_out && tp->inet_conn.icsk_pending == ICSK_TIME_PROBE0 && !(tp->pacing_timer.state & 1) &&
		    !(tsq & (1UL << TSQ_QUEUED)) && !pacing_holds(sk, tp, 0))
			return SENDLIM_XMIT_FAIL;
		/*
		 * tcp_tso_should_defer() holds data back when the room left is
		 * less than a full frame (and a third of the window): it waits
		 * for the window that is short, so that window is the reason.
		 */
		if (room < unsent && room < tso_frame)
			return wnd_room < cwnd_room ? SENDLIM_SWND : SENDLIM_CWND;
		return SENDLIM_OK;
	}

nothing_sendable:;
	/*
	 * Nothing sendable: is the application blocked on the send buffer, or
	 * has it queued nothing more? A writer asleep on a full buffer is woken
	 * once the queue falls below two thirds of it (sk_stream_write_space()),
	 * so SOCK_NOSPACE, on a cache line softirq rarely touches, is read only
	 * while the queue is at least half the buffer.
	 */
	int queued = sk->sk_wmem_queued, sndbuf = sk->sk_sndbuf;

	if (queued >= sndbuf)
		return SENDLIM_SNDBUF;
	if (queued >= sndbuf >> 1) {
		struct socket *sock = sk->sk_socket;

		if (sock && (sock->flags & (1UL << SOCK_NOSPACE)))
			return SENDLIM_SNDBUF;
	}
	return SENDLIM_APP;
}

/* Emits a run that ended at end: now, or earlier, at the send that resumed after a stall. */
static __always_inline void emit_run(struct sendlim_run *run, __u64 end)
{
	struct tcp_sendlim_event *e;

	e = reserve_event(FAMILY_TCP_SENDLIM, sizeof(*e), EVENT_TCP_SENDLIM);
	if (!e)
		return;
	e->hdr.ts_ns = end;
	/* Copy the body after the header the reservation filled in. */
	__builtin_memcpy((char *)e + sizeof(e->hdr), (char *)&run->ev + sizeof(e->hdr),
			 sizeof(*e) - sizeof(e->hdr));
	submit_event(e);
}

/* Passes a socket through the filters, filling its addresses on the way. */
static __always_inline bool sock_passes(const struct sock *sk, struct sock_addrs *a)
{
	read_sock_addrs_btf(sk, a);
	return filter_match(a);
}

/* tcp_sendlim and tcp_rtt share the tcp_probe program; these say which run. */
const volatile bool enable_sendlim = false;
const volatile bool enable_rtt = false;

/* At most one tcp_rtt sample per socket per this many jiffies (--rtt-interval, rounded up). */
const volatile __u64 rtt_interval_jiffies = 10;

static __always_inline void rtt_sample(const struct sock *sk, const struct tcp_sock *tp, struct sendlim_run *run,
				       bool last)
{
	__u64 jiffies = bpf_jiffies64();
	struct tcp_rtt_event *e;
	__u32 interval_us, mss;

	/* Jiffies, not a clock read: this runs at every incoming segment. */
	if (!last && run->rtt_sample_jiffies && jiffies - run->rtt_sample_jiffies < rtt_interval_jiffies)
		return;
	run->rtt_sample_jiffies = jiffies;
	e = reserve_event(FAMILY_TCP_RTT, sizeof(*e), EVENT_TCP_RTT);
	if (!e)
		return;
	e->sock = (__u64)sk;
	e->addrs = run->ev.addrs;
	e->srtt_us = tp->srtt_us >> 3;
	e->rttvar_us = tp->mdev_us >> 2; /* what tcp_info and ss report: rttvar_us is floored at the minimum RTO */
	e->min_rtt_us = tp->rtt_min.s[0].v;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
	e->snd_wnd = tp->snd_wnd;
	e->rcv_wnd = tp->rcv_wnd;
	interval_us = tp->rate_interval_us;
	mss = tp->mss_cache;
	/* tcp_compute_delivery_rate(): delivered packets times MSS over the sample's interval. */
	e->delivery_rate = interval_us ? (__u64)tp->rate_delivered * mss * 1000000 / interval_us : 0;
	e->bytes_acked = tp->bytes_acked;
	e->bytes_received = tp->bytes_received;
	submit_event(e);
}

/*
 * tcp_get_info_chrono_stats(): busy, rwnd-limited and sndbuf-limited time,
 * the running period included, in microseconds as tcp_info reports them.
 */
static __always_inline void chrono_totals(const struct tcp_sock *tp, struct tcp_sendlim_event *ev)
{
	__u64 us_per_jiffy = 1000000 / jiffies_per_sec;
	__u32 stat[3] = {tp->chrono_stat[0], tp->chrono_stat[1], tp->chrono_stat[2]};
	__u8 type = BPF_CORE_READ_BITFIELD(tp, chrono_type);

	if (type >= 1 && type <= 3)
		stat[type - 1] += (__u32)bpf_jiffies64() - tp->chrono_start;
	ev->busy_us = ((__u64)stat[0] + stat[1] + stat[2]) * us_per_jiffy;
	ev->rwnd_limited_us = (__u64)stat[1] * us_per_jiffy;
	ev->sndbuf_limited_us = (__u64)stat[2] * us_per_jiffy;
}

/*
 * Between ACKs only a stall is worth a decision (one beginning, or one in
 * progress that ends), or a socket's first: data going out, or an
 * application with nothing more to send, is decided at the ACKs that follow
 * anyway, and deciding it at every write too would cut a bulk sender's runs
 * into pieces.
 */
static __always_inline bool stall_reason(__u8 reason)
{
	return reason == SENDLIM_SWND || reason == SENDLIM_CORK || reason == SENDLIM_NAGLE ||
	       reason == SENDLIM_XMIT_FAIL || reason == SENDLIM_RTO;
}

/*
 * The stalls that the next send of new data ends, as the kernel's own
 * accounting does (its rwnd-limited clock stops at the send after the window
 * opens): the window opening, the cork or Nagle release, the end of loss
 * recovery all happen inside an ACK's processing or a system call, after
 * the decision there, and their send is the first sign. Not xmit_fail: its
 * retries are such sends, whether the qdisc takes them or not.
 */
static __always_inline bool send_ends(__u8 reason)
{
	return reason == SENDLIM_SWND || reason == SENDLIM_CORK || reason == SENDLIM_NAGLE || reason == SENDLIM_RTO;
}

static __always_inline void sendlim_decide(struct sock *sk, struct tcp_sock *tp, struct sendlim_run *run,
					   bool between_acks)
{
	__u32 in_flight, unsent, cwnd, mss, segs_out;
	__u64 jiffies = bpf_jiffies64();
	__u8 reason, probes, backoff;

	if (!use_sk_storage)
		run->decided_ns = bpf_ktime_get_boot_ns();
	/*
	 * Fast path for an idle sender (every byte written is acknowledged),
	 * as a receiving socket is at each data segment: the decision can only
	 * be app, and continuing an app run changes nothing but the count.
	 */
	if (run->ev.reason == SENDLIM_APP && run->ev.cnt && tp->write_seq == tp->snd_una &&
	    jiffies - run->begin_jiffies < jiffies_per_sec) {
		run->ev.cnt++;
		return;
	}

	/* Plain loads: tp_btf hands over trusted BTF pointers, no probe-read helpers needed. */
	cwnd = tp->snd_cwnd;
	mss = tp->mss_cache;
	segs_out = tp->data_segs_out;
	in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
	unsent = tp->write_seq - tp->snd_nxt;
	reason = classify(sk, tp, unsent, in_flight, cwnd, mss, tp->snd_una, tp->snd_nxt, tp->snd_wnd);
	/*
	 * A write ends a stall only one that lasted: in a window-limited stream
	 * every ACK is decided [swnd] before it opens the window, and the write
	 * that follows microseconds later would cut the run at each ACK. Two
	 * jiffies (8 ms at HZ 250) since the last decision tell a hold (a cork,
	 * a shut window) from that; a shorter one ends at the next ACK.
	 */
	if (between_acks && run->ev.cnt && !stall_reason(reason) &&
	    !(stall_reason(run->ev.reason) && jiffies - run->decided_jiffies >= 2))
		return;
	run->decided_jiffies = jiffies;

	if (run->ev.cnt == 0) {
		run->ev.begin_ns = bpf_ktime_get_boot_ns();
		run->ev.cnt = 1;
		run->ev.reason = reason;
		run->begin_jiffies = jiffies;
		run->last_segs_out = segs_out;
	} else if (run->ev.reason == reason && jiffies - run->begin_jiffies < jiffies_per_sec) {
		run->ev.sentpkts += segs_out - run->last_segs_out;
		run->last_segs_out = segs_out;
		run->ev.cnt++;
	} else {
		__u64 end = bpf_ktime_get_boot_ns();
		__u32 end_segs = segs_out;

		/* A stall that a send ended: the run ends there, and the next begins. */
		if (run->resume_ns && run->ev.reason != reason) {
			end = run->resume_ns;
			end_segs = run->resume_segs;
		}
		run->ev.sentpkts += end_segs - run->last_segs_out;
		emit_run(run, end);
		run->ev.begin_ns = end;
		run->begin_jiffies = jiffies;
		run->ev.cnt = 1;
		run->ev.sentpkts = segs_out - end_segs;
		run->ev.reason = reason;
		run->last_segs_out = segs_out;
	}
	/* Decided again: a send since then that did not end the stall is part of it. */
	run->resume_ns = 0;

	chrono_totals(tp, &run->ev);
	/* The most the run saw: an ACK that opens the window resets them. */
	probes = tp->inet_conn.icsk_probes_out;
	backoff = tp->inet_conn.icsk_backoff;
	if (run->ev.cnt == 1 || probes > run->ev.probes)
		run->ev.probes = probes;
	if (run->ev.cnt == 1 || backoff > run->ev.backoff)
		run->ev.backoff = backoff;
	run->ev.cwnd = cwnd;
	run->ev.ssthresh = tp->snd_ssthresh;
	run->ev.in_flight = in_flight;
	run->ev.snd_wnd = tp->snd_wnd;
	run->ev.mss = mss;
	run->ev.unsent = unsent;
	run->ev.wmem_queued = sk->sk_wmem_queued;
	run->ev.sndbuf = sk->sk_sndbuf;
}

/* The socket's run, created at its first decision; NULL for a socket the filters exclude. */
static __always_inline struct sendlim_run *sendlim_run_of(struct sock *sk)
{
	struct sendlim_run *run = sendlim_runs_get(sk, true);

	if (!run || run->ev.reason == SENDLIM_IGNORED)
		return NULL;
	if (!run->ev.hdr.type) {
		/* New storage, zeroed. Filters are checked once. */
		if (!sock_passes(sk, &run->ev.addrs)) {
			run->ev.reason = SENDLIM_IGNORED;
			return NULL;
		}
		run->ev.hdr.type = EVENT_TCP_SENDLIM;
		run->ev.sock = (__u64)sk;
	}
	return run;
}

/*
 * tcp_probe fires at the start of tcp_rcv_established(), before the incoming
 * segment is processed: the socket still shows the state the sender was in
 * while it waited for this ACK, which is what the decision describes. One
 * program serves tcp_sendlim and tcp_rtt, so the socket's state is looked up
 * once per segment.
 */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sendlim_run *run;

	if (!tp)
		return 0;
	run = sendlim_run_of(sk);
	if (!run)
		return 0;
	if (enable_rtt)
		rtt_sample(sk, tp, run, false);
	if (enable_sendlim)
		sendlim_decide(sk, tp, run, false);
	return 0;
}

/*
 * Decisions between ACKs. A stalled sender gets no ACKs, so the stall would
 * be charged to whatever held at the last one: the kernel also decides
 * after each write (what the push left unsent, and why) and at each
 * retransmission (timeouts included).
 */
static __always_inline void sendlim_between_acks(struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sendlim_run *run;
	__u8 state;

	if (!tp)
		return;
	state = sk->__sk_common.skc_state;
	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT)
		return;
	run = sendlim_run_of(sk);
	if (run)
		sendlim_decide(sk, tp, run, true);
}

/* Where sock_send_length is missing: the return of tcp_sendmsg(). */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(sendlim_write_fexit, struct sock *sk, void *msg, __u64 size, int ret)
{
	sendlim_between_acks(sk);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int sendlim_retrans(__u64 *ctx)
{
	sendlim_between_acks((struct sock *)ctx[0]);
	return 0;
}

/*
 * Every skb handed to a device: the send that ends a stall (see send_ends())
 * is noted, and the run ends there if the next decision finds another
 * reason. A socket without a run, or in a run no send ends, costs a storage
 * lookup; only a stalled one reads the TCP header, to tell new data (its
 * sequence number is snd_nxt, which the kernel advances after the transmit)
 * from probes, retransmissions and pure ACKs.
 */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(sendlim_xmit, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	struct sendlim_run *run;
	struct tcphdr_wire th;
	const struct tcp_sock *tp;
	unsigned char *head;
	__u32 mss;
	int payload;

	if (!sk)
		return 0;
	run = sendlim_runs_get(sk, false);
	if (!run || !run->ev.cnt || run->resume_ns || !send_ends(run->ev.reason))
		return 0;
	head = skb->head;
	if (bpf_probe_read_kernel(&th, sizeof(th), head + skb->transport_header))
		return 0;
	payload = skb->len - (skb->transport_header - (skb->data - head)) - (th.doff_res >> 4) * 4;
	/*
	 * Only TCP sockets have runs. skb->sk is an RCU pointer that the
	 * socket-cast helpers refuse (6.x), so the few fields are probe-read.
	 */
	tp = (const struct tcp_sock *)sk;
	if (payload <= 0 || __builtin_bswap32(th.seq) != BPF_CORE_READ(tp, snd_nxt))
		return 0;
	run->resume_ns = bpf_ktime_get_boot_ns();
	/* data_segs_out counts this skb already (tcp_transmit_skb(), before the transmit). */
	mss = BPF_CORE_READ(tp, mss_cache);
	run->resume_segs = BPF_CORE_READ(tp, data_segs_out) - (mss ? (payload + mss - 1) / mss : 1);
	return 0;
}

/* Ends a socket's run: now, or where a send ended its stall. */
static __always_inline void sendlim_end(struct tcp_sock *tp, struct sendlim_run *run)
{
	__u64 end = run->resume_ns ? run->resume_ns : bpf_ktime_get_boot_ns();
	__u32 segs = tp->data_segs_out;

	/* Not a conditional load: one instruction must not read both a map value and the socket. */
	barrier_var(segs);
	if (run->resume_ns)
		segs = run->resume_segs;

	/* The kernel's totals as the run ends, as tcp_info would say then. */
	chrono_totals(tp, &run->ev);
	run->ev.sentpkts += segs - run->last_segs_out;
	emit_run(run, end);
	run->ev.cnt = 0;
	run->resume_ns = 0;
}

/*
 * Leaving ESTABLISHED or CLOSE_WAIT (close(), shutdown(), a reset) ends the
 * socket's run: the family decides only in those states, and a run left
 * open would charge the closing or orphaned socket's time (FIN_WAIT1 with
 * unsent data can last minutes) to the reason it had before.
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sendlim_state, const struct sock *sk, int oldstate, int newstate)
{
	struct sendlim_run *run;
	struct tcp_sock *tp;

	if ((oldstate != TCP_ESTABLISHED && oldstate != TCP_CLOSE_WAIT) || newstate == TCP_CLOSE_WAIT)
		return 0;
	run = sendlim_runs_get((struct sock *)sk, false);
	if (!run || run->ev.reason == SENDLIM_IGNORED || !run->ev.cnt)
		return 0;
	tp = bpf_skc_to_tcp_sock((struct sock *)sk);
	if (tp)
		sendlim_end(tp, run);
	return 0;
}

/*
 * A closing socket ends its run, with the segments sent since its last
 * decision, and gets a last tcp_rtt sample, with the totals of its last ACK:
 * nothing else would report them. One program for both, since the state
 * they share is deleted here.
 */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_sendlim_close, struct sock *sk)
{
	struct sendlim_run *run = sendlim_runs_get(sk, false);
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);

	if (!run)
		return 0;
	if (tp && run->ev.reason != SENDLIM_IGNORED && run->ev.hdr.type) {
		if (enable_rtt)
			rtt_sample(sk, tp, run, true);
		/* Ended here only if no state change did (a socket destroyed without leaving ESTABLISHED). */
		if (enable_sendlim && run->ev.cnt)
			sendlim_end(tp, run);
	}
	sendlim_runs_delete(sk);
	return 0;
}

/*
 * Hands user space the runs still open when recording stops (the hash is
 * read directly), with the kernel's totals and the segments sent up to the
 * stop, or to the send that ended the run's stall; user space ends them at
 * resume_ns, else at the stop.
 */
SEC("iter/bpf_sk_storage_map")
int sendlim_open_runs(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sendlim_run *value = ctx->value, run;
	struct sock *sk = ctx->sk;
	struct tcp_sock *tp;

	if (!sk || !value || value->ev.reason == SENDLIM_IGNORED || !value->ev.cnt)
		return 0;
	run = *value;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		__u32 segs = tp->data_segs_out;

		barrier_var(segs);
		if (run.resume_ns)
			segs = run.resume_segs;
		chrono_totals(tp, &run.ev);
		run.ev.sentpkts += segs - run.last_segs_out;
	}
	bpf_seq_write(ctx->meta->seq, &run, sizeof(run));
	return 0;
}

#include "tcp_catalog.h"
#include "dev_catalog.h"
