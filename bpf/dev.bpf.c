// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Device-level families, aggregated in the kernel: dev_xmit, dev_recv
 * (segments per skb: TSO/GSO and GRO at work), napi_poll, softirq, qdisc,
 * skb_drop.
 */
#include "aggregate.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries as keys appear: preallocated, a per-CPU map costs its full size times the CPUs */
	__uint(max_entries, 1024);
	__type(key, __u64); /* struct net_device * */
	__type(value, struct dev_stats);
} dev_xmit_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries as keys appear: preallocated, a per-CPU map costs its full size times the CPUs */
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct dev_stats);
} dev_recv_stats SEC(".maps");

/*
 * Slots a pointer maps to in the per-CPU caches: array lookups are inlined,
 * hash lookups are calls. A device whose slot another owns uses the hash;
 * the recorder adds both.
 */
#define DEV_SLOTS 64

static __always_inline __u32 slot_of(__u32 n)
{
	return n & (DEV_SLOTS - 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct dev_slot);
} dev_xmit_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct dev_slot);
} dev_recv_slots SEC(".maps");

static __always_inline struct dev_stats *dev_stats_for(void *slots, void *map, const struct net_device *dev,
						       __u32 family)
{
	struct dev_stats zero = {}, *v = NULL;
	__u64 key = (__u64)dev;
	__u32 idx = slot_of(dev ? dev->ifindex : 0); /* a pointer cannot be hashed: the verifier forbids the arithmetic */
	struct dev_slot *slot;

	if (!here_passes())
		return NULL;
	slot = bpf_map_lookup_elem(slots, &idx);
	if (slot && (slot->key == key || !slot->key)) {
		slot->key = key;
		v = &slot->stats;
	} else {
		v = upsert(map, &key, &zero, family);
		if (!v)
			return NULL;
	}
	/* A new device may reuse a deleted one's address: its ifindex tells them apart. */
	if (!v->ready || (dev && v->ifindex != dev->ifindex)) {
		struct dev_id id;

		v->ready = 1;
		v->ignored = !dev_passes(dev, NULL, &id, NULL);
		v->netns = id.netns;
		v->ifindex = id.ifindex;
		if (dev)
			__builtin_memcpy(v->name, dev->name, sizeof(v->name));
	}
	if (v->ignored)
		return NULL;
	if (v->gen != drain_gen) {
		v->gen = drain_gen;
		v->max_bytes = 0;
	}
	return v;
}

static __always_inline void count_skb(struct dev_stats *v, const struct sk_buff *skb, __u32 len)
{
	__u32 segs = skb_segs(skb), bucket;

	v->skbs++;
	v->bytes += len;
	v->segs += segs;
	if (len > v->max_bytes)
		v->max_bytes = len;
	bucket = log2_bucket(segs, SEGS_BUCKETS - 1);
	barrier_var(bucket);
	if (bucket < SEGS_BUCKETS)
		v->hist[bucket]++;
}

/*
 * Counted when the driver returns, so one program sees both the skb and the
 * verdict (a run per skb saved over hooking the start of the transmission
 * too). The length is the tracepoint's, taken before the driver ran. The
 * segment count is read from the skb after it: a transmission completes
 * microseconds after the driver returns, so the skb is still whole here,
 * unless a stacked device (a tunnel over a full qdisc) dropped it at once,
 * when one skb's segment bucket may be wrong. A driver's NETDEV_TX_BUSY
 * requeues the skb for another try: an error now, transmitted when a later
 * try succeeds.
 */
SEC("tp_btf/net_dev_xmit")
int BPF_PROG(dev_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int len)
{
	struct dev_stats *v = dev_stats_for(&dev_xmit_slots, &dev_xmit_stats, dev, FAMILY_DEV_XMIT);

	if (!v || !packet_passes(skb, skb->head + skb->network_header))
		return 0;
	if (rc != 0) /* not NETDEV_TX_OK */
		v->errors++;
	else
		count_skb(v, skb, len);
	return 0;
}

