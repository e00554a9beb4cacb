// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's xdp-drop-veth fault and its xdp-pass control: an XDP program on
 * the receiving veth that drops a share of the TCP frames it sees, one in
 * drop_one_in at random (0: passes every frame, the healthy control). Set
 * before loading, as a program a user installed would have it compiled in.
 */
#include "../include/vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct xdp_md {
	__u32 data;
	__u32 data_end;
};

struct ethhdr_wire {
	__u8 dst[6];
	__u8 src[6];
	__be16 proto;
};

enum { XDP_DROP = 1, XDP_PASS = 2 };

#define ETH_P_IP 0x0800
#define IPPROTO_TCP 6

volatile const __u32 drop_one_in = 0;

SEC("xdp")
int lab_xdp_drop(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr_wire *eth = data;
	struct iphdr_wire *ip = (void *)(eth + 1);

	if ((void *)(ip + 1) > end || eth->proto != bpf_htons(ETH_P_IP) || ip->protocol != IPPROTO_TCP)
		return XDP_PASS;
	if (drop_one_in && bpf_get_prandom_u32() % drop_one_in == 0)
		return XDP_DROP;
	return XDP_PASS;
}
