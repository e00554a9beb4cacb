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
/*
 * The in-kernel state of a socket's current run, kept in socket-local
 * storage. When recording stops, an iterator hands user space the runs still
 * open, which it writes to the trace.
 */
struct sendlim_run {
	struct tcp_sendlim_event ev;
	__u64 begin_jiffies; /* jiffies at begin_ns, for the once-a-second rule (no cheaper clock here) */
	__u32 last_segs_out;
	__u32 _pad;
};

#endif

enum event_type {
	EVENT_TCP_CONN = 1,
	EVENT_TCP_SENDLIM = 2,
};

/* Families are what a user selects with -e; loss is counted per family. */
enum event_family {
	FAMILY_TCP_CONN = 0,
	FAMILY_TCP_SENDLIM = 1,
	FAMILY_MAX = 2,
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
	SENDLIM_MAX = 8,
	SENDLIM_IGNORED = 0xff, /* in the run map only: the socket does not pass the filters */
};

/* Execution context of the event: process (pid and comm are its own) or softirq. */
enum event_context {
	CONTEXT_TASK = 0,
	CONTEXT_SOFTIRQ = 1,
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
	__u16 _pad;
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
	__u8 _pad;
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
	__u8 _pad[7];
};

/*
 * The in-kernel state of a socket's current run, kept in socket-local
 * storage. When recording stops, an iterator hands user space the runs still
 * open, which it writes to the trace.
 */
struct sendlim_run {
	struct tcp_sendlim_event ev;
	__u64 begin_jiffies; /* jiffies at begin_ns, for the once-a-second rule (no cheaper clock here) */
	__u32 last_segs_out;
	__u32 _pad;
};

#endif
