// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's tc-bpf-drop fault and its tc-bpf-pass control: a tc BPF
 * classifier (direct action) on a device that drops a share of the TCP
 * packets it sees, one in drop_one_in at random (0: passes every packet,
 * the healthy control). Set before loading, as a program a user installed
 * would have it compiled in.
 */
#include "../include/vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The fields of struct __sk_buff this program reads; the verifier
 * rewrites their offsets into the kernel's sk_buff. */
struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
};

enum { TC_ACT_OK = 0, TC_ACT_SHOT = 2 };

#define ETH_P_IP 0x0800

volatile const __u32 drop_one_in = 0;

SEC("tc")
int lab_tc_drop(struct __sk_buff *skb)
{
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (drop_one_in && bpf_get_prandom_u32() % drop_one_in == 0)
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}
