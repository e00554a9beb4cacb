// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tcp_stage: where a sender's byte spends its time, stage by stage. A
 * socket times one byte at a time, keyed by its sequence number (not the
 * skb, which GSO and clones change): the next byte a write copies into the
 * send queue, then the first skb that carries it at the device layer
 * (dev_queue_xmit), out of the qdisc, into the driver, and the ACK that
 * covers it. The four waits go into per-socket histograms the recorder
 * drains each interval; the next byte is taken at the next write after
 * the ACK, or after a second if the byte was lost on the way.
 */
#include "aggregate.bpf.h"

/* Never read: gives the event a BTF entry, from which its Go type is generated. */
const struct tcp_stage_event *_tcp_stage_event __attribute__((unused));
const enum tcp_stage *_tcp_stage __attribute__((unused));

enum stage_point {
	POINT_NONE = 0,
	POINT_ACCEPTED,
	POINT_QUEUED,
	POINT_DEQUEUED,
	POINT_DRIVER,
};

struct stage_sample {
	__u32 seq;   /* the byte timed */
	__u32 point; /* enum stage_point: the last it passed */
	__u64 accepted_ns, queued_ns, dequeued_ns, driver_ns;
	struct sock_addrs addrs;
};

SOCK_STATE(stage_samples, struct stage_sample)

/*
 * One value per socket, not per CPU: a value is 6 KB, and a socket adds
 * to it once a round trip, from whichever CPU its ACK arrives on.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); /* struct sock * */
	__type(value, struct tcp_stage_stats);
} tcp_stages SEC(".maps");

/* A new socket's values: too large for the stack. */
const struct tcp_stage_stats tcp_stage_zero = {};

/* A byte not acked this long after its write was lost, or its socket stalled: time another. */
#define STAGE_ABANDON_NS 1000000000ULL

static __always_inline void stage_add(struct stage_hist *h, __u64 ns)
{
	__u32 idx = delay_bucket(ns / 1000, 3, STAGE_BUCKETS);

	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum_ns, ns);
	barrier_var(idx); /* keeps the bound check below where the verifier sees it */
	if (idx < STAGE_BUCKETS)
		__sync_fetch_and_add(&h->hist[idx], 1);
}

/* The next byte a write copies: tp->write_seq. */
static __always_inline void stage_accept(struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct stage_sample *s;
	__u64 now = bpf_ktime_get_ns();
	__u32 seq;

	if (!tp)
		return;
	seq = tp->write_seq;
	s = stage_samples_get(sk, false);
	if (s && s->point == POINT_ACCEPTED && s->seq == seq) {
		s->accepted_ns = now; /* the write waited for memory: the byte is copied only now */
		return;
	}
	if (s && s->point != POINT_NONE && now - s->accepted_ns < STAGE_ABANDON_NS)
		return;
	if (!s) {
		struct sock_addrs a = {};

		if (!here_passes() || !sock_passes(sk, &a))
			return;
		s = stage_samples_get(sk, true);
		if (!s)
			return;
		s->addrs = a;
	}
	s->seq = seq;
	s->point = POINT_ACCEPTED;
	s->accepted_ns = now;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(stage_accept_tp, struct sock *sk)
{
	stage_accept(sk);
	return 0;
}

/* Where the tracepoint is missing (6.12 and before): each call, the first copy of a write. */
SEC("fentry/tcp_sendmsg_locked")
int BPF_PROG(stage_accept_fentry, struct sock *sk)
{
	stage_accept(sk);
	return 0;
}

/* Whether skb carries the sample's byte: its TCP payload covers seq. */
static __always_inline bool carries(const struct sk_buff *skb, __u32 seq)
{
	unsigned char *head = skb->head;
	struct tcphdr_wire th;
	int payload;

	if (bpf_probe_read_kernel(&th, sizeof(th), head + skb->transport_header))
		return false;
	payload = skb->len - (skb->transport_header - (skb->data - head)) - (th.doff_res >> 4) * 4;
	return payload > 0 && seq - __builtin_bswap32(th.seq) < (__u32)payload;
}

/* The sample of skb's socket when it waits for the point after from. */
static __always_inline struct stage_sample *waiting(const struct sk_buff *skb, __u32 from, __u32 to)
{
	struct sock *sk = skb->sk;
	struct stage_sample *s;

	if (!sk)
		return NULL;
	s = stage_samples_get(sk, false);
	if (!s || s->point < from || s->point > to || !carries(skb, s->seq))
		return NULL;
	return s;
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(stage_queue, struct sk_buff *skb)
{
	struct stage_sample *s = waiting(skb, POINT_ACCEPTED, POINT_ACCEPTED);

	if (s) {
		s->queued_ns = bpf_ktime_get_ns();
		s->point = POINT_QUEUED;
	}
	return 0;
}

/*
 * A bulk dequeue passes its first skb, the rest chained on skb->next. The
 * chained ones are untrusted pointers, whose sockets storage lookups
 * refuse: the first skb's socket's byte is looked for in all of them (a
 * bulk is mostly one flow's).
 */
#define STAGE_BULK 8

SEC("tp_btf/qdisc_dequeue")
int BPF_PROG(stage_dequeue, struct Qdisc *q, const struct netdev_queue *txq, int packets, struct sk_buff *skb)
{
	struct stage_sample *s;
	struct sock *sk;

	if (!skb || !(sk = skb->sk))
		return 0;
	s = stage_samples_get(sk, false);
	if (!s || s->point != POINT_QUEUED)
		return 0;
	for (int i = 0; i < STAGE_BULK && skb; i++, skb = skb->next) {
		if (skb->sk == sk && carries(skb, s->seq)) {
			s->dequeued_ns = bpf_ktime_get_ns();
			s->point = POINT_DEQUEUED;
			break;
		}
	}
	return 0;
}

SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(stage_driver, struct sk_buff *skb)
{
	struct stage_sample *s = waiting(skb, POINT_QUEUED, POINT_DEQUEUED);

	if (!s)
		return 0;
	s->driver_ns = bpf_ktime_get_ns();
	if (s->point == POINT_QUEUED) /* the qdisc was bypassed, or is noqueue */
		s->dequeued_ns = s->queued_ns;
	s->point = POINT_DRIVER;
	return 0;
}

/* An incoming segment whose ACK covers the byte ends its timing. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(stage_ack, struct sock *sk, const struct sk_buff *skb)
{
	struct tcp_stage_stats *v;
	struct stage_sample *s;
	struct tcphdr_wire th;
	__u64 key = (__u64)sk, now;

	s = stage_samples_get(sk, false);
	if (!s || s->point != POINT_DRIVER)
		return 0;
	if (bpf_probe_read_kernel(&th, sizeof(th), skb->head + skb->transport_header))
		return 0;
	if ((__s32)(__builtin_bswap32(th.ack_seq) - s->seq) <= 0)
		return 0;
	now = bpf_ktime_get_ns();
	s->point = POINT_NONE;
	v = bpf_map_lookup_elem(&tcp_stages, &key);
	if (!v) {
		v = upsert(&tcp_stages, &key, &tcp_stage_zero, FAMILY_TCP_STAGE);
		if (!v)
			return 0;
		v->addrs = s->addrs;
	}
	stage_add(&v->stage[STAGE_SEND_QUEUE], s->queued_ns - s->accepted_ns);
	stage_add(&v->stage[STAGE_QDISC], s->dequeued_ns - s->queued_ns);
	stage_add(&v->stage[STAGE_DRIVER], s->driver_ns - s->dequeued_ns);
	stage_add(&v->stage[STAGE_ACK], now - s->driver_ns);
	return 0;
}
