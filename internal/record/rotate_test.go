package record

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

var testAddrs = tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:5201"), 7)

// writeEvents records n send-limit runs into w, flushing a block every
// perBlock (a multiple of 4) events, with the namespace named once at the
// start as the recorder does; within a block, every other pair of numbers
// comes swapped, as events from two CPUs do.
func writeEvents(t *testing.T, w *tracetest.Writer, n, perBlock int) {
	t.Helper()
	if err := w.AppendNetns(trace.Netns{Inode: 7, Name: "blue"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		seq := uint64(i)
		switch i % 4 {
		case 1:
			seq++
		case 2:
			seq--
		}
		ev := tracetest.Sendlim(seq, 1e9+uint64(i)*1e6, 1e9+uint64(i)*1e6-5e5, 0, 0x1000, testAddrs, uint8(event.SendlimCwnd), 1, 1)
		if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
			t.Fatal(err)
		}
		if (i+1)%perBlock == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.AppendEnd(trace.End{NextSeq: uint64(n)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// replayFiles reads files in order as one recording.
func replayFiles(t *testing.T, names ...string) (*analyze.Summary, []uint64) {
	t.Helper()
	var rs []*trace.Reader
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		r, err := trace.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rs = append(rs, r)
	}
	sum := analyze.NewSummary()
	var seqs []uint64
	if err := analyze.ReplayFiles(rs, &event.Filter{}, sum, func(ev *event.Event) error { seqs = append(seqs, ev.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	return sum, seqs
}

func TestRotationKeepsFilesWithinTheSizeAndEachReadsAlone(t *testing.T) {
	base := filepath.Join(t.TempDir(), "run.trace")
	rot, err := NewRotator(base, MinFileSize, 3)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tracetest.NewWriter(rot, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	// About 9 MB of send-limit runs in blocks of four events, small enough
	// that files fill to within a few bytes of their size: 9 files, 3 kept.
	const n = 60000
	writeEvents(t, w, n, 4)
	if err := rot.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rot.Files) != 3 || rot.Removed < 3 {
		t.Fatalf("files %v, %d removed; want the newest 3 and the rest removed", rot.Files, rot.Removed)
	}
	matches, _ := filepath.Glob(base + ".*")
	if len(matches) != 3 {
		t.Errorf("%d files on disk, want 3: %v", len(matches), matches)
	}
	for _, name := range rot.Files {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > MinFileSize {
			t.Errorf("%s holds %d bytes, more than %d", name, st.Size(), MinFileSize)
		}
		sum, seqs := replayFiles(t, name)
		if !sum.Ended || sum.Missing != 0 || sum.Late != 0 || len(seqs) == 0 || sum.Names.Netns[7] != "blue" {
			t.Errorf("%s alone: %d events, ended %v, missing %d, late %d, netns 7 %q; want events, ended, none missing or late, named",
				name, len(seqs), sum.Ended, sum.Missing, sum.Late, sum.Names.Netns[7])
		}
	}
	sum, seqs := replayFiles(t, rot.Files...)
	if !sum.Ended || sum.Missing != 0 || sum.Late != 0 || seqs[len(seqs)-1] != n-1 {
		t.Errorf("the kept files in order: %d events up to %d, ended %v, missing %d, late %d", len(seqs), seqs[len(seqs)-1], sum.Ended, sum.Missing, sum.Late)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("seq %d follows %d", seqs[i], seqs[i-1])
		}
	}
}

func TestRotationRefusesTinyFiles(t *testing.T) {
	if _, err := NewRotator(filepath.Join(t.TempDir(), "x"), 4096, 0); err == nil {
		t.Error("a 4 KB file size was accepted")
	}
}

// A file closes with an end record: it must fit within the size too, for
// every size of block that could come next.
func TestRotationLeavesRoomForTheEndRecord(t *testing.T) {
	for perBlock := 1; perBlock <= 6; perBlock++ {
		base := filepath.Join(t.TempDir(), "run.trace")
		rot, err := NewRotator(base, MinFileSize, 0)
		if err != nil {
			t.Fatal(err)
		}
		w, err := tracetest.NewWriter(rot, trace.NativeOrder)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20000; i++ {
			ev := tracetest.Sendlim(uint64(i), 1e9+uint64(i)*1e6, 1e9, 0, 0x1000, testAddrs, uint8(event.SendlimCwnd), 1, 1)
			if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
				t.Fatal(err)
			}
			if (i+1)%perBlock == 0 {
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := rot.Close(); err != nil {
			t.Fatal(err)
		}
		for _, name := range rot.Files {
			if st, err := os.Stat(name); err != nil || st.Size() > MinFileSize {
				t.Errorf("blocks of %d events: %s holds %d bytes, over %d", perBlock, name, st.Size(), MinFileSize)
			}
		}
	}
}
