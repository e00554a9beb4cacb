// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tcp_stage: where a byte spends its time, stage by stage, on both ends.
 * A socket times one byte at a time in each direction, keyed by its
 * sequence number (not the skb, which GSO, GRO and clones change).
 *
 * Sending: the next byte a write copies into the send queue, then the first
 * skb that carries it at the device layer (dev_queue_xmit), out of the
 * qdisc, into the driver, and the ACK that covers it. The next byte is
 * taken at the next write after the ACK, or STAGE_ABANDON_NS after the
 * last if that never came (a socket that stalled or closed).
 *
 * Receiving: a data segment arms the socket's flow for the next one; the
 * driver's hand-off of the first packet at or after it (netif_rx, GRO,
 * netif_receive_skb) stamps its first byte, found by the packet's addresses
 * in a small map; TCP's receive (tcp_probe) of the skb that carries it, and
 * the reader's copy past it (tcp_rcv_space_adjust), end its two stages.
 *
 * The waits go into per-socket histograms the recorder drains each interval.
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

enum rx_point {
	RX_NONE = 0,
	RX_ARMED, /* the flow's next packet is wanted at the driver */
	RX_TCP,   /* TCP received the byte: waiting for the reader */
};

struct stage_sample {
	__u32 seq;   /* the byte sent that is timed */
	__u32 point; /* enum stage_point: the last it passed */
	__u64 accepted_ns, queued_ns, dequeued_ns, driver_ns;
	__u32 rx_seq;   /* the byte received that is timed */
	__u32 rx_point; /* enum rx_point */
	__u64 rx_armed_ns, rx_arrived_ns, rx_tcp_ns;
	__u64 born_ns; /* names the socket's life in tcp_stages */
	struct sock_addrs addrs;
};

SOCK_STATE(stage_samples, struct stage_sample)

/*
 * One value per socket life, not per CPU: a value is 9 KB, and a socket
 * adds to it once a round trip, from whichever CPU its ACK arrives on.
 * Allocated as sockets are timed, not up front. Not an LRU: an eviction
 * would drop samples unreported and restart the socket's totals. The
 * recorder deletes an entry once it stayed unchanged for an interval (a
 * closed socket's, after its last samples were reported); a sample that
 * finds the map full is counted lost.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, struct tcp_stage_key);
	__type(value, struct tcp_stage_stats);
} tcp_stages SEC(".maps");

/* A received flow as its packets name it: the receiving socket's view. */
struct rx_flow {
	__u8 local[16]; /* IPv4 in the first 4 bytes */
	__u8 remote[16];
	__u16 local_port, remote_port;
	__u32 netns;
};

struct rx_wanted {
	__u32 seq;   /* wanted: the first packet at or after it; once arrived, its first byte */
	__u32 _pad;
	__u64 arrived_ns; /* 0 until the driver handed the packet over */
};

/* Flows armed for their next packet; the entry goes when TCP takes it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct rx_flow);
	__type(value, struct rx_wanted);
} rx_wanted SEC(".maps");

/*
 * Sampled, bytes start only in the windows (tcp_stage_paused is set
 * outside them), and the recorder leaves the hooks attached after a window
 * until no byte is under way: each is followed to its end. A socket whose
 * byte took STAGE_CHAIN_NS or more starts its next at that byte's end,
 * window or not: a byte behind a deep queue takes hundreds of
 * milliseconds, and a window would start one a second; such a flow is
 * slow, and its hooks stay attached while it runs. The counts of bytes
 * under way (tx_under_way sent, rx_under_way received and taken by TCP,
 * rx_armed flows wanted at the driver or stamped there) let the hooks
 * return before a header read or socket lookup while there is none, and
 * the recorder detach them. A socket that leaves ESTABLISHED gives its
 * bytes up.
 */
__u32 tcp_stage_paused = 0;
__s32 tx_under_way, rx_armed, rx_under_way;
#define STAGE_CHAIN_NS 10000000ULL

