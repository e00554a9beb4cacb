// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * TCP families: tcp_conn, tcp_sendlim (why a sender is not sending more,
 * decided per ACK and folded in the kernel), tcp_cong, tcp_retrans,
 * tcp_reset, tcp_rcvbuf.
 */
#include "common.bpf.h"

/*
 * A classic tracepoint: its record already holds the addresses, so only the
 * namespace needs a read through the socket.
 */
SEC("tracepoint/sock/inet_sock_set_state")
int tcp_conn(struct trace_event_raw_inet_sock_set_state *ctx)
{
	struct trace_event_raw_inet_sock_set_state t;
	struct sock_addrs a = {};
	struct tcp_conn_event *e;

	/* One copy of the whole record: the verifier wants constant offsets into the context. */
	if (bpf_probe_read_kernel(&t, sizeof(t), ctx) || t.protocol != IPPROTO_TCP)
		return 0;
	a.family = t.family;
	a.sport = t.sport;
	a.dport = t.dport;
	if (a.family == AF_INET6) {
		__builtin_memcpy(a.saddr, t.saddr_v6, 16);
		__builtin_memcpy(a.daddr, t.daddr_v6, 16);
	} else {
		__builtin_memcpy(a.saddr, t.saddr, 4);
		__builtin_memcpy(a.daddr, t.daddr, 4);
	}
	a.netns = BPF_CORE_READ((const struct sock *)t.skaddr, __sk_common.skc_net.net, ns.inum);
	if (!filter_match(&a))
		return 0;

	e = reserve_event(FAMILY_TCP_CONN, sizeof(*e), EVENT_TCP_CONN);
	if (!e)
		return 0;
	e->sock = (__u64)t.skaddr;
	e->addrs = a;
	e->oldstate = t.oldstate;
	e->newstate = t.newstate;
	e->context = stack_context(t.regs);
	/* tcp_reset() and tcp_done_with_error() set the error before the socket closes. */
	e->err = t.newstate == TCP_CLOSE ? BPF_CORE_READ((const struct sock *)t.skaddr, sk_err) : 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	submit_event(e);
	return 0;
}

static __always_inline unsigned long tsq_flags(const struct sock *sk, const struct tcp_sock *tp)
{
	if (bpf_core_field_exists(sk->sk_tsq_flags))
		return sk->sk_tsq_flags;
	return ((const struct tcp_sock___pre68 *)tp)->tsq_flags;
}

/*
 * A sub-MSS tail held by a cork: TCP_CORK (nonagle's CORK bit), or a write
 * with MSG_MORE, which leaves the tail unmarked for push (tcp_push() sets
 * pushed_seq only without MSG_MORE) and is pushed only by the next write.
 */
static __always_inline bool cork_holds(const struct tcp_sock *tp, __u8 nonagle)
{
	return (nonagle & TCP_NAGLE_CORK) || (__s32)(tp->write_seq - tp->pushed_seq) > 0;
}

/* tcp_nagle_check() with tcp_minshall_check(): a sub-MSS tail waits for the ACK of a small segment. */
static __always_inline bool nagle_holds(const struct tcp_sock *tp, __u8 nonagle)
{
	__u32 sml = tp->snd_sml, una = tp->snd_una, nxt = tp->snd_nxt;

	return !nonagle && tp->packets_out && (__s32)(sml - una) > 0 && (__s32)(sml - nxt) <= 0;
}

/* tcp_tso_autosize(): a millisecond of the pacing rate, at least two segments. */
static __always_inline __u32 tso_goal_segs(const struct sock *sk, __u32 mss)
{
	__u64 bytes = sk->sk_pacing_rate >> sk->sk_pacing_shift;
	__u32 segs = mss ? bytes / mss : 0;
	__u32 max_segs = sk->sk_gso_max_segs;

	if (segs < 2)
		segs = 2;
	return segs < max_segs ? segs : max_segs;
}

/* The pacing timer holds the next departure for more than min_hold_ns. */
static __always_inline bool pacing_holds(const struct sock *sk, const struct tcp_sock *tp, __u64 min_hold_ns)
{
	__u64 departure, now;

	if (!sk->sk_pacing_status)
		return false;
	departure = tp->tcp_wstamp_ns;
	now = bpf_ktime_get_ns();
	return departure > now && departure - now > min_hold_ns;
}

