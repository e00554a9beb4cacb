/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TCP families beyond tcp_conn and tcp_sendlim; included by skbtrace.bpf.c. */

SOCK_STATE(rcvbuf_states, struct rcvbuf_state)
SOCK_STATE(retrans_runs, struct tcp_retrans_run)

/* tcp_retrans folds a socket's retransmits over at most this many jiffies. */
const volatile __u64 interval_jiffies = 1000;

static __always_inline void emit_cong(struct sock *sk, __u8 ca_state)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sock_addrs a = {};
	struct tcp_cong_event *e;

	/*
	 * tcp_disconnect() (a linger-0 close, connect(AF_UNSPEC)) resets a
	 * closed socket to Open after clearing its addresses and ports: no
	 * congestion state of a connection, and nothing left to name it by.
	 */
	if (!tp || sk->__sk_common.skc_state == TCP_CLOSE || !sock_passes(sk, &a))
		return;
	e = reserve_event(FAMILY_TCP_CONG, sizeof(*e), EVENT_TCP_CONG);
	if (!e)
		return;
	e->sock = (__u64)sk;
	e->addrs = a;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->snd_nxt = tp->snd_nxt;
	e->snd_una = tp->snd_una;
	e->rto_us = tp->inet_conn.icsk_rto * (1000000 / jiffies_per_sec);
	e->state = ca_state;
	__builtin_memset(e->_pad, 0, sizeof(e->_pad));
	submit_event(e);
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(tcp_cong, struct sock *sk, const __u8 ca_state)
{
	emit_cong(sk, ca_state);
	return 0;
}

/*
 * Before 5.19 there is no tracepoint, and tcp_set_ca_state() is inline. The
 * loader attaches this to the first function of the family's list that the
 * kernel has: the congestion control's state hook, called with the new
 * state before it is set (CUBIC's, the default: other algorithms' sockets
 * are not seen there).
 */
SEC("fentry/tcp_set_ca_state")
int BPF_PROG(tcp_cong_fentry, struct sock *sk, __u8 ca_state)
{
	emit_cong(sk, ca_state);
	return 0;
}

static __always_inline void emit_retrans(struct tcp_retrans_run *run)
{
	struct tcp_retrans_event *e = reserve_event(FAMILY_TCP_RETRANS, sizeof(*e), EVENT_TCP_RETRANS);

	if (!e)
		return;
	__builtin_memcpy((char *)e + sizeof(e->hdr), (char *)&run->ev + sizeof(e->hdr),
			 sizeof(*e) - sizeof(e->hdr));
	submit_event(e);
}

/*
 * Tracepoint arguments that came later: set by the loader from the kernel's
 * BTF prototype (btf_trace_*), so a kernel without one never sees its read.
 */
const volatile bool retrans_has_err = true;   /* 6.13 */
const volatile bool reset_has_reason = true;  /* 6.10 */
const volatile bool drop_has_reason = true;   /* 5.17 */

/* Counts segments as TcpRetransSegs does: only retransmits that went out. */
SEC("tp_btf/tcp_retransmit_skb")
int tcp_retrans(__u64 *ctx)
{
	struct sock *sk = (void *)ctx[0];
	const struct sk_buff *skb = (void *)ctx[1];
	struct tcp_retrans_run *run;
	__u64 jiffies = bpf_jiffies64();

	if (retrans_has_err && (int)ctx[2])
		return 0;
	run = retrans_runs_get(sk, true);
	if (!run)
		return 0;
	if (run->ev.skbs == 0) {
		if (!sock_passes(sk, &run->ev.addrs)) {
			run->ev.state = SENDLIM_IGNORED;
			run->ev.skbs = 1;
			return 0;
		}
		run->ev.hdr.type = EVENT_TCP_RETRANS;
		run->ev.sock = (__u64)sk;
		run->ev.begin_ns = bpf_ktime_get_boot_ns();
		run->begin_jiffies = jiffies;
	} else if (run->ev.state == SENDLIM_IGNORED) {
		return 0;
	} else if (jiffies - run->begin_jiffies >= interval_jiffies) {
		emit_retrans(run);
		run->ev.begin_ns = bpf_ktime_get_boot_ns();
		run->begin_jiffies = jiffies;
		run->ev.cnt = 0;
		run->ev.skbs = 0;
	}
	run->ev.cnt += skb_segs(skb);
	run->ev.skbs++;
	run->ev.state = sk->__sk_common.skc_state;
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_retrans_close, struct sock *sk)
{
	struct tcp_retrans_run *run = retrans_runs_get(sk, false);

	if (!run)
		return 0;
	if (run->ev.state != SENDLIM_IGNORED && run->ev.cnt)
		emit_retrans(run);
	retrans_runs_delete(sk);
	return 0;
}

