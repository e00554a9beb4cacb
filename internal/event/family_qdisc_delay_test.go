package event

import (
	"testing"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// The buckets tile the microseconds with no gap, as the kernel's
// delay_bucket fills them, each a quarter of its power of two.
func TestDelayBucketsTileTheMicroseconds(t *testing.T) {
	for _, c := range []struct {
		bits, buckets int
		lastLo        uint64
	}{
		{QdiscDelayBits, len(wire.QdiscDelayEvent{}.Hist), 7 << 22}, // 2^24 us in quarters: the last begins at 1.75 * 2^24
		{StageBits, len(wire.StageHist{}.Hist), 15 << 22},           // 2^25 us in eighths: the last begins at 1.875 * 2^25
	} {
		var next uint64
		for k := range c.buckets {
			lo, hi := BucketUs(k, c.bits)
			if lo != next || hi <= lo || (lo >= 1<<c.bits && (hi-lo)<<c.bits > lo) {
				t.Fatalf("%d bits: bucket %d is [%d, %d), after %d", c.bits, k, lo, hi, next)
			}
			next = hi
		}
		if lo, _ := BucketUs(c.buckets-1, c.bits); lo != c.lastLo {
			t.Fatalf("%d bits: the last bucket begins at %d us, want %d", c.bits, lo, c.lastLo)
		}
	}
}

func TestDelayQuantileInterpolatesInItsBucket(t *testing.T) {
	var hist [len(wire.QdiscDelayEvent{}.Hist)]uint64
	hist[57] = 100 // the second quarter of [2^15, 2^16) us
	if lo, hi := BucketUs(57, QdiscDelayBits); lo != 40960 || hi != 49152 {
		t.Fatalf("bucket 57 is [%d, %d)", lo, hi)
	}
	if got := QuantileUs(hist[:], QdiscDelayBits, 0.5); got != 45056 {
		t.Fatalf("p50 %d, want the bucket's middle, 45056", got)
	}
	if got := QuantileUs(make([]uint64, len(hist)), QdiscDelayBits, 0.5); got != 0 {
		t.Fatalf("p50 of nothing %d", got)
	}
}

// Four short ways timed for two long ones (a queue still filling): the
// median is the short ways', the time-weighted wait the long ones'.
func TestTimeWeightedWaitIsTheLongWays(t *testing.T) {
	var hist [192]uint64
	short, long := 13, 0
	for k := range hist {
		if lo, hi := BucketUs(k, 3); lo <= 557_000 && 557_000 < hi {
			long = k
		}
	}
	hist[short], hist[long] = 4, 2
	if p50 := QuantileUs(hist[:], 3, 0.5); p50 > 20 {
		t.Fatalf("median %d us, want the short ways'", p50)
	}
	if w := TimeWeightedUs(hist[:], 3); w < 520_000 || w > 600_000 {
		t.Errorf("time-weighted wait %.0f us, want about 557000", w)
	}
	if w := TimeWeightedUs(make([]uint64, 192), 3); w != 0 {
		t.Errorf("an empty histogram's wait %.0f, want 0", w)
	}
}