/*
 * The order matters: a limit that stops data the application has queued
 * ranks before the question whether the application queued enough.
 */
static __always_inline __u8 classify(const struct sock *sk, const struct tcp_sock *tp, __u32 unsent,
				     __u32 in_flight, __u32 cwnd, __u32 mss, __u32 una, __u32 nxt,
				     __u32 snd_wnd)
{
	/* After an RTO the sender waits out the timer, then resends from snd_una. */
	if (tp->packets_out && BPF_CORE_READ_BITFIELD(&tp->inet_conn, icsk_ca_state) == TCP_CA_LOSS)
		return SENDLIM_RTO;
	if (unsent) {
		__u32 wnd_end = una + snd_wnd;
		__u32 wnd_room = (__s32)(wnd_end - nxt) > 0 ? wnd_end - nxt : 0;
		__u32 cwnd_room = in_flight < cwnd ? (cwnd - in_flight) * mss : 0;
		__u32 room = wnd_room < cwnd_room ? wnd_room : cwnd_room;
		__u32 tso_frame = tso_goal_segs(sk, mss) * mss;
		__u8 nonagle = BPF_CORE_READ_BITFIELD(tp, nonagle);
		bool held_tail;
		unsigned long tsq;

		if (in_flight >= cwnd)
			return SENDLIM_CWND;
		if (wnd_room < (unsent < mss ? unsent : mss))
			return SENDLIM_SWND;
		/*
		 * Only a partial tail waits: full segments go out corked or not.
		 * A held tail limits only when it leaves the pipe idle (less than
		 * an MSS outstanding: the Nagle x delayed-ACK stall). Behind a
		 * full pipe it costs nothing: the sender waits for more data, below.
		 */
		held_tail = unsent < mss && (cork_holds(tp, nonagle) || nagle_holds(tp, nonagle));
		if (held_tail && nxt - una < mss)
			return cork_holds(tp, nonagle) ? SENDLIM_CORK : SENDLIM_NAGLE;
		if (held_tail)
			goto nothing_sendable;
		tsq = tsq_flags(sk, tp);
		if (tsq & (1UL << TSQ_THROTTLED))
			return SENDLIM_TSQ;
		/*
		 * Pacing caps throughput only when the pacing rate is below
		 * cwnd/RTT, and then its holds add up to a real share of the RTT.
		 * Shorter holds (BBR spreading a TSO burst by microseconds) do
		 * not: count holds over RTT/8.
		 */
		if (pacing_holds(sk, tp, (__u64)(tp->srtt_us >> 3) * 1000 / 8))
			return SENDLIM_PACING;
		/*
		 * Nothing outstanding, nothing holding the data back, yet unsent,
		 * and the probe timer armed: tcp_write_xmit() tried, the transmit
		 * failed (a qdisc or device refused it), and the timer retries. A
		 * send that the pacing timer stopped arms the probe timer too, so
		 * that timer must not be queued, nor the transmit it queues
		 * (TSQ_QUEUED), nor the departure ahead.
		 */
		if (!tp->packets_out && tp->inet_conn.icsk_pending == ICSK_TIME_PROBE0 && !(tp->pacing_timer.state & 1) &&
		    !(tsq & (1UL << TSQ_QUEUED)) && !pacing_holds(sk, tp, 0))
			return SENDLIM_XMIT_FAIL;
		/*
		 * tcp_tso_should_defer() holds data back when the room left is
		 * less than a full frame (and a third of the window): it waits
		 * for the window that is short, so that window is the reason.
		 */
		if (room < unsent && room < tso_frame)
			return wnd_room < cwnd_room ? SENDLIM_SWND : SENDLIM_CWND;
		return SENDLIM_OK;
	}

nothing_sendable:;
	/*
	 * Nothing sendable: is the application blocked on the send buffer, or
	 * has it queued nothing more? A writer asleep on a full buffer is woken
	 * once the queue falls below two thirds of it (sk_stream_write_space()),
	 * so SOCK_NOSPACE, on a cache line softirq rarely touches, is read only
	 * while the queue is at least half the buffer.
	 */
	int queued = sk->sk_wmem_queued, sndbuf = sk->sk_sndbuf;

	if (queued >= sndbuf)
		return SENDLIM_SNDBUF;
	if (queued >= sndbuf >> 1) {
		struct socket *sock = sk->sk_socket;

		if (sock && (sock->flags & (1UL << SOCK_NOSPACE)))
			return SENDLIM_SNDBUF;
	}
	return SENDLIM_APP;
}

