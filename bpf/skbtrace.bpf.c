// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * skbtrace kernel side. Tracepoints first; kernel functions (fentry/fexit)
 * only where a kernel lacks the tracepoint. One object serves every kernel
 * from 5.10: what a kernel lacks is pruned at load time through read-only
 * switches the loader sets from the kernel's BTF, so the verifier never sees it.
 *
 * The sources are split by domain (tcp.bpf.c, dev.bpf.c, sock.bpf.c, with
 * what they share in common.bpf.h and aggregate.bpf.h, the ABI in
 * include/events.h alone) but built as this one object: the families share
 * one ring buffer, sequence counter, filters and switches, and the loader
 * loads one collection.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "tcp.bpf.c"
#include "dev.bpf.c"
#include "sock.bpf.c"
#include "qdisc_delay.bpf.c"
#include "tcp_stage.bpf.c"

/* Numbers the events the recorder writes from the maps, from the same counter as the kernel's. */
SEC("syscall")
int seq_reserve(struct seq_reservation *r)
{
	r->first = __sync_fetch_and_add(&seq_counter, r->count);
	return 0;
}
