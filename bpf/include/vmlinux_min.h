/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types skbtrace reads, declared with preserve_access_index so
 * that every field access is relocated (CO-RE) against the running kernel's
 * BTF at load time. Only names and types matter here, never offsets, which
 * keeps the build independent of the build machine's kernel.
 */
#ifndef __VMLINUX_MIN_H__
#define __VMLINUX_MIN_H__

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LRU_PERCPU_HASH = 10,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_SK_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct in6_addr {
	union {
		__u8 u6_addr8[16];
		__be16 u6_addr16[8];
		__be32 u6_addr32[4];
	} in6_u;
};

struct ns_common {
	unsigned int inum;
};

struct net {
	struct ns_common ns;
};

typedef struct {
	struct net *net;
} possible_net_t;

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	possible_net_t skc_net;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
	unsigned long skc_flags; /* the kernel's sk_flags */
};

struct sock;

struct socket {
	unsigned long flags;
	struct sock *sk;
};

struct msghdr;

typedef struct {
	int counter;
} atomic_t;

struct sock {
	struct sock_common __sk_common;
	struct {
		atomic_t rmem_alloc;
	} sk_backlog;
	int sk_rcvbuf;
	struct socket *sk_socket;
	int sk_wmem_queued;
	int sk_sndbuf;
	u32 sk_pacing_status;
	unsigned long sk_pacing_rate;
	u8 sk_pacing_shift;
	u16 sk_protocol;
	u16 sk_gso_max_segs;
	unsigned long sk_tsq_flags;
	long sk_lingertime;
	int sk_err;
};

enum sock_flags {
	SOCK_LINGER = 4,
};

/* The socket's own port stays here after the port is released (skc_num is cleared). */
struct inet_sock {
	__be16 inet_sport;
};

struct inet_connection_sock {
	__u32 icsk_rto;
	__u8 icsk_ca_state : 5;
	__u8 icsk_pending;
	__u8 icsk_backoff;
	__u8 icsk_probes_out;
};

struct minmax_sample {
	u32 t;
	u32 v;
};

struct minmax {
	struct minmax_sample s[3];
};

struct hrtimer {
	u8 state; /* HRTIMER_STATE_ENQUEUED is bit 0 */
};

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	struct hrtimer pacing_timer;
	u32 rttvar_us;
	u32 mdev_us;
	struct minmax rtt_min;
	u32 rcv_wnd;
	u64 bytes_acked;
	u64 bytes_received;
	u32 rate_delivered;
	u32 rate_interval_us;
	u32 window_clamp;
	struct {
		u32 space;
	} rcvq_space;
	u32 snd_cwnd;
	u32 snd_ssthresh;
	u32 packets_out;
	u32 sacked_out;
	u32 lost_out;
	u32 retrans_out;
	u32 write_seq;
	u32 rcv_nxt;
	u32 copied_seq;
	u32 snd_nxt;
	u32 snd_una;
	u32 snd_sml;
	u32 snd_wnd;
	u32 mss_cache;
	u32 data_segs_out;
	u32 srtt_us;
	u64 tcp_wstamp_ns;
	u8 nonagle : 4;
	u32 pushed_seq;
	u32 chrono_start;
	u32 chrono_stat[3];
	u8 chrono_type : 2; /* a plain u8 from 6.17: BPF_CORE_READ_BITFIELD reads either */
};

/* Kernels before 6.8 keep the TSQ flags in tcp_sock. */
struct tcp_sock___pre68 {
	unsigned long tsq_flags;
};

struct net_device {
	char name[16];
	int ifindex;
	possible_net_t nd_net;
};

struct sk_buff {
	struct sk_buff *next; /* in an anonymous union: CO-RE finds it there */
	unsigned int len;
	struct net_device *dev;
	struct sock *sk;
	unsigned char *head;
	unsigned char *data;
	unsigned int tail; /* an offset from head, as end: sk_buff_data_t on 64-bit kernels */
	unsigned int end;
	__u16 network_header;
	__u16 transport_header;
	__be16 protocol;
};

struct skb_shared_info {
	unsigned short gso_size;
	unsigned short gso_segs;
};

struct napi_struct {
	struct net_device *dev;
	u32 napi_id;
};

struct netdev_queue {
	struct net_device *dev;
};

struct Qdisc_ops {
	char id[16];
};

struct qdisc_skb_head {
	__u32 qlen;
};

struct gnet_stats_queue {
	__u32 qlen;
	__u32 backlog;
	__u32 drops;
	__u32 requeues;
	__u32 overlimits;
};

struct Qdisc {
	const struct Qdisc_ops *ops;
	u32 handle;
	u32 parent;
	struct netdev_queue *dev_queue;
	struct qdisc_skb_head q;
	struct gnet_stats_queue qstats;
};

struct proto;

struct task_struct {
	void *stack;
};

struct pt_regs {
	unsigned long sp;
};

struct seq_file;
struct bpf_map;

struct bpf_iter_meta {
	struct seq_file *seq;
	u64 session_id;
	u64 seq_num;
};

struct bpf_iter__bpf_sk_storage_map {
	struct bpf_iter_meta *meta;
	struct bpf_map *map;
	struct sock *sk;
	void *value;
};

#pragma clang attribute pop

/* Packet headers are wire format: fixed layouts, never relocated. */
struct tcphdr_wire {
	__be16 source;
	__be16 dest;
	__be32 seq;
	__be32 ack_seq;
	__u8 doff_res; /* data offset in words, in the high nibble */
};

struct iphdr_wire {
	__u8 version_ihl;
	__u8 tos;
	__be16 tot_len;
	__be16 id;
	__be16 frag_off;
	__u8 ttl;
	__u8 protocol;
	__u16 check;
	__u8 saddr[4];
	__u8 daddr[4];
};

struct ipv6hdr_wire {
	__be32 vtc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[16];
	__u8 daddr[16];
};

/*
 * Tracepoint contexts are read at fixed offsets: the verifier only allows
 * constant offsets into them, and their layout (tracefs format file) is ABI.
 * For BPF, perf_trace_run_bpf_submit() overwrites the 8-byte common header
 * with a pointer to the caller's registers.
 */
struct trace_event_raw_inet_sock_set_state {
	struct pt_regs *regs;
	const void *skaddr;
	int oldstate;
	int newstate;
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u16 protocol;
	__u8 saddr[4];
	__u8 daddr[4];
	__u8 saddr_v6[16];
	__u8 daddr_v6[16];
};


#endif
