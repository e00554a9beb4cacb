// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * What every family shares: the ring buffer, sequence numbers and loss
 * counts, the user's filters (socket, namespace, CPU, context, packets),
 * the per-CPU context the context filter reads, the address and skb
 * readers. Included first by each domain's .bpf.c.
 */
#ifndef SKBTRACE_COMMON_BPF_H
#define SKBTRACE_COMMON_BPF_H

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "events.h"

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
 * Per family, what a kernel map could not keep: an aggregation or
 * per-socket map full (or its allocation refused), counted apart from the
 * ring buffer's loss because its remedy differs.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FAMILY_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost_full SEC(".maps");

/*
 * Per-socket state lives in socket storage, freed with the socket. Tracing
 * programs may use socket storage from 5.11; before that the state lives in
 * an LRU hash keyed by the socket's address, deleted when the socket is
 * destroyed. The loader says which, and gives the fallback maps (name_by_sock)
 * one entry where socket storage is used.
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

/* A sample a kernel map could not keep. */
static __always_inline void count_full(__u32 family)
{
	__u64 *n = bpf_map_lookup_elem(&lost_full, &family);

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

#endif /* SKBTRACE_COMMON_BPF_H */