/* Emits a run that ended at end: now, or earlier, at the send that resumed after a stall. */
static __always_inline void emit_run(struct sendlim_run *run, __u64 end)
{
	struct tcp_sendlim_event *e;

	e = reserve_event(FAMILY_TCP_SENDLIM, sizeof(*e), EVENT_TCP_SENDLIM);
	if (!e)
		return;
	e->hdr.ts_ns = end;
	/* Copy the body after the header the reservation filled in. */
	__builtin_memcpy((char *)e + sizeof(e->hdr), (char *)&run->ev + sizeof(e->hdr),
			 sizeof(*e) - sizeof(e->hdr));
	submit_event(e);
}

/* Passes a socket through the filters, filling its addresses on the way. */
static __always_inline bool sock_passes(const struct sock *sk, struct sock_addrs *a)
{
	read_sock_addrs_btf(sk, a);
	return filter_match(a);
}

/* tcp_sendlim and tcp_rtt share the tcp_probe program; these say which run. */
const volatile bool enable_sendlim = false;
const volatile bool enable_rtt = false;

/* At most one tcp_rtt sample per socket per this many jiffies (--rtt-interval, rounded up). */
const volatile __u64 rtt_interval_jiffies = 10;

static __always_inline void rtt_sample(const struct sock *sk, const struct tcp_sock *tp, struct sendlim_run *run,
				       bool last)
{
	__u64 jiffies = bpf_jiffies64();
	struct tcp_rtt_event *e;
	__u32 interval_us, mss;

	/* Jiffies, not a clock read: this runs at every incoming segment. */
	if (!last && run->rtt_sample_jiffies && jiffies - run->rtt_sample_jiffies < rtt_interval_jiffies)
		return;
	run->rtt_sample_jiffies = jiffies;
	e = reserve_event(FAMILY_TCP_RTT, sizeof(*e), EVENT_TCP_RTT);
	if (!e)
		return;
	e->sock = (__u64)sk;
	e->addrs = run->ev.addrs;
	e->srtt_us = tp->srtt_us >> 3;
	e->rttvar_us = tp->mdev_us >> 2; /* what tcp_info and ss report: rttvar_us is floored at the minimum RTO */
	e->min_rtt_us = tp->rtt_min.s[0].v;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
	e->snd_wnd = tp->snd_wnd;
	e->rcv_wnd = tp->rcv_wnd;
	interval_us = tp->rate_interval_us;
	mss = tp->mss_cache;
	/* tcp_compute_delivery_rate(): delivered packets times MSS over the sample's interval. */
	e->delivery_rate = interval_us ? (__u64)tp->rate_delivered * mss * 1000000 / interval_us : 0;
	e->bytes_acked = tp->bytes_acked;
	e->bytes_received = tp->bytes_received;
	submit_event(e);
}

/*
 * tcp_get_info_chrono_stats(): busy, rwnd-limited and sndbuf-limited time,
 * the running period included, in microseconds as tcp_info reports them.
 */
static __always_inline void chrono_totals(const struct tcp_sock *tp, struct tcp_sendlim_event *ev)
{
	__u64 us_per_jiffy = 1000000 / jiffies_per_sec;
	__u32 stat[3] = {tp->chrono_stat[0], tp->chrono_stat[1], tp->chrono_stat[2]};
	__u8 type = BPF_CORE_READ_BITFIELD(tp, chrono_type);

	if (type >= 1 && type <= 3)
		stat[type - 1] += (__u32)bpf_jiffies64() - tp->chrono_start;
	ev->busy_us = ((__u64)stat[0] + stat[1] + stat[2]) * us_per_jiffy;
	ev->rwnd_limited_us = (__u64)stat[1] * us_per_jiffy;
	ev->sndbuf_limited_us = (__u64)stat[2] * us_per_jiffy;
}

