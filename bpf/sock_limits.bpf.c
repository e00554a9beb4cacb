// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * skbtrace sock_limits: a BPF iterator over the TCP sockets of the network
 * namespace that reads it (the seq_file's, taken when the iterator is
 * opened), writing for each full socket the settings tcp_info does not
 * carry: the window clamp, the buffers and whether the application locked
 * them, the pacing cap, TCP_NOTSENT_LOWAT, Nagle/cork, the congestion
 * control, and the socket's inode (its owner is found by it in /proc).
 * iter/tcp and bpf_skc_to_tcp_sock() are 5.9's: every kernel skbtrace runs on.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define TCP_LISTEN 10

/*
 * What this program reads beyond vmlinux_min.h, as flavours (the ___sl
 * suffix) of the kernel's types: CO-RE matches them by name without it.
 */
#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct inode___sl {
	unsigned long i_ino;
};

struct file___sl {
	struct inode___sl *f_inode;
};

struct socket___sl {
	struct file___sl *file;
};

struct sock___sl {
	struct sock_common __sk_common;
	/* A 4-bit field before 5.16, a byte since: read with BPF_CORE_READ_BITFIELD. */
	u8 sk_userlocks : 4;
	int sk_rcvbuf;
	int sk_sndbuf;
	unsigned long sk_max_pacing_rate;
	struct socket___sl *sk_socket;
};

struct tcp_congestion_ops___sl {
	char name[16];
};

struct inet_connection_sock___sl {
	const struct tcp_congestion_ops___sl *icsk_ca_ops;
};

struct tcp_sock___sl {
	struct inet_connection_sock___sl inet_conn;
	u32 window_clamp;
	u32 rcv_ssthresh;
	u32 notsent_lowat;
	u8 scaling_ratio; /* 6.5 */
	u8 nonagle : 4;
};

struct bpf_iter__tcp___sl {
	struct bpf_iter_meta *meta;
	struct sock_common *sk_common;
	u32 uid;
};

#pragma clang attribute pop

/* One socket's settings, as user space reads them from the iterator. */
struct sock_limits_rec {
	__u8 family;
	__u8 state;
	__u8 userlocks;   /* SOCK_SNDBUF_LOCK 1, SOCK_RCVBUF_LOCK 2 */
	__u8 nonagle;     /* TCP_NAGLE_OFF 1, TCP_NAGLE_CORK 2, TCP_NAGLE_PUSH 4 */
	__u8 scaling_ratio; /* 0 before 6.5 */
	__u8 _pad[3];
	__u16 sport;      /* host order */
	__u16 dport;      /* host order */
	__u32 window_clamp;
	__u32 rcv_ssthresh;
	__u32 notsent_lowat; /* 0: the namespace's net.ipv4.tcp_notsent_lowat */
	__s32 rcvbuf;
	__s32 sndbuf;
	__u32 uid;
	__u64 max_pacing_rate; /* bytes a second; ~0: none */
	__u64 ino;
	__u8 saddr[16];
	__u8 daddr[16];
	char ca[16];
};

const struct sock_limits_rec *_sock_limits_rec __attribute__((unused));

SEC("iter/tcp")
int sock_limits(struct bpf_iter__tcp___sl *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct sock_limits_rec r = {};
	struct tcp_sock___sl *tp;
	struct sock___sl *sk;

	if (!skc)
		return 0;
	/* Only full sockets: request and time-wait ones have no settings. */
	tp = (struct tcp_sock___sl *)bpf_skc_to_tcp_sock(skc);
	if (!tp)
		return 0;
	sk = (struct sock___sl *)tp;
	r.state = BPF_CORE_READ(skc, skc_state);
	if (r.state == TCP_LISTEN)
		return 0;
	r.family = BPF_CORE_READ(skc, skc_family);
	r.sport = BPF_CORE_READ(skc, skc_num);
	r.dport = __builtin_bswap16(BPF_CORE_READ(skc, skc_dport));
	if (r.family == AF_INET6) {
		BPF_CORE_READ_INTO(&r.saddr, skc, skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&r.daddr, skc, skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)r.saddr, skc, skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)r.daddr, skc, skc_daddr);
	}
	r.userlocks = BPF_CORE_READ_BITFIELD_PROBED(sk, sk_userlocks);
	r.rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	r.sndbuf = BPF_CORE_READ(sk, sk_sndbuf);
	r.max_pacing_rate = BPF_CORE_READ(sk, sk_max_pacing_rate);
	r.ino = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
	r.window_clamp = BPF_CORE_READ(tp, window_clamp);
	r.rcv_ssthresh = BPF_CORE_READ(tp, rcv_ssthresh);
	r.notsent_lowat = BPF_CORE_READ(tp, notsent_lowat);
	if (bpf_core_field_exists(tp->scaling_ratio))
		r.scaling_ratio = BPF_CORE_READ(tp, scaling_ratio);
	r.nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	BPF_CORE_READ_STR_INTO(&r.ca, tp, inet_conn.icsk_ca_ops, name);
	r.uid = ctx->uid;
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}
