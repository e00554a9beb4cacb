/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one definition of every record the kernel side hands to user space.
 * bpf2go generates the Go types from these structs; the trace file stores
 * them verbatim (see docs/format.md), so changing a layout is a format change.
 * Every struct is padded by hand to a multiple of 8 bytes so that the layout
 * is identical for both byte orders and for Go.
 */
#ifndef SKBTRACE_EVENTS_H
#define SKBTRACE_EVENTS_H

#ifndef __VMLINUX_MIN_H__
#include <linux/types.h>
#endif

enum event_type {
	EVENT_TCP_CONN = 1,
	EVENT_TCP_SENDLIM = 2,
	EVENT_TCP_CONG = 3,
	EVENT_TCP_RETRANS = 4,
	EVENT_TCP_RTT = 5,
	EVENT_TCP_RESET = 6,
	EVENT_TCP_RCVBUF = 7,
	EVENT_SK_LIMIT = 8,
	EVENT_SKB_DROP = 9,
	EVENT_DEV_XMIT = 10,
	EVENT_DEV_RECV = 11,
	EVENT_NAPI_POLL = 12,
	EVENT_SOFTIRQ = 13,
	EVENT_QDISC = 14,
	EVENT_SOCK_IO = 15,
	EVENT_QDISC_DELAY = 16,
	EVENT_TCP_STAGE = 17,
	EVENT_MAX = 18, /* one past the last */
};

/* Families are what a user selects with -e; loss is counted per family. */
enum event_family {
	FAMILY_TCP_CONN = 0,
	FAMILY_TCP_SENDLIM = 1,
	FAMILY_TCP_CONG = 2,
	FAMILY_TCP_RETRANS = 3,
	FAMILY_TCP_RTT = 4,
	FAMILY_TCP_RESET = 5,
	FAMILY_TCP_RCVBUF = 6,
	FAMILY_SK_LIMIT = 7,
	FAMILY_SKB_DROP = 8,
	FAMILY_DEV_XMIT = 9,
	FAMILY_DEV_RECV = 10,
	FAMILY_NAPI_POLL = 11,
	FAMILY_SOFTIRQ = 12,
	FAMILY_QDISC = 13,
	FAMILY_SOCK_IO = 14,
	FAMILY_QDISC_DELAY = 15,
	FAMILY_TCP_STAGE = 16,
	FAMILY_MAX = 17,
};

/* Bucket counts of the histograms in aggregated events. */
enum histogram_buckets {
	SEGS_BUCKETS = 8,  /* segments per skb: 1, 2-3, 4-7, ..., 64-127, 128+ */
	SIZE_BUCKETS = 20, /* syscall bytes: 0-1, 2-3, 4-7, ..., 2^19 and up */
	DELAY_BUCKETS = 96,  /* microseconds: 0, 1, 2, 3, then each power of two in four: 4, 5, 6, 7, 8-9, ..., 2^24 (16.8 s) and up */
	STAGE_BUCKETS = 192, /* microseconds: 0 to 7, then each power of two in eight: 8, 9, ..., 16-17, ..., up to 2^26 (67 s) and above */
};

enum sk_limit_kind {
	SK_LIMIT_SNDBUF = 0,        /* sock_exceed_buf_limit, send side */
	SK_LIMIT_RMEM = 1,          /* sock_exceed_buf_limit, receive side */
	SK_LIMIT_RCVQUEUE_FULL = 2, /* sock_rcvqueue_full */
};

enum sock_io_dir {
	SOCK_IO_SEND = 0,
	SOCK_IO_RECV = 1,
};

enum reset_dir {
	RESET_SENT = 0,
	RESET_RECEIVED = 1,
};

/* Which path of the kernel sent or "received" a reset (docs/events.md). */
enum reset_path {
	RESET_PATH_UNKNOWN = 0,       /* traces recorded before paths were known */
	RESET_PATH_PEER = 1,          /* received: the peer's RST */
	RESET_PATH_ABORT_ON_DATA = 2, /* data arrived after this end closed: the kernel aborts and answers with a RST */
	RESET_PATH_NO_SOCKET = 3,     /* answers a segment that no socket takes (a closed port) */
	RESET_PATH_TIMEWAIT = 4,      /* answers a segment to a TIME_WAIT socket */
	RESET_PATH_SEGMENT = 5,       /* answers an unacceptable segment of a listener, request or connection */
	RESET_PATH_CLOSE = 6,         /* close() discarded unread data */
	RESET_PATH_LINGER0 = 7,       /* close() with SO_LINGER and a zero timeout, or a disconnect */
	RESET_PATH_ABORT = 8,         /* the kernel gave up: keepalive or FIN_WAIT2 timeout, orphan or memory limits, ss -K */
};

