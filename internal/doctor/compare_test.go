package doctor

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
)

// compare reads doctor reports through ReadReport: what it measures of two
// lab runs' reports.

func TestDoctorReportsNameDropsAndRetransmits(t *testing.T) {
	report := func(name string) *compare.Run {
		rep := Diagnose(load(t, filepath.Join("lab", name)))
		var buf bytes.Buffer
		if err := rep.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		run, err := compare.Load(name, &buf, ReadReport)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	r, err := compare.Compare(report("baseline.json"), report("packet-loss.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := r.Metric("retransmits"); !ok || m.B <= m.A {
		t.Errorf("retransmits did not rise: %+v", m)
	}
	if m, ok := r.Metric("TCP goodput"); !ok || m.Change > -0.1 {
		t.Errorf("goodput did not fall: %+v", m)
	}
	if !strings.Contains(r.Headline, "TCP goodput -") {
		t.Errorf("headline: %s", r.Headline)
	}
}

// Of two doctor reports the headline is what moved the flow: a sender that
// went from free to sndbuf-bound, not a routine drop beside it.
func TestReportHeadlineIsTheLimitNotARoutineDrop(t *testing.T) {
	b := load(t, filepath.Join("lab", "sndbuf-limited.json"))
	b.Drops = append(b.Drops, Drop{Reason: "QUEUE_PURGE", Location: "tcp_write_queue_purge+0x1c", Count: 1})
	r, err := compare.Compare(Diagnose(load(t, filepath.Join("lab", "baseline.json"))).CompareRun("a"), Diagnose(b).CompareRun("b"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.Headline, "QUEUE_PURGE") || len(r.Metrics) == 0 || r.Metrics[0].Name != "send limit sndbuf" {
		t.Errorf("headline %q, metrics %+v: want the sndbuf share first and no routine drop", r.Headline, r.Metrics)
	}
}

// JSON that is not a doctor report is refused with one line.
func TestReadReportRefusesOtherJSON(t *testing.T) {
	for _, in := range []string{`{"findings": []}`, `{"evidence": {"seconds": 0}}`, `{"findings": [`} {
		if _, err := ReadReport("x.json", strings.NewReader(in)); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: want a one-line error, got %v", in, err)
		}
	}
}