/*
 * When a flow was last armed (bpf_ktime_get_ns, CLOCK_MONOTONIC): the
 * driver hooks read packets only while one was lately, so a flow armed and
 * then idle does not have every other packet looked up; its arming goes
 * stale and is renewed when TCP next gets its data. The recorder reads it
 * too, to keep the hooks while an arming is fresh.
 */
__u64 rx_armed_ns;
#define STAGE_ARM_FRESH_NS 100000000ULL

static __always_inline bool start_due(void)
{
	return !tcp_stage_paused;
}

static __always_inline bool armed_lately(void)
{
	return rx_armed > 0 && bpf_ktime_get_ns() - rx_armed_ns <= STAGE_ARM_FRESH_NS;
}

/* A new socket's values: too large for the stack. */
const struct tcp_stage_stats tcp_stage_zero = {};

/*
 * A byte not acked (or read) this long after it began: its socket stalled
 * or closed, time another. Seconds: a send queue behind a shaper holds
 * bytes longer than a second.
 */
#define STAGE_ABANDON_NS 5000000000ULL

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

	if (tx_under_way <= 0 && !start_due())
		return;
	if (!tp)
		return;
	seq = tp->write_seq;
	s = stage_samples_get(sk, false);
	if (s && s->point == POINT_ACCEPTED && s->seq == seq) {
		s->accepted_ns = now; /* the write waited for memory: the byte is copied only now */
		return;
	}
	/*
	 * Under way until its ACK, or until the byte is acknowledged without
	 * the ACK seen to cover it (a hook that missed its skb): the ACK's
	 * tcp_probe runs before snd_una moves, and this runs under the
	 * socket's lock.
	 */
	if (s && s->point != POINT_NONE) {
		if (now - s->accepted_ns < STAGE_ABANDON_NS && (__s32)(tp->snd_una - s->seq) <= 0)
			return;
		s->point = POINT_NONE;
		__sync_fetch_and_add(&tx_under_way, -1);
	}
	if (!start_due())
		return;
	if (!s) {
		struct sock_addrs a = {};

		if (!here_passes() || !sock_passes(sk, &a))
			return;
		s = stage_samples_get(sk, true);
		if (!s) {
			count_full(FAMILY_TCP_STAGE);
			return;
		}
		s->addrs = a;
		s->born_ns = bpf_ktime_get_ns();
	}
	__sync_fetch_and_add(&tx_under_way, 1);
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

	if (tx_under_way <= 0 || !sk)
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

	if (tx_under_way <= 0 || !skb || !(sk = skb->sk))
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

/* The socket life's histograms; a sample that finds the map full is counted lost (upsert). */
static __always_inline struct tcp_stage_stats *stage_stats(const struct sock *sk, const struct stage_sample *s)
{
	struct tcp_stage_key key = {.sock = (__u64)sk, .born_ns = s->born_ns};
	struct tcp_stage_stats *v = bpf_map_lookup_elem(&tcp_stages, &key);

	if (v)
		return v;
	v = upsert(&tcp_stages, &key, &tcp_stage_zero, FAMILY_TCP_STAGE);
	if (v)
		v->addrs = s->addrs;
	return v;
}

/* An incoming segment whose ACK covers the sent byte ends its timing. */
static __always_inline void stage_ack(const struct sock *sk, const struct tcp_sock *tp, struct stage_sample *s,
				      const struct tcphdr_wire *th)
{
	struct tcp_stage_stats *v;
	__u64 now;

	if (s->point != POINT_DRIVER || (__s32)(__builtin_bswap32(th->ack_seq) - s->seq) <= 0)
		return;
	now = bpf_ktime_get_ns();
	v = stage_stats(sk, s);
	if (v) {
		stage_add(&v->stage[STAGE_SEND_QUEUE], s->queued_ns - s->accepted_ns);
		stage_add(&v->stage[STAGE_QDISC], s->dequeued_ns - s->queued_ns);
		stage_add(&v->stage[STAGE_DRIVER], s->driver_ns - s->dequeued_ns);
		stage_add(&v->stage[STAGE_ACK], now - s->driver_ns);
	}
	if (!start_due() && now - s->accepted_ns >= STAGE_CHAIN_NS && tp) {
		/*
		 * The next byte a write copies, from now: a writer held by a
		 * full buffer copies it as this ACK frees room, and a later
		 * copy moves the time (stage_accept).
		 */
		s->seq = tp->write_seq;
		s->point = POINT_ACCEPTED;
		s->accepted_ns = now;
		return;
	}
	s->point = POINT_NONE;
	__sync_fetch_and_add(&tx_under_way, -1);
}