/* Why an established sender is not sending more (docs/events.md). */
enum sendlim_reason {
	SENDLIM_OK = 0,     /* nothing held back: data is going out, or all went out and the pipe is kept full */
	SENDLIM_CWND = 1,   /* congestion window full, or too nearly full for a TSO frame */
	SENDLIM_SWND = 2,   /* peer's advertised window full, or too nearly full for a TSO frame */
	SENDLIM_NAGLE = 3,  /* a sub-MSS tail held back while a small segment is unacknowledged */
	SENDLIM_PACING = 4, /* the pacing timer holds the next segment for over RTT/8 */
	SENDLIM_TSQ = 5,    /* TCP small queues: too many bytes below TCP, in qdisc or device */
	SENDLIM_SNDBUF = 6, /* nothing sendable and the send buffer is full of unacked data */
	SENDLIM_APP = 7,    /* nothing to send and the kernel marks the socket app-limited (pipe not kept full) */
	SENDLIM_CORK = 8,   /* a sub-MSS tail held by TCP_CORK or a write with MSG_MORE */
	SENDLIM_XMIT_FAIL = 9, /* nothing outstanding and nothing holding the data: the qdisc or device refused it */
	SENDLIM_RTO = 10,   /* the retransmission timer fired (congestion state Loss): waiting out its backoff */
	SENDLIM_MAX = 11,
	SENDLIM_IGNORED = 0xff, /* in the run map only: the socket does not pass the filters */
};

/* Execution context of the event: process (pid and comm are its own) or softirq. */
enum event_context {
	CONTEXT_TASK = 0,
	CONTEXT_SOFTIRQ = 1,
};

/* The contexts --context keeps, as a mask. */
enum context_filter {
	CONTEXT_FILTER_TASK = 1,    /* process context: system calls and kernel threads */
	CONTEXT_FILTER_SOFTIRQ = 2, /* serving a softirq (NET_RX, NET_TX, timers), in ksoftirqd too */
	CONTEXT_FILTER_HARDIRQ = 4, /* a device's interrupt handler */
};

/* Where a CPU is: set by the --context hooks at softirq and interrupt entry and exit. */
struct cpu_context {
	__u32 softirq;
	__u32 hardirq;
};

struct event_header {
	__u64 seq;   /* global sequence number, taken in the kernel */
	__u64 ts_ns; /* CLOCK_BOOTTIME; the trace header anchors it to wall-clock */
	__u32 cpu;
	__u16 type;  /* enum event_type */
	__u16 _pad;
};

struct sock_addrs {
	__u8 saddr[16]; /* IPv4 in the first 4 bytes */
	__u8 daddr[16];
	__u16 sport;    /* host byte order */
	__u16 dport;    /* host byte order */
	__u16 family;   /* AF_INET or AF_INET6 */
	__u16 netns_by_addr; /* 1: the namespace could not be read; the filter's, whose addresses these are */
	__u32 netns;    /* network namespace inode */
	__u32 _pad2;
};

struct tcp_conn_event {
	struct event_header hdr;
	__u64 sock;
	struct sock_addrs addrs;
	__u32 pid;       /* thread group id of current; meaningful when context is CONTEXT_TASK */
	__u8 oldstate;   /* TCP_ESTABLISHED=1 ... TCP_NEW_SYN_RECV=12 */
	__u8 newstate;
	__u8 context;    /* enum event_context */
	__u8 err;        /* at the change to CLOSE: the socket's error (ECONNRESET, ETIMEDOUT ...), 0 for a clean close */
	char comm[16];
};