/*
 * After GRO: one call per skb the stack receives, merged or not. The link
 * header is pulled by now (eth_type_trans), so data is at the IP header; the
 * network header may not be set yet.
 */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(dev_recv, struct sk_buff *skb)
{
	struct dev_stats *v = dev_stats_for(&dev_recv_slots, &dev_recv_stats, skb->dev, FAMILY_DEV_RECV);

	if (v && packet_passes(skb, skb->data))
		count_skb(v, skb, skb->len);
	return 0;
}

/*
 * What GRO was handed, counted per packet: only where a packet filter must
 * judge each packet. Without one, the napi_poll program counts the same from
 * the polls, and the receive path keeps one run per skb, not two per packet.
 */
SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(dev_recv_gro, const struct sk_buff *skb)
{
	struct dev_stats *v = dev_stats_for(&dev_recv_slots, &dev_recv_stats, skb->dev, FAMILY_DEV_RECV);

	if (v && packet_passes(skb, skb->data))
		v->gro_in++;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries as keys appear: preallocated, a per-CPU map costs its full size times the CPUs */
	__uint(max_entries, 1024);
	__type(key, __u64); /* struct napi_struct * */
	__type(value, struct napi_stats);
} napi_polls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct napi_slot);
} napi_slots SEC(".maps");

/*
 * The packets a device's NAPI poll took off its ring: what the driver handed
 * GRO (or the stack), counted once per poll for dev_recv. The per-CPU
 * backlog (no device) is not a device's receive path.
 */
static __always_inline void count_polled(struct napi_struct *napi, int work)
{
	struct dev_stats *v;

	if (work <= 0 || !napi->dev)
		return;
	v = dev_stats_for(&dev_recv_slots, &dev_recv_stats, napi->dev, FAMILY_DEV_RECV);
	if (v)
		v->gro_in += work;
}

/* Which families the napi_poll program counts for: one run per poll serves
 * both (on veth, where each skb has a poll of its own, a run per skb saved). */
const volatile bool enable_napi_stats = false;
const volatile bool enable_dev_recv_polled = false;

SEC("tp_btf/napi_poll")
int BPF_PROG(napi_poll, struct napi_struct *napi, int work, int budget)
{
	struct napi_stats zero = {}, *v;
	__u64 key = (__u64)napi;
	__u32 idx;
	struct napi_slot *slot;

	if (enable_dev_recv_polled)
		count_polled(napi, work);
	if (!enable_napi_stats || !here_passes())
		return 0;
	idx = slot_of(napi->napi_id);
	slot = bpf_map_lookup_elem(&napi_slots, &idx);
	if (slot && (slot->key == key || !slot->key)) {
		slot->key = key;
		v = &slot->stats;
	} else {
		v = upsert(&napi_polls, &key, &zero, FAMILY_NAPI_POLL);
		if (!v)
			return 0;
	}
	if (!v->ready) {
		struct net_device *dev = napi->dev;
		struct dev_id id;

		v->ready = 1;
		v->ignored = !dev_passes(dev, NULL, &id, NULL);
		v->netns = id.netns;
		v->ifindex = id.ifindex;
		if (dev)
			__builtin_memcpy(v->name, dev->name, sizeof(v->name));
		else /* the per-CPU backlog of packets queued by netif_rx(), as veth and loopback use */
			__builtin_memcpy(v->name, "backlog", sizeof("backlog"));
	}
	if (v->ignored)
		return 0;
	v->polls++;
	v->work += work;
	v->budget = budget;
	if (work >= budget)
		v->exhausted++;
	return 0;
}