/* An address as an IPv4 packet shows it: a dual-stack socket keeps it IPv4-mapped (::ffff:a.b.c.d). */
static __always_inline void rx_addr(__u8 *to, const __u8 *from)
{
	__u64 lo, hi;

	__builtin_memcpy(&lo, from, 8);
	__builtin_memcpy(&hi, from + 8, 8);
	if (lo == 0 && (__u32)hi == 0xffff0000) { /* bytes 8-11: 00 00 ff ff, little-endian */
		__builtin_memcpy(to, from + 12, 4);
		return;
	}
	__builtin_memcpy(to, from, 16);
}

static __always_inline void rx_flow_of(const struct stage_sample *s, struct rx_flow *k)
{
	rx_addr(k->local, s->addrs.saddr);
	rx_addr(k->remote, s->addrs.daddr);
	k->local_port = s->addrs.sport;
	k->remote_port = s->addrs.dport;
	k->netns = s->addrs.netns;
}

/* Wants the flow's first packet at or after seq at the driver. */
static __always_inline void rx_arm(struct stage_sample *s, __u32 seq, __u64 now)
{
	struct rx_wanted w = {.seq = seq};
	struct rx_flow k = {};

	rx_flow_of(s, &k);
	if (bpf_map_update_elem(&rx_wanted, &k, &w, BPF_ANY))
		return;
	if (s->rx_point != RX_ARMED)
		__sync_fetch_and_add(&rx_armed, 1);
	s->rx_point = RX_ARMED;
	s->rx_armed_ns = now;
	rx_armed_ns = now;
}

/* Gives up the socket's received byte, wherever it is. */
static __always_inline void rx_give_up(struct stage_sample *s)
{
	struct rx_flow k = {};

	if (s->rx_point == RX_ARMED) {
		rx_flow_of(s, &k);
		bpf_map_delete_elem(&rx_wanted, &k);
		__sync_fetch_and_add(&rx_armed, -1);
	} else if (s->rx_point == RX_TCP) {
		__sync_fetch_and_add(&rx_under_way, -1);
	}
	s->rx_point = RX_NONE;
}

/*
 * A data segment TCP receives: it arms the socket for the next, or carries
 * the byte the driver stamped. A byte TCP got past unseen, or not read
 * within STAGE_ABANDON_NS (its reader gone), gives way to the next.
 */
static __always_inline void stage_receive(struct sock *sk, struct stage_sample *s, const struct tcphdr_wire *th,
					  int payload)
{
	__u32 seq = __builtin_bswap32(th->seq);
	__u64 now = bpf_ktime_get_ns();
	struct rx_wanted *w;
	struct rx_flow k = {};

	if (s->rx_point == RX_TCP) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);

		/* Read without the read seen (a path without tcp_rcv_space_adjust), or never: time another. */
		if (now - s->rx_tcp_ns < STAGE_ABANDON_NS && tp && (__s32)(tp->copied_seq - s->rx_seq) <= 0)
			return;
		rx_give_up(s);
	}
	if (s->rx_point == RX_NONE) {
		if (start_due())
			rx_arm(s, seq + payload, now);
		return;
	}
	rx_flow_of(s, &k);
	w = bpf_map_lookup_elem(&rx_wanted, &k);
	if (!w) { /* evicted */
		__sync_fetch_and_add(&rx_armed, -1);
		s->rx_point = RX_NONE;
		if (start_due())
			rx_arm(s, seq + payload, now);
		return;
	}
	if (w->arrived_ns && w->seq - seq < (__u32)payload) {
		s->rx_seq = w->seq;
		s->rx_arrived_ns = w->arrived_ns;
		s->rx_tcp_ns = now;
		s->rx_point = RX_TCP;
		bpf_map_delete_elem(&rx_wanted, &k);
		__sync_fetch_and_add(&rx_armed, -1);
		__sync_fetch_and_add(&rx_under_way, 1);
		return;
	}
	/*
	 * Waiting, unless TCP got past the wanted byte without it being
	 * stamped (a driver path the hooks miss, an arming gone stale) or past
	 * the stamped one without it (lost, and retransmitted later), or long
	 * ago: then the flow is armed anew, when a start is due.
	 */
	if (now - s->rx_armed_ns < STAGE_ABANDON_NS &&
	    (__s32)(w->arrived_ns ? seq - w->seq : seq + payload - w->seq) <= 0)
		return;
	if (!start_due()) {
		rx_give_up(s);
		return;
	}
	w->arrived_ns = 0;
	w->seq = seq + payload;
	s->rx_armed_ns = now;
	rx_armed_ns = now;
}