/* One folded run of identical send-limit decisions for one socket. */
struct tcp_sendlim_event {
	struct event_header hdr;
	__u64 sock;
	__u64 begin_ns;    /* CLOCK_BOOTTIME of the first decision of the run */
	struct sock_addrs addrs;
	__u32 cnt;         /* decisions (incoming ACKs) in the run */
	__u32 sentpkts;    /* segments sent during the run */
	__u32 cwnd;        /* the following are as at the last decision of the run */
	__u32 ssthresh;
	__u32 in_flight;   /* packets */
	__u32 snd_wnd;     /* bytes */
	__u32 mss;
	__u32 unsent;      /* bytes written by the application but not yet sent */
	__u32 wmem_queued; /* bytes charged to the send buffer */
	__u32 sndbuf;
	__u8 reason;       /* enum sendlim_reason */
	__u8 probes;       /* the most zero-window probes outstanding during the run (icsk_probes_out) */
	__u8 backoff;      /* the highest retransmission-timer backoff exponent of the run (icsk_backoff) */
	__u8 _pad[5];
	/*
	 * The kernel's own accounting (tcp_info's busy_time, rwnd_limited,
	 * sndbuf_limited: the chrono counters), totals since the connection
	 * began, as at the last decision of the run. Appended in trace format
	 * 1.1: shorter records of older traces read as zero.
	 */
	__u64 busy_us;
	__u64 rwnd_limited_us;
	__u64 sndbuf_limited_us;
};

/*
 * The in-kernel state of a socket's current run, kept in socket-local
 * storage. When recording stops, an iterator hands user space the runs still
 * open, which it writes to the trace.
 */
struct sendlim_run {
	struct tcp_sendlim_event ev; /* ev.hdr.type is set once the socket passed the filters */
	__u64 begin_jiffies; /* jiffies at begin_ns, for the once-a-second rule (no cheaper clock here) */
	__u64 rtt_sample_jiffies; /* tcp_rtt, which shares the tcp_probe program: the last sample */
	__u32 last_segs_out;
	__u32 resume_segs; /* data_segs_out before the resuming send */
	/*
	 * CLOCK_BOOTTIME of the first send of new data since the last decision,
	 * taken while the run's reason is a stall the send can end: where the
	 * stall ended if the next decision finds another reason. Zero if none.
	 */
	__u64 resume_ns;
	__u64 decided_jiffies; /* jiffies at the last decision */
	/*
	 * CLOCK_BOOTTIME of the last decision, kept only where user space reads
	 * the open runs from a hash, without an iterator to take the kernel's
	 * totals at the stop (5.10): the run then ends where its totals were taken.
	 */
	__u64 decided_ns;
};

/* A TCP congestion-state change (tcp_ca_state: Open, Disorder, CWR, Recovery, Loss). */
struct tcp_cong_event {
	struct event_header hdr;
	__u64 sock;
	struct sock_addrs addrs;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 rto_us;
	__u8 state;
	__u8 _pad[3];
};

/* Retransmitted segments of one socket, folded over at most an interval. */
struct tcp_retrans_event {
	struct event_header hdr;
	__u64 sock;
	__u64 begin_ns;
	struct sock_addrs addrs;
	__u32 cnt;  /* segments, as TcpRetransSegs counts them */
	__u32 skbs; /* retransmitted skbs (a TSO skb carries several segments) */
	__u8 state; /* TCP state at the last retransmit */
	__u8 _pad[7];
};

struct tcp_retrans_run {
	struct tcp_retrans_event ev;
	__u64 begin_jiffies;
};

/* A per-socket sample, at most one per socket per rtt interval. */
struct tcp_rtt_event {
	struct event_header hdr;
	__u64 sock;
	struct sock_addrs addrs;
	__u32 srtt_us;
	__u32 rttvar_us;
	__u32 min_rtt_us;
	__u32 cwnd;
	__u32 ssthresh;
	__u32 in_flight;
	__u32 snd_wnd;
	__u32 rcv_wnd;
	__u64 delivery_rate;  /* bytes per second, of the latest rate sample */
	__u64 bytes_acked;    /* since the connection began, as tcp_info reports them */
	__u64 bytes_received;
};

struct tcp_reset_event {
	struct event_header hdr;
	__u64 sock; /* 0 for a reset sent for no socket */
	struct sock_addrs addrs;
	__u32 reason; /* enum sk_rst_reason for sent resets */
	__u8 dir;     /* enum reset_dir */
	__u8 state;
	__u8 path;    /* enum reset_path */
	__u8 _pad;
};

/* A receive-buffer autotuning step: emitted when sk_rcvbuf changes. */
struct tcp_rcvbuf_event {
	struct event_header hdr;
	__u64 sock;
	struct sock_addrs addrs;
	__u32 rcvbuf;
	__u32 old_rcvbuf;
	__u32 rcv_space; /* bytes the application read in the last RTT, as autotuning measured */
	__u32 window_clamp;
	__u32 rcv_wnd;
	__u32 rmem_alloc;
};