#define NET_TX_SOFTIRQ 2
#define NET_RX_SOFTIRQ 3
#define NR_SOFTIRQS 10

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NR_SOFTIRQS);
	__type(key, __u32);
	__type(value, struct softirq_stats);
} softirqs SEC(".maps");

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_enter, unsigned int vec)
{
	struct softirq_stats *v;

	if (vec != NET_RX_SOFTIRQ && vec != NET_TX_SOFTIRQ)
		return 0;
	v = bpf_map_lookup_elem(&softirqs, &vec);
	if (v)
		v->start_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_leave, unsigned int vec)
{
	struct softirq_stats *v;

	if (vec != NET_RX_SOFTIRQ && vec != NET_TX_SOFTIRQ)
		return 0;
	/* Softirq time is softirq context by definition. */
	if (!cpu_passes() || (filter_contexts && !(filter_contexts & CONTEXT_FILTER_SOFTIRQ)))
		return 0;
	v = bpf_map_lookup_elem(&softirqs, &vec);
	if (!v || !v->start_ns) /* entered before recording began */
		return 0;
	v->time_ns += bpf_ktime_get_ns() - v->start_ns;
	v->entries++;
	v->start_ns = 0;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct qdisc_key);
	__type(value, struct qdisc_stats);
} qdiscs SEC(".maps");

/*
 * Enqueue and dequeue run under the qdisc's lock, so the counters need no
 * atomics. The drop, requeue and overlimit counters are the qdisc's own (as
 * tc -s shows them), read at each operation; qdiscs that keep per-CPU
 * statistics (pfifo_fast, ...) do not update them.
 */
