package analyze_test

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// BenchmarkStat summarizes a trace (testdata's churn fixture, or the file
// SKBTRACE_BENCH_TRACE names, such as a big recording) and reports what it
// allocates per event, and what stays live at the end per connection:
// stat's memory must follow the connections, not the events.
func BenchmarkStat(b *testing.B) {
	path := os.Getenv("SKBTRACE_BENCH_TRACE")
	if path == "" {
		path = filepath.Join("testdata", "churn.trace")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("reading the benchmark's trace: %v", err)
	}
	var events, conns, allocs, allocated uint64
	var before, after runtime.MemStats
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// Twice: what sync.Pools held goes at the second collection.
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		st, sum := analyze.NewStat(), analyze.NewSummary()
		sum.OnWindow = st.Gap
		if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error { st.Add(ev); return nil }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		runtime.ReadMemStats(&after)
		allocs += after.Mallocs - before.Mallocs
		allocated += after.TotalAlloc - before.TotalAlloc
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&after)
		events, conns = st.Events, uint64(len(st.Connections))
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(conns), "live-B/conn")
		runtime.KeepAlive(st)
		b.StartTimer()
	}
	n := float64(events) * float64(b.N)
	b.ReportMetric(float64(allocated)/n, "B/event")
	b.ReportMetric(float64(allocs)/n, "allocs/event")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
	b.ReportMetric(float64(conns), "conns")
}