/*
 * tcp_probe fires for each segment an established socket receives: its ACK
 * may end the sent byte's timing, its data the received byte's stages.
 */
SEC("tp_btf/tcp_probe")
int BPF_PROG(stage_tcp_receive, struct sock *sk, const struct sk_buff *skb)
{
	unsigned char *head = skb->head;
	struct stage_sample *s;
	struct tcphdr_wire th;
	int payload;

	if (tx_under_way <= 0 && rx_under_way <= 0 && !armed_lately() && !start_due())
		return 0; /* nothing to end, and nothing may start */
	if (bpf_probe_read_kernel(&th, sizeof(th), head + skb->transport_header))
		return 0;
	payload = skb->len - (skb->transport_header - (skb->data - head)) - (th.doff_res >> 4) * 4;
	s = stage_samples_get(sk, false);
	if (!s && payload > 0) {
		struct sock_addrs a = {};

		if (!here_passes() || !sock_passes(sk, &a))
			return 0;
		s = stage_samples_get(sk, true);
		if (!s) {
			count_full(FAMILY_TCP_STAGE);
			return 0;
		}
		s->addrs = a;
		s->born_ns = bpf_ktime_get_ns();
	}
	if (!s)
		return 0;
	stage_ack(sk, bpf_skc_to_tcp_sock(sk), s, &th);
	if (payload > 0)
		stage_receive(sk, s, &th, payload);
	return 0;
}

/*
 * The driver hands a packet to the stack (skb->data at its IP header): the
 * first of an armed flow at or after the wanted byte stamps its first byte.
 */
static __always_inline void stage_arrive(const struct sk_buff *skb)
{
	unsigned char *l3 = skb->data;
	__u16 proto = __builtin_bswap16(skb->protocol);
	struct tcphdr_wire th;
	struct rx_wanted *w;
	struct rx_flow k = {};
	int payload, thoff;
	__u32 seq;

	if (!armed_lately())
		return;
	if (proto == ETH_P_IP) {
		struct iphdr_wire ip;

		if (bpf_probe_read_kernel(&ip, sizeof(ip), l3) || ip.version_ihl != 0x45 || ip.protocol != IPPROTO_TCP ||
		    (__builtin_bswap16(ip.frag_off) & 0x3fff))
			return;
		__builtin_memcpy(k.local, ip.daddr, 4);
		__builtin_memcpy(k.remote, ip.saddr, 4);
		thoff = sizeof(ip);
		payload = __builtin_bswap16(ip.tot_len) - thoff;
	} else if (proto == ETH_P_IPV6) {
		struct ipv6hdr_wire ip6;

		if (bpf_probe_read_kernel(&ip6, sizeof(ip6), l3) || ip6.nexthdr != IPPROTO_TCP)
			return;
		__builtin_memcpy(k.local, ip6.daddr, 16);
		__builtin_memcpy(k.remote, ip6.saddr, 16);
		thoff = sizeof(ip6);
		payload = __builtin_bswap16(ip6.payload_len);
	} else {
		return;
	}
	if (bpf_probe_read_kernel(&th, sizeof(th), l3 + thoff))
		return;
	payload -= (th.doff_res >> 4) * 4;
	if (payload <= 0)
		return;
	k.local_port = __builtin_bswap16(th.dest);
	k.remote_port = __builtin_bswap16(th.source);
	k.netns = BPF_CORE_READ(skb, dev, nd_net.net, ns.inum);
	w = bpf_map_lookup_elem(&rx_wanted, &k);
	if (!w || w->arrived_ns)
		return;
	seq = __builtin_bswap32(th.seq);
	if ((__s32)(seq + payload - w->seq) <= 0)
		return; /* a retransmission of bytes before the wanted one */
	if ((__s32)(seq - w->seq) < 0)
		seq = w->seq;
	w->seq = seq;
	w->arrived_ns = bpf_ktime_get_ns();
}