struct rcvbuf_state {
	__u32 rcvbuf; /* the size last reported */
	__u32 _pad;
};

/*
 * Aggregated families: the kernel counts in maps, the recorder drains them
 * every interval and writes one event per key with activity. Counters are
 * cumulative in the maps (the recorder subtracts), so draining loses nothing;
 * fields that describe one interval (maxima, first times) are reset by the
 * kernel when it sees a new drain generation.
 */
/*
 * Per-device counters are keyed by the net_device's address and live in
 * per-CPU maps: each CPU fills in the device's identity (and whether it
 * passes the filters) the first time it counts for it.
 */
struct dev_stats {
	__u32 ready;   /* this CPU filled in the identity below */
	__u32 ignored; /* the device does not pass the filters */
	__u32 netns;
	__u32 ifindex;
	__u64 skbs;
	__u64 bytes;
	__u64 segs;
	__u64 errors; /* xmit: driver returned other than NETDEV_TX_OK */
	__u64 gro_in; /* recv: packets the device handed GRO (its NAPI polls took), before merging */
	__u64 gen;
	__u32 max_bytes; /* largest skb in the current generation */
	__u32 _pad;
	__u64 hist[SEGS_BUCKETS];
	char name[16];
};

/* A per-CPU direct-mapped cache in front of the per-device hash maps. */
struct dev_slot {
	__u64 key; /* the net_device (or napi_struct) that owns the slot on this CPU, 0 when free */
	struct dev_stats stats;
};


struct dev_event {
	struct event_header hdr;
	__u64 begin_ns;
	char name[16];
	__u32 ifindex;
	__u32 netns;
	__u64 skbs;
	__u64 bytes;
	__u64 segs;
	__u64 errors;
	__u64 gro_in;
	__u32 max_bytes;
	__u32 _pad;
	__u64 hist[SEGS_BUCKETS];
};

struct napi_stats {
	__u32 ready;
	__u32 ignored;
	__u32 netns;
	__u32 ifindex;
	__u64 polls;
	__u64 work;
	__u64 exhausted; /* polls that used their whole budget */
	__u32 budget;
	__u32 _pad;
	char name[16];
};

struct napi_slot {
	__u64 key;
	struct napi_stats stats;
};

struct napi_event {
	struct event_header hdr; /* cpu: the CPU that polled */
	__u64 begin_ns;
	char name[16];
	__u32 ifindex;
	__u32 netns;
	__u64 polls;
	__u64 work;
	__u64 exhausted;
	__u32 budget;
	__u32 _pad;
};

struct softirq_stats {
	__u64 entries;
	__u64 time_ns;
	__u64 start_ns;
};

struct softirq_event {
	struct event_header hdr; /* cpu: the CPU it ran on */
	__u64 begin_ns;
	__u64 entries;
	__u64 time_ns;
	__u32 vec; /* NET_TX_SOFTIRQ = 2, NET_RX_SOFTIRQ = 3 */
	__u32 _pad;
};

struct qdisc_key {
	__u32 netns;
	__u32 ifindex;
	__u32 handle;
	__u32 parent;
};

struct qdisc_stats {
	__u64 enqueues;
	__u64 dequeues; /* packets */
	__u64 gen;
	__u32 backlog_max; /* bytes, in the current generation */
	__u32 qlen_max;
	__u32 drops;       /* the qdisc's own counters, as tc -s shows them */
	__u32 requeues;
	__u32 overlimits;
	__u32 backlog;
	__u32 qlen;
	/* The counters when the recording first saw the qdisc: they count from its creation. */
	__u32 drops_base;
	__u32 requeues_base;
	__u32 overlimits_base;
	__u32 _pad;
	char dev[16];
	char kind[16];
};

struct qdisc_event {
	struct event_header hdr;
	__u64 begin_ns;
	char dev[16];
	char kind[16];
	__u32 ifindex;
	__u32 netns;
	__u32 handle;
	__u32 parent;
	__u64 enqueues;
	__u64 dequeues;
	__u64 drops; /* in the interval */
	__u64 requeues;
	__u64 overlimits;
	__u32 backlog_max;
	__u32 qlen_max;
	__u32 backlog; /* at the end of the interval */
	__u32 qlen;
};

