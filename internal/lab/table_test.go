package lab

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func TestCalibrationTable(t *testing.T) {
	reports := []Report{
		{Name: "baseline", ControlBps: 30e9, FaultBps: 30e9},
		{
			Name: "packet-loss-u32-ipid", RemedyFrom: RemedyDoctor,
			Remedy:     "ip netns exec skbtrace-13493-1-snd tc filter del dev skbs13493-1 parent 1: protocol ip prio 1 handle 800::800 u32",
			ControlBps: 34e9, FaultBps: 22e9, FixedBps: 33e9, Restored: 33.0 / 34, Gain: 1 - 22.0/33, ControlCost: 1 - 22.0/34,
			PredictedImpact: 0.29,
			Doctor: &DoctorVerdict{Top: "packet-loss", Findings: []finding.Finding{
				{ID: "ip-fragmented"},
				{ID: "packet-loss", Limit: &finding.Limit{Kind: "tc_filter_drop"}},
			}},
		},
		{
			Name: "nagle-python-rr", RemedyFrom: RemedyWorkload, RunsInOps: true,
			Remedy:     "in python3[4242]: setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, 1)",
			ControlOps: 9000, FaultOps: 24, FixedOps: 8800, Restored: 8800.0 / 9000, Gain: 1 - 24.0/8800, ControlCost: 1 - 24.0/9000,
			PredictedImpact: 0.9, Doctor: &DoctorVerdict{Top: "nagle-delay"},
		},
		{
			Name: "cpu-saturated", RemedyFrom: RemedyDoctor, Remedy: "sh -c 'chrt -a -i -p 0 13720; chrt -a -i -p 0 13719'",
			ControlBps: 38e9, FaultBps: 12e9, FixedBps: 20e9, Restored: 20.0 / 38,
			ControlRuns: []float64{38e9, 31e9, 36e9}, FixedRuns: []float64{20e9, 19e9, 20e9},
		},
		{Name: "cpu-receiver-app-work", RemedyFrom: RemedyScenario, ControlBps: 20e9, FaultBps: 5e9, FixedBps: 21e9, Restored: 1.05},
	}
	var b strings.Builder
	if err := WriteCalibrationTable(&b, reports); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("want a header, a rule and four calibrated rows (no baseline), got %d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{
		"| `packet-loss-u32-ipid` | packet-loss | `tc_filter_drop` | `ip netns exec skbtrace-ID-snd tc filter del dev skbsID parent 1: protocol ip prio 1 handle H::800 u32` | 34.00 Gbit/s | 22.00 Gbit/s | 33.00 Gbit/s | 97 % | 33 % (35 %) | 29 % |",
		"`in python3[PID]: setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, 1)` (workload switch) | 9000 ops/s | 24 ops/s | 8800 ops/s",
		"`sh -c 'chrt -a -i -p 0 PID; chrt -a -i -p 0 PID'`",
		"| 53 % |",
		"the scenario's own fix (no limit named)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "13493") || strings.Contains(out, "4242") {
		t.Errorf("a run's own names are left in the table:\n%s", out)
	}
}