SEC("iter/bpf_sk_storage_map")
int retrans_open_runs(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct tcp_retrans_run *run = ctx->value;

	if (!ctx->sk || !run || run->ev.state == SENDLIM_IGNORED || !run->ev.cnt)
		return 0;
	bpf_seq_write(ctx->meta->seq, run, sizeof(*run));
	return 0;
}

static __always_inline void emit_reset(const struct sock *sk, const struct sock_addrs *a, __u32 reason, __u8 dir,
				       __u8 path)
{
	struct tcp_reset_event *e = reserve_event(FAMILY_TCP_RESET, sizeof(*e), EVENT_TCP_RESET);

	if (!e)
		return;
	e->sock = (__u64)sk;
	e->addrs = *a;
	e->reason = reason;
	e->dir = dir;
	e->state = sk ? sk->__sk_common.skc_state : 0;
	e->path = path;
	e->_pad = 0;
	submit_event(e);
}

/*
 * tcp_reset() serves both the peer's RST and an abort on data (a segment
 * with data for a socket that closed its receiving side), and its
 * tracepoint cannot tell them apart. After an abort the receive path
 * answers the same segment with a reset, on the same CPU and at once: the
 * socket tcp_reset() last saw here marks that reset as the abort's.
 */
struct reset_seen {
	__u64 sock;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reset_seen);
} reset_received_here SEC(".maps");

#define ABORT_ANSWER_NS 10000000ULL /* the answer follows within microseconds; TCG emulation is slow */

static __always_inline bool answers_abort(const struct sock *sk)
{
	__u32 zero = 0;
	struct reset_seen *seen = bpf_map_lookup_elem(&reset_received_here, &zero);

	if (!seen || seen->sock != (__u64)sk || bpf_ktime_get_ns() - seen->ns > ABORT_ANSWER_NS)
		return false;
	seen->sock = 0;
	return true;
}

/* The path of a reset the kernel sends on its own, from what the socket holds then. */
static __always_inline __u8 active_reset_path(const struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	unsigned long linger = 1UL << bpf_core_enum_value(enum sock_flags, SOCK_LINGER);

	/* Close and disconnect set CLOSE before the reset; timers and ss -K do not. */
	if (sk->__sk_common.skc_state != TCP_CLOSE)
		return RESET_PATH_ABORT;
	/* Close drops unread data without moving copied_seq; one byte may be the FIN. */
	if (BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq) > 1)
		return RESET_PATH_CLOSE;
	if ((BPF_CORE_READ(sk, __sk_common.skc_flags) & linger) && !BPF_CORE_READ(sk, sk_lingertime))
		return RESET_PATH_LINGER0;
	return RESET_PATH_CLOSE;
}

