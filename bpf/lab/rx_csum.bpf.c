// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's nic-rx-csum-off fault: what state of checksum verification the
 * receiving NIC's driver hands GRO each packet in (skb->ip_summed), per
 * device. With receive checksumming on, the driver marks the TCP packets it
 * verified CHECKSUM_UNNECESSARY (or hands the sum, CHECKSUM_COMPLETE); off,
 * they arrive CHECKSUM_NONE and the stack sums every byte. Counted before
 * GRO, whose merged skbs all leave CHECKSUM_PARTIAL whatever came in.
 */
#include "../include/vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ip_summed is a bitfield: CO-RE reads it from wherever this kernel put it. */
struct sk_buff___csum {
	__u8 ip_summed : 2;
} __attribute__((preserve_access_index));

struct rx_csum_key {
	__u32 netns;
	__u32 ifindex;
};

/* Packets by ip_summed: CHECKSUM_NONE, _UNNECESSARY, _COMPLETE, _PARTIAL. */
struct rx_csum_counts {
	__u64 packets[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 256);
	__type(key, struct rx_csum_key);
	__type(value, struct rx_csum_counts);
} rx_csum SEC(".maps");

SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(count_rx_csum, const struct sk_buff *skb)
{
	struct net_device *dev = skb->dev;
	struct rx_csum_key key = {};
	struct rx_csum_counts zero = {}, *v;
	__u8 state;

	if (!dev)
		return 0;
	key.netns = dev->nd_net.net->ns.inum;
	key.ifindex = dev->ifindex;
	v = bpf_map_lookup_elem(&rx_csum, &key);
	if (!v) {
		bpf_map_update_elem(&rx_csum, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&rx_csum, &key);
		if (!v)
			return 0;
	}
	state = BPF_CORE_READ_BITFIELD_PROBED((struct sk_buff___csum *)skb, ip_summed);
	v->packets[state & 3]++;
	return 0;
}
