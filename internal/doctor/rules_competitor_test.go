package doctor

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func cpuFinding(t *testing.T, ev *Evidence) *finding.Finding {
	t.Helper()
	return warningOf(t, ev, "cpu-saturated")
}

// The lab's cpu-saturated (two busy loops on the receiver's CPU) and
// cpu-python-hog-sender (a python3 loop on the sender's): processes that
// made no socket call. They are the limit, named with their share, and the
// first remedy puts every thread of each in the idle class; the normal
// class is how to undo it.
func TestCPUCompetitorsAreTheLimit(t *testing.T) {
	for _, name := range []string{"cpu/cpu-saturated.json", "cpu/cpu-python-hog-sender.json"} {
		ev := load(t, name)
		f := cpuFinding(t, ev)
		if f.Limit == nil || f.Limit.Kind != KindCPUCompetitor || f.Limit.Where.Layer != finding.LayerProcess {
			t.Fatalf("%s: limit %+v, want %s", name, f.Limit, KindCPUCompetitor)
		}
		others, _ := otherWorkOn(ev, f.Limit.Applies.CPUs[0])
		for _, p := range others {
			if p.User >= minCompetitor && !strings.Contains(f.Remedy[0], "chrt -a -i -p 0 "+strconv.Itoa(p.PID)) {
				t.Errorf("%s: %s[%d] at %.0f %% is not in the first remedy %q", name, p.Comm, p.PID, 100*p.User, f.Remedy[0])
			}
		}
		if f.Limit.SetBy == nil || f.Limit.SetBy.PID != others[0].PID {
			t.Errorf("%s: set by %v, want the busiest competitor %d", name, f.Limit.SetBy, others[0].PID)
		}
		if !strings.Contains(strings.Join(f.Remedy, "\n"), "chrt -a -o -p 0 PID") {
			t.Errorf("%s: no way back in %q", name, f.Remedy)
		}
	}
}

// Processes that made socket calls are the flows' own, not competitors:
// with the busy loops' samples charged to a sender, no limit is named.
func TestCPUCompetitorIsNeverAFlowsOwnProcess(t *testing.T) {
	ev := load(t, "cpu/cpu-saturated.json")
	for i := range ev.Processes {
		ev.SockIO = append(ev.SockIO, SockIO{Pid: uint32(ev.Processes[i].PID), Comm: ev.Processes[i].Comm, Dir: "send", Calls: 1, Bytes: 1})
	}
	rep := Diagnose(ev)
	for _, f := range rep.Findings {
		if f.Limit != nil && f.Limit.Kind == KindCPUCompetitor {
			t.Errorf("a process that sends is named a competitor: %s", f.Limit.Value)
		}
	}
}

// With the CPU to themselves the flows batch more and cost less per byte:
// over veth a stream's rate on this host bounds what they gain, not the
// competitor's share of the CPU (the lab's cpu-python-hog-receiver gained
// 77 % where its loop's 60 % of the CPU was the estimate; -sender gained
// 51 % where 59 % was).
func TestCompetitorImpactFromTheStreamRate(t *testing.T) {
	ev := load(t, "cpu/cpu-python-hog-sender.json")
	tx, _ := ev.sendersOverVirtual()
	ev.CopyRate = copyRateFor(4 * tx)
	f := findingOf(Diagnose(ev), "cpu-saturated")
	if f == nil || f.Limit == nil || f.Limit.Kind != KindCPUCompetitor {
		t.Fatalf("no cpu-saturated finding naming its competitor: %+v", f)
	}
	if want := 0.75; math.Abs(f.Impact-want) > 0.02 || !strings.Contains(f.ImpactText, "with the CPU to themselves") {
		t.Errorf("impact %.2f %q, want %.2f from the stream's rate", f.Impact, f.ImpactText, want)
	}
}
