// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * What the aggregated families share (devices, NAPI, softirq, qdiscs,
 * socket I/O, drops): the kernel counts per key, the recorder drains the
 * maps every interval.
 */
#ifndef SKBTRACE_AGGREGATE_BPF_H
#define SKBTRACE_AGGREGATE_BPF_H

#include "common.bpf.h"

/* Bumped by the recorder at each drain: per-interval fields reset when it changes. */
__u64 drain_gen = 0;

/* Only devices with this name, when set. */
const volatile char filter_dev[16] = {};
/* Only this process (thread group), when set. */
const volatile __u32 filter_pid = 0;

struct dev_id {
	__u32 netns;
	__u32 ifindex;
};

/*
 * Passes a device (and its namespace, or sk's when sk is set) through the
 * filters; a packet's addresses a, when given, stand in for a namespace
 * that neither has.
 */
static __always_inline bool dev_passes(const struct net_device *dev, const struct sock *sk, struct dev_id *id,
				       struct sock_addrs *a)
{
	char name[16];

	id->ifindex = dev ? dev->ifindex : 0;
	if (sk)
		id->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	else
		id->netns = dev ? dev->nd_net.net->ns.inum : 0;
	if (!netns_passes(&id->netns, a))
		return false;
	if (!filter_dev[0])
		return true;
	if (!dev)
		return false;
	__builtin_memcpy(name, dev->name, sizeof(name));
#pragma unroll
	for (int i = 0; i < 16; i++) {
		if (name[i] != filter_dev[i])
			return false;
		if (!name[i])
			break;
	}
	return true;
}

/* Finds the value for key, inserting init first when absent; counts a full map as loss. */
static __always_inline void *upsert(void *map, const void *key, const void *init, __u32 family)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		count_full(family);
	return v;
}

/* floor(log2(v)) capped at last (0 for 0 and 1): a binary search, five steps rather than a loop of 24 on every packet. */
static __always_inline __u32 log2_bucket(__u64 v, __u32 last)
{
	__u32 b = 0, s;

	s = v >= (1ULL << 16) ? 16 : 0;
	v >>= s;
	b += s;
	s = v >= (1 << 8) ? 8 : 0;
	v >>= s;
	b += s;
	s = v >= (1 << 4) ? 4 : 0;
	v >>= s;
	b += s;
	s = v >= (1 << 2) ? 2 : 0;
	v >>= s;
	b += s;
	b += v >= 2;
	return b < last ? b : last;
}

/*
 * A wait in microseconds as a bucket of a histogram that cuts each power of
 * two in 2^sub_bits (qdisc_delay: quarters, a quantile read from them within
 * 12 %; tcp_stage: eighths, within 6 %), the values below 2^sub_bits one
 * each, and the last bucket everything above.
 */
static __always_inline __u32 delay_bucket(__u64 us, __u32 sub_bits, __u32 buckets)
{
	__u32 subs = 1 << sub_bits, b, idx;

	if (us < subs)
		return us;
	if (us > (1ULL << 30))
		us = 1ULL << 30;
	b = log2_bucket(us, 31);
	idx = (b - sub_bits + 1) * subs + ((us >> ((b - sub_bits) & 31)) & (subs - 1));
	return idx < buckets - 1 ? idx : buckets - 1;
}

#endif /* SKBTRACE_AGGREGATE_BPF_H */
