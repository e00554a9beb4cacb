package analyze

import (
	"math/rand/v2"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
)

func collect(o *Orderer, seqs []uint64, end uint64) []uint64 {
	var out []uint64
	emit := func(e *event.Event) error { out = append(out, e.Seq); return nil }
	for _, s := range seqs {
		ev := event.Event{Seq: s}
		o.Push(&ev, emit)
	}
	o.Flush(end, emit)
	return out
}

func TestOrdererRestoresOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	seqs := make([]uint64, 10000)
	for i := range seqs {
		seqs[i] = uint64(i)
	}
	// Local swaps, as two CPUs racing between numbering and reserving produce.
	for i := 0; i+1 < len(seqs); i += 1 + rng.IntN(5) {
		seqs[i], seqs[i+1] = seqs[i+1], seqs[i]
	}
	o := NewOrderer(64)
	out := collect(o, seqs, 10000)
	for i, s := range out {
		if s != uint64(i) {
			t.Fatalf("position %d has seq %d", i, s)
		}
	}
	if o.Gaps != 0 || o.Missing != 0 || o.Late != 0 {
		t.Fatalf("gaps %d missing %d late %d, want none", o.Gaps, o.Missing, o.Late)
	}
}

func TestOrdererCountsGaps(t *testing.T) {
	o := NewOrderer(4)
	out := collect(o, []uint64{0, 1, 5, 6, 7, 8, 9, 10, 11, 20}, 25)
	if len(out) != 10 {
		t.Fatalf("emitted %v", out)
	}
	// 2..4 missing, 12..19 missing, 21..24 missing per the end record.
	if o.Gaps != 3 || o.Missing != 3+8+4 {
		t.Fatalf("gaps %d missing %d, want 3 and 15", o.Gaps, o.Missing)
	}
}

func TestOrdererLateEventStillEmitted(t *testing.T) {
	o := NewOrderer(2)
	out := collect(o, []uint64{0, 2, 3, 4, 1}, 0)
	if len(out) != 5 || o.Late != 1 || o.Missing != 1 {
		t.Fatalf("out %v late %d missing %d", out, o.Late, o.Missing)
	}
}

// Between two flight-recorder windows, or at the start of a rotated file,
// the numbers left out are no gap; those below the resume point that did
// come still go out in order, and a gap after it still counts.
func TestOrdererResumeSkipsWhatWasLeftOut(t *testing.T) {
	o := NewOrderer(8)
	var out []uint64
	emit := func(e *event.Event) error { out = append(out, e.Seq); return nil }
	push := func(seqs ...uint64) {
		for _, s := range seqs {
			ev := event.Event{Seq: s}
			o.Push(&ev, emit)
		}
	}
	push(100, 102, 101, 104) // a window that starts at 100, 103 in a block left out
	if err := o.Resume(100, emit); err != nil {
		t.Fatal(err)
	}
	push(105, 103)
	if err := o.Resume(500, emit); err != nil {
		t.Fatal(err)
	}
	push(501, 500, 502, 510)
	o.Flush(511, emit)
	want := []uint64{100, 101, 102, 103, 104, 105, 500, 501, 502, 510}
	if len(out) != len(want) {
		t.Fatalf("emitted %v, want %v", out, want)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("emitted %v, want %v", out, want)
		}
	}
	if o.Gaps != 1 || o.Missing != 7 || o.Late != 0 {
		t.Errorf("gaps %d missing %d late %d; want 1 gap of 7 (503..509), none late", o.Gaps, o.Missing, o.Late)
	}
}
