// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * skbtrace profile: stack samples on a perf event (cpu-clock, or cycles where
 * the CPU has counters), counted per stack and task in the kernel, and the
 * packets the devices moved in the same window so that user space can say how
 * many nanoseconds each packet cost. Only helpers and tracepoints every kernel
 * from 5.10 has.
 */
#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "profile.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAP_TYPE_STACK_TRACE 7
#define F_USER_STACK (1ULL << 8)

struct {
	__uint(type, MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, PROFILE_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct profile_key);
	__type(value, __u64);
} samples SEC(".maps");

/* Samples that found the samples map full: reported, never silently lost. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct profile_traffic);
} traffic SEC(".maps");

SEC("perf_event")
int profile_sample(void *ctx)
{
	struct profile_key key = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u64 one = 1, *count;

	key.tgid = id >> 32;
	key.pid = (__u32)id;
	key.cpu = bpf_get_smp_processor_id();
	key.kernel_stack = bpf_get_stackid(ctx, &stacks, 0);
	/* The idle task has no user half. */
	key.user_stack = key.pid ? bpf_get_stackid(ctx, &stacks, F_USER_STACK) : -1;
	bpf_get_current_comm(key.comm, sizeof(key.comm));

	count = bpf_map_lookup_elem(&samples, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	if (bpf_map_update_elem(&samples, &key, &one, BPF_NOEXIST) == 0)
		return 0;
	/* Another CPU inserted the same key meanwhile, or the map is full. */
	count = bpf_map_lookup_elem(&samples, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	__u32 zero = 0;
	__u64 *lost = bpf_map_lookup_elem(&dropped, &zero);
	if (lost)
		*lost += 1;
	return 0;
}

/* An skb longer than an Ethernet frame may carry GSO segments. */
#define MAX_FRAME 1514

/* Weak: kernels before 6.2 lack it, and the loader turns its address into zero there. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/*
 * Segments an skb carries. Called per packet, so it reads as little as it
 * can: the skb itself with plain loads (a tp_btf argument is a typed
 * pointer), and the shared info beyond it only for an skb too long to be
 * one frame: with plain loads through a typed read-only view where the
 * kernel has one (6.2), else with one probe read of gso_size and gso_segs,
 * which sit side by side.
 */
static __always_inline __u32 skb_segs(const struct sk_buff *skb, __u32 len)
{
	struct {
		__u16 size;
		__u16 segs;
	} gso = {};
	void *end;

	if (len <= MAX_FRAME)
		return 1;
	end = skb->head + skb->end;
	if (bpf_rdonly_cast) {
		struct skb_shared_info *shinfo = bpf_rdonly_cast(end, bpf_core_type_id_kernel(struct skb_shared_info));

		gso.size = shinfo->gso_size;
		gso.segs = shinfo->gso_segs;
	} else {
		bpf_probe_read_kernel(&gso, sizeof(gso), end + bpf_core_field_offset(struct skb_shared_info, gso_size));
	}
	if (!gso.size || !gso.segs)
		return 1;
	return gso.segs;
}

static __always_inline void count_traffic(enum profile_direction dir, const struct sk_buff *skb, __u32 len)
{
	__u32 index = dir;
	struct profile_traffic *t = bpf_map_lookup_elem(&traffic, &index);

	if (!t)
		return;
	t->skbs += 1;
	t->segs += skb_segs(skb, len);
	t->bytes += len;
}

SEC("tp_btf/net_dev_xmit")
int BPF_PROG(profile_xmit, struct sk_buff *skb, int rc, struct net_device *dev, unsigned int skb_len)
{
	if (rc == 0)
		count_traffic(PROFILE_TX, skb, skb_len);
	return 0;
}

/*
 * Received packets are counted where every receive path meets, once per skb
 * the stack takes in: a NIC's after GRO (its skb carries the merged packets
 * in gso_segs), veth's and loopback's from the backlog netif_rx fills. The
 * drivers' entry points (napi_gro_receive_entry and the like) miss the
 * backlog: veth profiled "received 2" beside 1.9 M transmitted.
 */
SEC("tp_btf/netif_receive_skb")
int BPF_PROG(profile_recv, struct sk_buff *skb)
{
	count_traffic(PROFILE_RX, skb, skb->len);
	return 0;
}