static __always_inline struct qdisc_stats *qdisc_stats_for(struct Qdisc *q, const struct netdev_queue *txq)
{
	const struct net_device *dev = txq ? txq->dev : NULL;
	struct qdisc_key key = {};
	struct dev_id dk;
	struct qdisc_stats *v;

	if (!here_passes() || !dev_passes(dev, NULL, &dk, NULL))
		return NULL;
	key.netns = dk.netns;
	key.ifindex = dk.ifindex;
	key.handle = q->handle;
	key.parent = q->parent;
	v = bpf_map_lookup_elem(&qdiscs, &key);
	if (!v) {
		struct qdisc_stats init = {};

		if (dev)
			__builtin_memcpy(init.dev, dev->name, sizeof(init.dev));
		__builtin_memcpy(init.kind, q->ops->id, sizeof(init.kind));
		init.drops_base = q->qstats.drops;
		init.requeues_base = q->qstats.requeues;
		init.overlimits_base = q->qstats.overlimits;
		v = upsert(&qdiscs, &key, &init, FAMILY_QDISC);
		if (!v)
			return NULL;
	}
	if (v->gen != drain_gen) {
		v->gen = drain_gen;
		v->backlog_max = 0;
		v->qlen_max = 0;
	}
	v->drops = q->qstats.drops;
	v->requeues = q->qstats.requeues;
	v->overlimits = q->qstats.overlimits;
	v->backlog = q->qstats.backlog;
	v->qlen = q->q.qlen;
	if (v->backlog > v->backlog_max)
		v->backlog_max = v->backlog;
	if (v->qlen > v->qlen_max)
		v->qlen_max = v->qlen;
	return v;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(qdisc_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct qdisc_stats *v;

	if (!packet_passes(skb, skb->head + skb->network_header))
		return 0;
	v = qdisc_stats_for(q, txq);
	if (v)
		v->enqueues++;
	return 0;
}

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(qdisc_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct qdisc_stats *v;

	/* A bulk dequeue passes its first skb: -F judges the batch by it. */
	if (!skb || !packet_passes(skb, skb->head + skb->network_header))
		return 0;
	v = qdisc_stats_for(q, txq);
	if (v)
		v->dequeues += packets;
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries as keys appear: preallocated, a per-CPU map costs its full size times the CPUs */
	__uint(max_entries, 4096);
	__type(key, struct drop_key);
	__type(value, struct drop_stats);
} drops SEC(".maps");

#define SKB_CONSUMED 1

/*
 * The addresses of a packet that has no IP header yet: its socket's. Going
 * out, skb->protocol is set only when the IP header is built (ip_output(),
 * ip6_xmit()): a segment freed before that (on a socket's write queue, at a
 * route lookup) has 0 there. A full socket keeps its port in inet_sport once
 * skc_num is cleared at close; request and timewait sockets are TCP's.
 * Probe reads: sk may be kfree_skb's rx_sk, which has no BTF type here.
 * Returns the L4 protocol and sets *proto to the ethertype.
 */
static __always_inline __u8 sock_packet_addrs(const struct sock *sk, struct sock_addrs *a, __u16 *proto)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u8 state = BPF_CORE_READ(sk, __sk_common.skc_state), l4 = IPPROTO_TCP;

	if (family == AF_INET) {
		bpf_probe_read_kernel(a->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_probe_read_kernel(a->daddr, 4, &sk->__sk_common.skc_daddr);
		*proto = ETH_P_IP;
	} else if (family == AF_INET6) {
		bpf_probe_read_kernel(a->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_probe_read_kernel(a->daddr, 16, &sk->__sk_common.skc_v6_daddr);
		*proto = ETH_P_IPV6;
	} else {
		return 0;
	}
	a->family = family;
	a->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	a->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (state != TCP_TIME_WAIT && state != TCP_NEW_SYN_RECV) {
		l4 = BPF_CORE_READ(sk, sk_protocol);
		if (!a->sport)
			a->sport = __builtin_bswap16(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	}
	if (l4 != IPPROTO_TCP && l4 != IPPROTO_UDP) /* a raw socket's skc_num is its protocol */
		a->sport = a->dport = 0;
	return l4;
}

/* kfree_skb's rx_sk (6.12): the socket a received packet was dropped for. */
const volatile bool drop_has_rx_sk = true;

/*
 * Before 5.17 kfree_skb has no reason: drops there are keyed by location
 * alone (reason 0). The namespace is the socket's (the skb's own, or the
 * receiving one), else the device's: drops inside TCP have no device.
 */
SEC("tp_btf/kfree_skb")
int skb_drop(__u64 *ctx)
{
	struct sk_buff *skb = (void *)ctx[0];
	int reason = drop_has_reason ? (int)ctx[2] : 0;
	struct drop_key key = {.location = ctx[1], .reason = reason};
	const struct sock *sk = skb->sk;
	struct sock_addrs a = {};
	struct drop_stats *v;
	struct dev_id dk;

	if (reason == SKB_CONSUMED || !here_passes())
		return 0;
	if (!sk && drop_has_rx_sk)
		sk = (const struct sock *)ctx[3];
	__u16 protocol = __builtin_bswap16(skb->protocol);
	__u8 l4proto;

	if (sk && (!protocol || skb->network_header == NET_HEADER_UNSET))
		l4proto = sock_packet_addrs(sk, &a, &protocol);
	else
		l4proto = skb_addrs(skb, &a);

	/* The device and namespace first: -F is the dearer test. */
	if (!dev_passes(skb->dev, sk, &dk, &a) || !packet_passes(skb, skb->head + skb->network_header))
		return 0;
	key.netns = dk.netns;
	key.netns_by_addr = a.netns_by_addr;
	key.ifindex = dk.ifindex;
	a.netns = dk.netns;
	if ((filter_port || filter_family) && !filter_match(&a))
		return 0;
	v = bpf_map_lookup_elem(&drops, &key);
	if (!v) {
		struct drop_stats init = {};

		if (skb->dev)
			__builtin_memcpy(init.dev, skb->dev->name, sizeof(init.dev));
		v = upsert(&drops, &key, &init, FAMILY_SKB_DROP);
		if (!v)
			return 0;
	}
	if (v->gen != drain_gen || !v->first_ns) {
		v->gen = drain_gen;
		v->first_ns = bpf_ktime_get_boot_ns();
	}
	v->cnt++;
	v->protocol = protocol;
	v->l4proto = l4proto;
	v->addrs = a;
	return 0;
}
