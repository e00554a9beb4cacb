/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one definition of what the profiler's maps hold; bpf2go generates the
 * Go types. Samples are counted in the kernel per distinct key, so user space
 * reads one entry per stack and task rather than one record per sample.
 */
#ifndef SKBTRACE_PROFILE_H
#define SKBTRACE_PROFILE_H

#ifndef __VMLINUX_MIN_H__
#include <linux/types.h>
#endif

enum profile_limits {
	PROFILE_STACK_DEPTH = 127, /* the kernel's PERF_MAX_STACK_DEPTH */
	PROFILE_COMM_LEN = 16,
};

/* One distinct sample: who ran where, and the two stacks (ids into the
 * stack map, or a negative errno when a stack could not be taken). */
struct profile_key {
	__u32 tgid;
	__u32 pid;
	__u32 cpu;
	__s32 kernel_stack;
	__s32 user_stack;
	__u32 pad;
	char comm[PROFILE_COMM_LEN];
};

/* The packets the host's devices moved in the profile's window, per CPU:
 * index 0 transmitted (net_dev_xmit), 1 received from drivers (before GRO). */
struct profile_traffic {
	__u64 skbs;
	__u64 segs;
	__u64 bytes;
	__u64 pad;
};

enum profile_direction {
	PROFILE_TX = 0,
	PROFILE_RX = 1,
};

#endif