/* qdisc_delay: per qdisc (struct qdisc_key) and CPU, cumulative. */
struct qdisc_delay_stats {
	__u64 packets;   /* dequeued with their enqueue seen */
	__u64 unstamped; /* dequeued, enqueue not seen (split by the qdisc, or queued before the recording) */
	__u64 sum_ns;
	__u64 gen;
	__u64 max_ns; /* in the current generation */
	__u64 hist[DELAY_BUCKETS];
	char dev[16];
	char kind[16];
};

struct qdisc_delay_event {
	struct event_header hdr;
	__u64 begin_ns;
	char dev[16];
	char kind[16];
	__u32 ifindex;
	__u32 netns;
	__u32 handle;
	__u32 parent;
	__u64 packets; /* in the interval */
	__u64 unstamped;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 hist[DELAY_BUCKETS];
};

/* tcp_stage: where a sent byte's time goes, from the write to its ACK, and a received one's, from the driver to the reader. */
enum tcp_stage {
	STAGE_SEND_QUEUE = 0, /* accepted by the write, to the device layer (dev_queue_xmit) */
	STAGE_QDISC = 1,      /* in the qdisc, to its dequeue (0 where the qdisc is bypassed) */
	STAGE_DRIVER = 2,     /* to the driver's transmit: segmentation, the device's queue */
	STAGE_ACK = 3,        /* from the driver to the ACK that covers it: the path, the receiver, its ACK */
	/* A received byte, on the receiving socket: */
	STAGE_RX_STACK = 4, /* from the driver's hand-off to TCP: GRO, the CPU's backlog, the socket's backlog */
	STAGE_RX_QUEUE = 5, /* from TCP to the reader's copy: the socket's receive queue */
	STAGE_MAX = 6,
};

struct stage_hist {
	__u64 count;
	__u64 sum_ns;
	__u64 hist[STAGE_BUCKETS];
};

/*
 * A socket's life: its address and when its timing state was made, so that
 * a new socket at a freed one's address starts anew.
 */
struct tcp_stage_key {
	__u64 sock;
	__u64 born_ns;
};

/* Per socket life, cumulative. */
struct tcp_stage_stats {
	struct sock_addrs addrs;
	struct stage_hist stage[STAGE_MAX];
};

struct tcp_stage_event {
	struct event_header hdr;
	__u64 begin_ns;
	__u64 sock;
	struct sock_addrs addrs;
	struct stage_hist stage[STAGE_MAX]; /* in the interval */
};

struct sock_io_key {
	__u32 pid;
	__u32 dir; /* enum sock_io_dir */
};

struct sock_io_stats {
	__u64 calls;
	__u64 bytes;
	__u64 errors;
	__u64 hist[SIZE_BUCKETS];
	char comm[16];
};

struct sock_io_event {
	struct event_header hdr;
	__u64 begin_ns;
	__u32 pid;
	__u32 dir;
	char comm[16];
	__u64 calls;
	__u64 bytes;
	__u64 errors;
	__u64 hist[SIZE_BUCKETS];
};

struct drop_key {
	__u64 location; /* kernel text address that dropped the skb */
	__u32 netns;
	__u32 ifindex;
	__u32 reason; /* enum skb_drop_reason */
	__u32 netns_by_addr; /* as in struct sock_addrs */
};

struct drop_stats {
	__u64 cnt;
	__u64 gen;
	__u64 first_ns; /* first drop of the current generation */
	__u16 protocol; /* ethertype, host order, of the last drop */
	__u8 l4proto;
	__u8 _pad[5];
	char dev[16];
	struct sock_addrs addrs; /* of the last drop */
};

struct skb_drop_event {
	struct event_header hdr;
	__u64 begin_ns;
	__u64 location;
	char dev[16];
	__u32 ifindex;
	__u32 netns;
	__u32 reason;
	__u16 protocol;
	__u8 l4proto;
	__u8 _pad;
	__u64 cnt;
	struct sock_addrs addrs;
};

struct sk_limit_key {
	__u64 sock;
	__u32 kind; /* enum sk_limit_kind */
	__u32 _pad;
};

struct sk_limit_stats {
	__u64 cnt;
	struct sock_addrs addrs;
};

struct sk_limit_event {
	struct event_header hdr;
	__u64 begin_ns;
	__u64 sock;
	struct sock_addrs addrs;
	__u64 cnt;
	__u8 kind;
	__u8 _pad[7];
};

/* The context of the seq_reserve program: user space numbers drained events. */
struct seq_reservation {
	__u64 count;
	__u64 first;
};

#endif
