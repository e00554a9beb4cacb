// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's gro-blocked fault (seed 004): on the receiving veth, give every
 * VXLAN packet whose outer IPv4 header has DF=0 a random IP ID, as a device
 * that does not keep per-flow IDs would. GRO refuses to merge DF=0 packets
 * whose IDs do not increment, so the inner TCP arrives one segment per skb.
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

struct udphdr_wire {
	__be16 source;
	__be16 dest;
	__be16 len;
	__u16 check;
};

enum { XDP_PASS = 2 };

#define ETH_P_IP 0x0800
#define IP_DF 0x4000
#define IPPROTO_UDP 17
#define VXLAN_PORT 4789

SEC("xdp")
int scramble_outer_ipid(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr_wire *eth = data;
	struct iphdr_wire *ip = (void *)(eth + 1);
	struct udphdr_wire *udp = (void *)(ip + 1);

	if ((void *)(udp + 1) > end || eth->proto != bpf_htons(ETH_P_IP) || ip->version_ihl != 0x45 ||
	    ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(IP_DF)) || udp->dest != bpf_htons(VXLAN_PORT))
		return XDP_PASS;

	/* RFC 1624 incremental update: HC' = ~(~HC + ~m + m'), byte order independent. */
	__u16 old = ip->id, new = bpf_get_prandom_u32();
	__u32 sum = (__u16)~ip->check + (__u16)~old + new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	ip->id = new;
	ip->check = ~sum;
	return XDP_PASS;
}
