// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Socket families: sock_io (socket call sizes per process, aggregated)
 * and sk_limit (a socket at its buffer limits). sock_send_length's program
 * serves tcp_sendlim too (tcp.bpf.c comes first).
 */
#include "aggregate.bpf.h"

/*
 * Allocated as processes appear (a preallocated per-CPU map costs its full
 * size times the CPUs); the recorder deletes the entries of processes that
 * exited, and a process that finds it full is counted lost.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 8192);
	__type(key, struct sock_io_key);
	__type(value, struct sock_io_stats);
} sock_io SEC(".maps");

#define EAGAIN 11

static __always_inline void count_sock_io(const struct sock *sk, int ret, __u32 dir)
{
	struct sock_io_key key = {.dir = dir};
	struct sock_io_stats *v;
	__u32 bucket;

	if (ret == -EAGAIN || !here_passes()) /* -EAGAIN: a non-blocking call that found nothing to read or no room */
		return;
	key.pid = bpf_get_current_pid_tgid() >> 32;

	if (filter_pid && key.pid != filter_pid)
		return;
	if (filter_netns || filter_port || filter_family) {
		struct sock_addrs a = {};

		if (!sock_passes(sk, &a))
			return;
	}
	v = bpf_map_lookup_elem(&sock_io, &key);
	if (!v) {
		struct sock_io_stats init = {};

		bpf_get_current_comm(init.comm, sizeof(init.comm));
		v = upsert(&sock_io, &key, &init, FAMILY_SOCK_IO);
		if (!v)
			return;
	}
	v->calls++;
	if (ret < 0) {
		v->errors++;
		return;
	}
	v->bytes += ret;
	bucket = log2_bucket(ret, SIZE_BUCKETS - 1);
	barrier_var(bucket); /* keep the bound check the verifier needs */
	if (bucket < SIZE_BUCKETS)
		v->hist[bucket]++;
}

/*
 * sock_send_length (6.3 and later) serves tcp_sendlim (a decision after each
 * write) and sock_io: one program, so each send runs one. These say which
 * parts run; sampling pauses sock_io's part here rather than detaching a
 * program tcp_sendlim needs all the time.
 */
const volatile bool enable_sendlim_write = false;
const volatile bool enable_sock_io_send = false;
__u32 sock_io_send_paused = 0;

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send, struct sock *sk, int ret, int flags)
{
	if (enable_sendlim_write)
		sendlim_between_acks(sk);
	if (enable_sock_io_send && !sock_io_send_paused)
		count_sock_io(sk, ret, SOCK_IO_SEND);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_io_recv, struct sock *sk, int ret, int flags)
{
	count_sock_io(sk, ret, SOCK_IO_RECV);
	return 0;
}

/*
 * Before 6.4 there are no sock_send/recv_length tracepoints. sock_sendmsg()
 * and sock_recvmsg() are inlined into the system calls there, so the
 * loader attaches these to the IPv4 and IPv6 socket calls every send and
 * receive of a TCP or UDP socket passes (write, send*, read, recv*; not
 * sendfile or splice), which return the same length.
 */
SEC("fexit/inet_sendmsg")
int BPF_PROG(sock_io_send_fexit, struct socket *sock, struct msghdr *msg, __u64 size, int ret)
{
	count_sock_io(sock->sk, ret, SOCK_IO_SEND);
	return 0;
}

SEC("fexit/inet_recvmsg")
int BPF_PROG(sock_io_recv_fexit, struct socket *sock, struct msghdr *msg, __u64 size, int flags, int ret)
{
	count_sock_io(sock->sk, ret, SOCK_IO_RECV);
	return 0;
}

/*
 * Not an LRU: an eviction would drop counts unreported and restart them.
 * The recorder deletes entries idle for an interval; a socket that finds
 * the map full is counted lost.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct sk_limit_key);
	__type(value, struct sk_limit_stats);
} sk_limits SEC(".maps");

static __always_inline void count_sk_limit(const struct sock *sk, __u32 kind)
{
	struct sk_limit_key key = {.sock = (__u64)sk, .kind = kind};
	struct sk_limit_stats *v;

	if (!here_passes())
		return;
	v = bpf_map_lookup_elem(&sk_limits, &key);
	if (!v) {
		struct sk_limit_stats init = {};

		if (!sock_passes(sk, &init.addrs))
			return;
		bpf_map_update_elem(&sk_limits, &key, &init, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&sk_limits, &key);
		if (!v) {
			count_full(FAMILY_SK_LIMIT);
			return;
		}
	}
	__sync_fetch_and_add(&v->cnt, 1);
}

SEC("tp_btf/sock_exceed_buf_limit")
int BPF_PROG(sk_limit_exceed, struct sock *sk, struct proto *prot, long allocated, int kind)
{
	count_sk_limit(sk, kind == 0 ? SK_LIMIT_SNDBUF : SK_LIMIT_RMEM);
	return 0;
}

SEC("tp_btf/sock_rcvqueue_full")
int BPF_PROG(sk_limit_rcvqueue, struct sock *sk, struct sk_buff *skb)
{
	count_sk_limit(sk, SK_LIMIT_RCVQUEUE_FULL);
	return 0;
}
