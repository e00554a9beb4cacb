package e2e

import (
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/lab"
)

var lostRe = regexp.MustCompile(`lost (\d+)`)

// BenchmarkRecordOverheadVeth compares a veth stream between two namespaces
// with and without `skbtrace record` (default families), in interleaved
// runs. Targets: traced/untraced >= 0.97 and no lost events.
func BenchmarkRecordOverheadVeth(b *testing.B) {
	requireRoot(b)
	pair, err := lab.NewPair()
	if err != nil {
		b.Fatal(err)
	}
	defer pair.Close()
	const runs, length = 5, 5 * time.Second
	var plain, traced float64
	var lost, events int
	for i := 0; i < runs; i++ {
		plain += vethStream(b, pair, length, 0)
		rec := startRecord(b, append([]string{"--filter-port", "5201"}, benchRecordArgs()...)...)
		traced += vethStream(b, pair, length, 0)
		rec.stop(b, syscall.SIGINT)
		evs, summary, err := parseJSON(b, rec.file)
		if err != nil {
			b.Fatalf("parse: %v: %s", err, summary)
		}
		events += len(evs)
		if m := lostRe.FindStringSubmatch(summary); m != nil {
			n, _ := strconv.Atoi(m[1])
			lost += n
		}
	}
	b.ReportMetric(plain/runs*8/1e9, "untraced-Gbit/s")
	b.ReportMetric(traced/runs*8/1e9, "traced-Gbit/s")
	b.ReportMetric(traced/plain, "traced/untraced")
	b.ReportMetric(float64(events)/runs/length.Seconds(), "events/s")
	b.ReportMetric(float64(lost), "lost-events")
}

func benchRecordArgs() []string {
	if e := os.Getenv("BENCH_EVENTS"); e != "" {
		return []string{"-e", e}
	}
	return nil
}
