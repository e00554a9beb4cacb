// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * qdisc_delay: how long packets wait in a qdisc, from its enqueue to its
 * dequeue, as a histogram per qdisc and interval. The enqueue stamps the
 * skb by its address: the same skb leaves the qdisc it entered, as the
 * stack segments GSO skbs only after the dequeue. A qdisc that splits them
 * itself (tbf with a burst below the skb's size) dequeues segments that
 * were never stamped: they are counted as unstamped, and the skbs it kept
 * whole, which waited in the same queue, are timed. Both run on the
 * root qdisc, under its lock or, for lockless qdiscs, on any CPU: the
 * counts are per CPU.
 */
#include "aggregate.bpf.h"

/* Never read: gives the event a BTF entry, from which its Go type is generated. */
const struct qdisc_delay_event *_qdisc_delay_event __attribute__((unused));

/*
 * Stamps of skbs in a qdisc. A stamp whose skb left unseen (dropped by the
 * qdisc at its enqueue, a reset) ages out; until then its address may come
 * back as another skb that was never enqueued (a segment the qdisc made):
 * the length tells them apart.
 */
struct qdisc_stamp {
	__u64 ns; /* bpf_ktime_get_ns() at enqueue */
	__u32 len;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* struct sk_buff * */
	__type(value, struct qdisc_stamp);
} qdisc_stamps SEC(".maps");

/*
 * Per CPU: a lockless qdisc's enqueues and dequeues run on any CPU. A value
 * is 840 bytes a CPU, so 256 qdiscs (a 64-queue NIC's mq children and some)
 * rather than the 1024 of qdisc's map; a full map counts as loss.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries as keys appear: preallocated, a per-CPU map costs its full size times the CPUs */
	__uint(max_entries, 256);
	__type(key, struct qdisc_key);
	__type(value, struct qdisc_delay_stats);
} qdisc_delays SEC(".maps");

/* A new qdisc's values: too large for the stack. */
const struct qdisc_delay_stats qdisc_delay_zero = {};

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(qdisc_delay_enqueue, struct Qdisc *q, const struct netdev_queue *txq, struct sk_buff *skb)
{
	struct qdisc_stamp stamp = {};
	__u64 key = (__u64)skb;

	if (!here_passes() || !packet_passes(skb, skb->head + skb->network_header))
		return 0;
	stamp.ns = bpf_ktime_get_ns();
	stamp.len = skb->len;
	bpf_map_update_elem(&qdisc_stamps, &key, &stamp, BPF_ANY);
	return 0;
}

/* A bulk dequeue passes its first skb, the rest chained on skb->next. */
#define QDISC_DELAY_BULK 8

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(qdisc_delay_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	const struct net_device *dev = txq ? txq->dev : NULL;
	struct qdisc_delay_stats *v;
	struct qdisc_key key = {};
	struct dev_id dk;
	__u64 now;

	if (!skb || !dev_passes(dev, NULL, &dk, NULL))
		return 0;
	key.netns = dk.netns;
	key.ifindex = dk.ifindex;
	key.handle = q->handle;
	key.parent = q->parent;
	v = bpf_map_lookup_elem(&qdisc_delays, &key);
	if (!v) {
		v = upsert(&qdisc_delays, &key, &qdisc_delay_zero, FAMILY_QDISC_DELAY);
		if (!v)
			return 0;
		if (dev)
			__builtin_memcpy(v->dev, dev->name, sizeof(v->dev));
		__builtin_memcpy(v->kind, q->ops->id, sizeof(v->kind));
	}
	if (v->gen != drain_gen) {
		v->gen = drain_gen;
		v->max_ns = 0;
	}
	now = bpf_ktime_get_ns();
	for (int i = 0; i < QDISC_DELAY_BULK && skb; i++, skb = skb->next) {
		__u64 skb_key = (__u64)skb, ns;
		struct qdisc_stamp *stamp;
		__u32 idx;

		stamp = bpf_map_lookup_elem(&qdisc_stamps, &skb_key);
		if (!stamp || stamp->len != skb->len) {
			v->unstamped++;
			continue;
		}
		ns = now > stamp->ns ? now - stamp->ns : 0;
		bpf_map_delete_elem(&qdisc_stamps, &skb_key);
		v->packets++;
		v->sum_ns += ns;
		if (ns > v->max_ns)
			v->max_ns = ns;
		idx = delay_bucket(ns / 1000, 2, DELAY_BUCKETS);
		barrier_var(idx); /* keeps the bound check below where the verifier sees it */
		if (idx < DELAY_BUCKETS)
			v->hist[idx]++;
	}
	return 0;
}
