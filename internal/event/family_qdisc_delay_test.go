package event

import (
	"testing"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// The buckets tile the microseconds with no gap, as the kernel's
// delay_bucket fills them, each a quarter of its power of two.
func TestDelayBucketsTileTheMicroseconds(t *testing.T) {
	var hist wire.QdiscDelayEvent
	var next uint64
	for k := range hist.Hist {
		lo, hi := DelayBucketUs(k)
		if lo != next || hi <= lo || (lo >= 4 && (hi-lo)*4 > lo) {
			t.Fatalf("bucket %d is [%d, %d), after %d", k, lo, hi, next)
		}
		next = hi
	}
	if lo, _ := DelayBucketUs(len(hist.Hist) - 1); lo != 7<<22 { // 2^24 us in quarters: the last begins at 1.75 * 2^24
		t.Fatalf("the last bucket begins at %d us", lo)
	}
}

func TestDelayQuantileInterpolatesInItsBucket(t *testing.T) {
	var hist [len(wire.QdiscDelayEvent{}.Hist)]uint64
	hist[57] = 100 // the second quarter of [2^15, 2^16) us
	if lo, hi := DelayBucketUs(57); lo != 40960 || hi != 49152 {
		t.Fatalf("bucket 57 is [%d, %d)", lo, hi)
	}
	if got := DelayQuantileUs(hist[:], 0.5); got != 45056 {
		t.Fatalf("p50 %d, want the bucket's middle, 45056", got)
	}
	if got := DelayQuantileUs(make([]uint64, len(hist)), 0.5); got != 0 {
		t.Fatalf("p50 of nothing %d", got)
	}
}