/*
 * Between ACKs only a stall is worth a decision (one beginning, or one in
 * progress that ends), or a socket's first: data going out, or an
 * application with nothing more to send, is decided at the ACKs that follow
 * anyway, and deciding it at every write too would cut a bulk sender's runs
 * into pieces.
 */
static __always_inline bool stall_reason(__u8 reason)
{
	return reason == SENDLIM_SWND || reason == SENDLIM_CORK || reason == SENDLIM_NAGLE ||
	       reason == SENDLIM_XMIT_FAIL || reason == SENDLIM_RTO;
}

/*
 * The stalls that the next send of new data ends, as the kernel's own
 * accounting does (its rwnd-limited clock stops at the send after the window
 * opens): the window opening, the cork or Nagle release, the end of loss
 * recovery all happen inside an ACK's processing or a system call, after
 * the decision there, and their send is the first sign. Not xmit_fail: its
 * retries are such sends, whether the qdisc takes them or not.
 */
static __always_inline bool send_ends(__u8 reason)
{
	return reason == SENDLIM_SWND || reason == SENDLIM_CORK || reason == SENDLIM_NAGLE || reason == SENDLIM_RTO;
}

static __always_inline void sendlim_decide(struct sock *sk, struct tcp_sock *tp, struct sendlim_run *run,
					   bool between_acks)
{
	__u32 in_flight, unsent, cwnd, mss, segs_out;
	__u64 jiffies = bpf_jiffies64();
	__u8 reason, probes, backoff;

	if (!use_sk_storage)
		run->decided_ns = bpf_ktime_get_boot_ns();
	/*
	 * Fast path for an idle sender (every byte written is acknowledged),
	 * as a receiving socket is at each data segment: the decision can only
	 * be app, and continuing an app run changes nothing but the count.
	 */
	if (run->ev.reason == SENDLIM_APP && run->ev.cnt && tp->write_seq == tp->snd_una &&
	    jiffies - run->begin_jiffies < jiffies_per_sec) {
		run->ev.cnt++;
		return;
	}

	/* Plain loads: tp_btf hands over trusted BTF pointers, no probe-read helpers needed. */
	cwnd = tp->snd_cwnd;
	mss = tp->mss_cache;
	segs_out = tp->data_segs_out;
	in_flight = tp->packets_out - (tp->sacked_out + tp->lost_out) + tp->retrans_out;
	unsent = tp->write_seq - tp->snd_nxt;
	reason = classify(sk, tp, unsent, in_flight, cwnd, mss, tp->snd_una, tp->snd_nxt, tp->snd_wnd);
	/*
	 * A write ends a stall only one that lasted: in a window-limited stream
	 * every ACK is decided [swnd] before it opens the window, and the write
	 * that follows microseconds later would cut the run at each ACK. Two
	 * jiffies (8 ms at HZ 250) since the last decision tell a hold (a cork,
	 * a shut window) from that; a shorter one ends at the next ACK.
	 */
	if (between_acks && run->ev.cnt && !stall_reason(reason) &&
	    !(stall_reason(run->ev.reason) && jiffies - run->decided_jiffies >= 2))
		return;
	run->decided_jiffies = jiffies;

	if (run->ev.cnt == 0) {
		run->ev.begin_ns = bpf_ktime_get_boot_ns();
		run->ev.cnt = 1;
		run->ev.reason = reason;
		run->begin_jiffies = jiffies;
		run->last_segs_out = segs_out;
	} else if (run->ev.reason == reason && jiffies - run->begin_jiffies < jiffies_per_sec) {
		run->ev.sentpkts += segs_out - run->last_segs_out;
		run->last_segs_out = segs_out;
		run->ev.cnt++;
	} else {
		__u64 end = bpf_ktime_get_boot_ns();
		__u32 end_segs = segs_out;

		/* A stall that a send ended: the run ends there, and the next begins. */
		if (run->resume_ns && run->ev.reason != reason) {
			end = run->resume_ns;
			end_segs = run->resume_segs;
		}
		run->ev.sentpkts += end_segs - run->last_segs_out;
		emit_run(run, end);
		run->ev.begin_ns = end;
		run->begin_jiffies = jiffies;
		run->ev.cnt = 1;
		run->ev.sentpkts = segs_out - end_segs;
		run->ev.reason = reason;
		run->last_segs_out = segs_out;
	}
	/* Decided again: a send since then that did not end the stall is part of it. */
	run->resume_ns = 0;

	chrono_totals(tp, &run->ev);
	/* The most the run saw: an ACK that opens the window resets them. */
	probes = tp->inet_conn.icsk_probes_out;
	backoff = tp->inet_conn.icsk_backoff;
	if (run->ev.cnt == 1 || probes > run->ev.probes)
		run->ev.probes = probes;
	if (run->ev.cnt == 1 || backoff > run->ev.backoff)
		run->ev.backoff = backoff;
	run->ev.cwnd = cwnd;
	run->ev.ssthresh = tp->snd_ssthresh;
	run->ev.in_flight = in_flight;
	run->ev.snd_wnd = tp->snd_wnd;
	run->ev.mss = mss;
	run->ev.unsent = unsent;
	run->ev.wmem_queued = sk->sk_wmem_queued;
	run->ev.sndbuf = sk->sk_sndbuf;
}