static __always_inline void reset_sent(const struct sock *sk, const struct sk_buff *skb, int reason)
{
	struct sock_addrs a = {};
	__u8 path;

	if (skb) {
		/*
		 * A reset that answers a segment: its addresses are the
		 * segment's, reversed, whatever the socket still holds (a
		 * listener has no peer, a closed socket no local port).
		 */
		struct sock_addrs pkt = {};

		skb_addrs(skb, &pkt);
		a.family = pkt.family;
		__builtin_memcpy(a.saddr, pkt.daddr, 16);
		__builtin_memcpy(a.daddr, pkt.saddr, 16);
		a.sport = pkt.dport;
		a.dport = pkt.sport;
		if (sk)
			a.netns = sk->__sk_common.skc_net.net->ns.inum;
		else if (skb->dev)
			a.netns = skb->dev->nd_net.net->ns.inum;
		if (!sk)
			path = RESET_PATH_NO_SOCKET;
		else if (sk->__sk_common.skc_state == TCP_TIME_WAIT)
			path = RESET_PATH_TIMEWAIT;
		else if (answers_abort(sk))
			path = RESET_PATH_ABORT_ON_DATA;
		else
			path = RESET_PATH_SEGMENT;
	} else if (sk) {
		__u8 state = sk->__sk_common.skc_state;

		read_sock_addrs_btf(sk, &a);
		/* An active reset (close, abort): a full socket keeps its port in inet_sport. */
		if (state != TCP_TIME_WAIT && state != TCP_NEW_SYN_RECV)
			a.sport = __builtin_bswap16(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
		path = active_reset_path(sk);
	} else {
		return;
	}
	if (filter_match(&a))
		emit_reset(sk, &a, reason, RESET_SENT, path);
}

SEC("tp_btf/tcp_send_reset")
int tcp_reset_sent(__u64 *ctx)
{
	reset_sent((void *)ctx[0], (void *)ctx[1], reset_has_reason ? (int)ctx[2] : 0);
	return 0;
}

/*
 * Before 6.10 (when it gained its reason) tcp_send_reset fires only for
 * full sockets: not for a segment to a closed port, nor for timewait and
 * request sockets. There the loader attaches these to the functions that
 * send resets instead: tcp_v4_send_reset and tcp_v6_send_reset answer
 * segments, tcp_send_active_reset resets on close or abort.
 */
SEC("fentry/tcp_v4_send_reset")
int BPF_PROG(tcp_reset_sent_fentry, const struct sock *sk, const struct sk_buff *skb)
{
	reset_sent(sk, skb, 0);
	return 0;
}

SEC("fentry/tcp_send_active_reset")
int BPF_PROG(tcp_reset_active_fentry, const struct sock *sk)
{
	reset_sent(sk, NULL, 0);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_reset_received, struct sock *sk)
{
	struct sock_addrs a = {};
	__u32 zero = 0;
	struct reset_seen *seen = bpf_map_lookup_elem(&reset_received_here, &zero);
	__u8 state = sk->__sk_common.skc_state;

	/* Only a socket closing its sending side (FIN_WAIT1/2) aborts on data. */
	if (seen && (state == TCP_FIN_WAIT1 || state == TCP_FIN_WAIT2)) {
		seen->sock = (__u64)sk;
		seen->ns = bpf_ktime_get_ns();
	}
	if (sock_passes(sk, &a))
		emit_reset(sk, &a, 0, RESET_RECEIVED, RESET_PATH_PEER);
	return 0;
}

/* Reports a receive-buffer step when sk_rcvbuf changed since the socket's last report. */
static __always_inline void rcvbuf_step(struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct rcvbuf_state *st;
	struct tcp_rcvbuf_event *e;
	struct sock_addrs a = {};
	__u32 rcvbuf = sk->sk_rcvbuf;

	if (!tp)
		return;
	st = rcvbuf_states_get(sk, true);
	if (!st || st->rcvbuf == rcvbuf || !sock_passes(sk, &a))
		return;
	e = reserve_event(FAMILY_TCP_RCVBUF, sizeof(*e), EVENT_TCP_RCVBUF);
	if (!e)
		return;
	e->sock = (__u64)sk;
	e->addrs = a;
	e->rcvbuf = rcvbuf;
	e->old_rcvbuf = st->rcvbuf;
	e->rcv_space = tp->rcvq_space.space;
	e->window_clamp = tp->window_clamp;
	e->rcv_wnd = tp->rcv_wnd;
	e->rmem_alloc = sk->sk_backlog.rmem_alloc.counter;
	st->rcvbuf = rcvbuf;
	submit_event(e);
}

/* Fires only when autotuning may grow the buffer (kernels from 6.17). */
SEC("tp_btf/tcp_rcvbuf_grow")
int BPF_PROG(tcp_rcvbuf, struct sock *sk, int time)
{
	rcvbuf_step(sk);
	return 0;
}

/* Older kernels: autotuning runs at every read, about once an RTT per socket. */
SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(tcp_rcvbuf_adjust, struct sock *sk)
{
	rcvbuf_step(sk);
	return 0;
}

/* Socket storage goes with the socket; the hash that replaces it before 5.11 does not. */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_rcvbuf_close, struct sock *sk)
{
	if (!use_sk_storage)
		rcvbuf_states_delete(sk);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
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
			count_lost(FAMILY_SK_LIMIT);
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