/* Drivers without NAPI, veth's default path, and packets a tunnel decapsulates. */
SEC("tp_btf/netif_rx")
int BPF_PROG(stage_arrive_rx, struct sk_buff *skb)
{
	stage_arrive(skb);
	return 0;
}

/* NAPI drivers: each packet before GRO merges it. */
SEC("tp_btf/napi_gro_receive_entry")
int BPF_PROG(stage_arrive_gro, const struct sk_buff *skb)
{
	stage_arrive(skb);
	return 0;
}

/* NAPI drivers that bypass GRO. */
SEC("tp_btf/netif_receive_skb_entry")
int BPF_PROG(stage_arrive_skb, const struct sk_buff *skb)
{
	stage_arrive(skb);
	return 0;
}

/* The reader copied past the received byte: its wait in the receive queue ends. */
SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(stage_read, struct sock *sk)
{
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	struct tcp_stage_stats *v;
	struct stage_sample *s;
	__u64 now;

	if (rx_under_way <= 0)
		return 0;
	s = stage_samples_get(sk, false);
	if (!s || s->rx_point != RX_TCP || !tp || (__s32)(tp->copied_seq - s->rx_seq) <= 0)
		return 0;
	now = bpf_ktime_get_ns();
	v = stage_stats(sk, s);
	if (v) {
		stage_add(&v->stage[STAGE_RX_STACK], s->rx_tcp_ns - s->rx_arrived_ns);
		stage_add(&v->stage[STAGE_RX_QUEUE], now - s->rx_tcp_ns);
	}
	s->rx_point = RX_NONE;
	__sync_fetch_and_add(&rx_under_way, -1);
	if (!start_due() && now - s->rx_arrived_ns >= STAGE_CHAIN_NS)
		rx_arm(s, tp->rcv_nxt, now); /* the next packet TCP has not yet had */
	return 0;
}

/*
 * A socket that leaves ESTABLISHED (or CLOSE_WAIT) gives its bytes up:
 * tcp_probe no longer runs for it, so their ACK or read would never be
 * seen, and the counts of bytes under way would stay up. One that closes
 * drops its timing state: where it lives in the LRU fallback, a new socket
 * at the same address would otherwise take it over.
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(stage_close, const struct sock *sk, int oldstate, int newstate)
{
	bool closing = newstate == TCP_CLOSE;
	struct stage_sample *s;

	if (!closing && ((oldstate != TCP_ESTABLISHED && oldstate != TCP_CLOSE_WAIT) || newstate == TCP_CLOSE_WAIT))
		return 0;
	if (!closing && tx_under_way <= 0 && rx_under_way <= 0 && rx_armed <= 0)
		return 0;
	s = stage_samples_get((struct sock *)sk, false);
	if (!s)
		return 0;
	if (s->point != POINT_NONE) {
		s->point = POINT_NONE;
		__sync_fetch_and_add(&tx_under_way, -1);
	}
	rx_give_up(s);
	if (closing)
		stage_samples_delete((struct sock *)sk);
	return 0;
}