/* The socket's run, created at its first decision; NULL for a socket the filters exclude. */
static __always_inline struct sendlim_run *sendlim_run_of(struct sock *sk)
{
	struct sendlim_run *run = sendlim_runs_get(sk, true);

	if (!run || run->ev.reason == SENDLIM_IGNORED)
		return NULL;
	if (!run->ev.hdr.type) {
		/* New storage, zeroed. Filters are checked once. */
		if (!sock_passes(sk, &run->ev.addrs)) {
			run->ev.reason = SENDLIM_IGNORED;
			return NULL;
		}
		run->ev.hdr.type = EVENT_TCP_SENDLIM;
		run->ev.sock = (__u64)sk;
	}
	return run;
}

/*
 * tcp_probe fires at the start of tcp_rcv_established(), before the incoming
 * segment is processed: the socket still shows the state the sender was in
 * while it waited for this ACK, which is what the decision describes. One
 * program serves tcp_sendlim and tcp_rtt, so the socket's state is looked up
 * once per segment.
 */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe, struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sendlim_run *run;

	if (!tp)
		return 0;
	run = sendlim_run_of(sk);
	if (!run)
		return 0;
	if (enable_rtt)
		rtt_sample(sk, tp, run, false);
	if (enable_sendlim)
		sendlim_decide(sk, tp, run, false);
	return 0;
}

/*
 * Decisions between ACKs. A stalled sender gets no ACKs, so the stall would
 * be charged to whatever held at the last one: the kernel also decides
 * after each write (what the push left unsent, and why) and at each
 * retransmission (timeouts included).
 */
static __always_inline void sendlim_between_acks(struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct sendlim_run *run;
	__u8 state;

	if (!tp)
		return;
	state = sk->__sk_common.skc_state;
	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT)
		return;
	run = sendlim_run_of(sk);
	if (run)
		sendlim_decide(sk, tp, run, true);
}

