package event

import (
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// TypeQdiscDelay is qdisc_delay's event: how long packets waited in a qdisc.
const TypeQdiscDelay = Type(wire.EventTypeEVENT_QDISC_DELAY)

var qdiscDelay = Family{
	ID:          uint16(wire.EventFamilyFAMILY_QDISC_DELAY),
	Name:        "qdisc_delay",
	Description: "time packets waited in each qdisc, enqueue to dequeue: histogram, mean and max, per interval",
	Hooks: Slots(BTFHook(wire.ProgQdiscDelayEnqueue, "qdisc_enqueue"),
		BTFHook(wire.ProgQdiscDelayDequeue, "qdisc_dequeue")),
	// Not sampled: a packet stamped inside a sampling window may leave the
	// queue after it, and the longest waits, the ones that matter, would be
	// the ones lost.
	Events: []EventKind{{Type: TypeQdiscDelay, Action: "qdisc_delay", decode: decodeQdiscDelay, Fields: fieldsQdiscDelay}},
}

func decodeQdiscDelay(d Decoder, rec trace.Record, ev *Event) (bool, error) {
	return decodeAggregate(d, rec, ev, &ev.QdiscDelay, &ev.QdiscDelay.Hdr, &ev.QdiscDelay.BeginNs)
}

func fieldsQdiscDelay(f Fields, ev *Event, _ Names) {
	q := &ev.QdiscDelay
	qdiscFields(f, q.Dev[:], q.Kind[:], q.Netns, q.Handle, q.Parent)
	f.Uint("packets", q.Packets)
	f.Uint("unstamped", q.Unstamped)
	maxUs := q.MaxNs / 1000
	if q.Packets > 0 {
		// A quantile interpolated in its log2 bucket can pass the largest wait.
		f.Uint("p50_us", min(QuantileUs(q.Hist[:], QdiscDelayBits, 0.5), maxUs))
		f.Uint("p99_us", min(QuantileUs(q.Hist[:], QdiscDelayBits, 0.99), maxUs))
		f.Uint("mean_us", q.SumNs/q.Packets/1000)
	}
	f.Uint("max_us", maxUs)
	f.Hist("delay_hist", q.Hist[:])
	f.Time("begin", ev.Begin)
}

// Sub-bucket bits of the delay histograms: qdisc_delay cuts each power of
// two in four, tcp_stage in eight (delay_bucket in bpf/aggregate.bpf.h).
const (
	QdiscDelayBits = 2
	StageBits      = 3
)

// BucketUs is the range [lo, hi) of microseconds bucket idx of a delay
// histogram holds: below 2^bits one value each, then each power of two in
// 2^bits.
func BucketUs(idx, bits int) (lo, hi uint64) {
	subs := 1 << bits
	if idx < subs {
		return uint64(idx), uint64(idx) + 1
	}
	b, sub := idx/subs+bits-1, uint64(idx%subs)
	width := uint64(1) << (b - bits)
	lo = (uint64(subs) + sub) * width
	return lo, lo + width
}

// TimeWeightedUs is a delay histogram's mean weighted by the delay itself,
// from its buckets' midpoints: the wait of a byte taken at a random moment
// rather than of a way taken at random. A sampler that times one byte per
// way times a run of short ways many times for each long one; this mean
// does not tilt with how many of each it caught.
func TimeWeightedUs(hist []uint64, bits int) float64 {
	var sum, sumSq float64
	for k, n := range hist {
		if n == 0 {
			continue
		}
		lo, hi := BucketUs(k, bits)
		mid := float64(lo+hi) / 2
		sum += float64(n) * mid
		sumSq += float64(n) * mid * mid
	}
	if sum == 0 {
		return 0
	}
	return sumSq / sum
}

// QuantileUs estimates a quantile from a delay histogram of 2^bits
// buckets a power of two, interpolating within the bucket it falls in.
func QuantileUs(hist []uint64, bits int, q float64) uint64 {
	var total uint64
	for _, n := range hist {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var below float64
	for k, n := range hist {
		if n == 0 {
			continue
		}
		if below+float64(n) >= rank {
			lo, hi := BucketUs(k, bits)
			return lo + uint64(float64(hi-lo)*(rank-below)/float64(n))
		}
		below += float64(n)
	}
	_, hi := BucketUs(len(hist)-1, bits)
	return hi
}