/* Where sock_send_length is missing: the return of tcp_sendmsg(). */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(sendlim_write_fexit, struct sock *sk, void *msg, __u64 size, int ret)
{
	sendlim_between_acks(sk);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int sendlim_retrans(__u64 *ctx)
{
	sendlim_between_acks((struct sock *)ctx[0]);
	return 0;
}

/*
 * Every skb handed to a device: the send that ends a stall (see send_ends())
 * is noted, and the run ends there if the next decision finds another
 * reason. A socket without a run, or in a run no send ends, costs a storage
 * lookup; only a stalled one reads the TCP header, to tell new data (its
 * sequence number is snd_nxt, which the kernel advances after the transmit)
 * from probes, retransmissions and pure ACKs.
 */
SEC("tp_btf/net_dev_queue")
int BPF_PROG(sendlim_xmit, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	struct sendlim_run *run;
	struct tcphdr_wire th;
	const struct tcp_sock *tp;
	unsigned char *head;
	__u32 mss;
	int payload;

	if (!sk)
		return 0;
	run = sendlim_runs_get(sk, false);
	if (!run || !run->ev.cnt || run->resume_ns || !send_ends(run->ev.reason))
		return 0;
	head = skb->head;
	if (bpf_probe_read_kernel(&th, sizeof(th), head + skb->transport_header))
		return 0;
	payload = skb->len - (skb->transport_header - (skb->data - head)) - (th.doff_res >> 4) * 4;
	/*
	 * Only TCP sockets have runs. skb->sk is an RCU pointer that the
	 * socket-cast helpers refuse (6.x), so the few fields are probe-read.
	 */
	tp = (const struct tcp_sock *)sk;
	if (payload <= 0 || __builtin_bswap32(th.seq) != BPF_CORE_READ(tp, snd_nxt))
		return 0;
	run->resume_ns = bpf_ktime_get_boot_ns();
	/* data_segs_out counts this skb already (tcp_transmit_skb(), before the transmit). */
	mss = BPF_CORE_READ(tp, mss_cache);
	run->resume_segs = BPF_CORE_READ(tp, data_segs_out) - (mss ? (payload + mss - 1) / mss : 1);
	return 0;
}

/* Ends a socket's run: now, or where a send ended its stall. */
static __always_inline void sendlim_end(struct tcp_sock *tp, struct sendlim_run *run)
{
	__u64 end = run->resume_ns ? run->resume_ns : bpf_ktime_get_boot_ns();
	__u32 segs = tp->data_segs_out;

	/* Not a conditional load: one instruction must not read both a map value and the socket. */
	barrier_var(segs);
	if (run->resume_ns)
		segs = run->resume_segs;

	/* The kernel's totals as the run ends, as tcp_info would say then. */
	chrono_totals(tp, &run->ev);
	run->ev.sentpkts += segs - run->last_segs_out;
	emit_run(run, end);
	run->ev.cnt = 0;
	run->resume_ns = 0;
}

/*
 * Leaving ESTABLISHED or CLOSE_WAIT (close(), shutdown(), a reset) ends the
 * socket's run: the family decides only in those states, and a run left
 * open would charge the closing or orphaned socket's time (FIN_WAIT1 with
 * unsent data can last minutes) to the reason it had before.
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sendlim_state, const struct sock *sk, int oldstate, int newstate)
{
	struct sendlim_run *run;
	struct tcp_sock *tp;

	if ((oldstate != TCP_ESTABLISHED && oldstate != TCP_CLOSE_WAIT) || newstate == TCP_CLOSE_WAIT)
		return 0;
	run = sendlim_runs_get((struct sock *)sk, false);
	if (!run || run->ev.reason == SENDLIM_IGNORED || !run->ev.cnt)
		return 0;
	tp = bpf_skc_to_tcp_sock((struct sock *)sk);
	if (tp)
		sendlim_end(tp, run);
	return 0;
}

/*
 * A closing socket ends its run, with the segments sent since its last
 * decision, and gets a last tcp_rtt sample, with the totals of its last ACK:
 * nothing else would report them. One program for both, since the state
 * they share is deleted here.
 */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(tcp_sendlim_close, struct sock *sk)
{
	struct sendlim_run *run = sendlim_runs_get(sk, false);
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);

	if (!run)
		return 0;
	if (tp && run->ev.reason != SENDLIM_IGNORED && run->ev.hdr.type) {
		if (enable_rtt)
			rtt_sample(sk, tp, run, true);
		/* Ended here only if no state change did (a socket destroyed without leaving ESTABLISHED). */
		if (enable_sendlim && run->ev.cnt)
			sendlim_end(tp, run);
	}
	sendlim_runs_delete(sk);
	return 0;
}

/*
 * Hands user space the runs still open when recording stops (the hash is
 * read directly), with the kernel's totals and the segments sent up to the
 * stop, or to the send that ended the run's stall; user space ends them at
 * resume_ns, else at the stop.
 */
SEC("iter/bpf_sk_storage_map")
int sendlim_open_runs(struct bpf_iter__bpf_sk_storage_map *ctx)
{
	struct sendlim_run *value = ctx->value, run;
	struct sock *sk = ctx->sk;
	struct tcp_sock *tp;

	if (!sk || !value || value->ev.reason == SENDLIM_IGNORED || !value->ev.cnt)
		return 0;
	run = *value;
	tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		__u32 segs = tp->data_segs_out;

		barrier_var(segs);
		if (run.resume_ns)
			segs = run.resume_segs;
		chrono_totals(tp, &run.ev);
		run.ev.sentpkts += segs - run.last_segs_out;
	}
	bpf_seq_write(ctx->meta->seq, &run, sizeof(run));
	return 0;
}

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
