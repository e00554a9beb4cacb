package doctor

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// rx-backlog wants evidence that the wait costs throughput, not only a busy
// CPU. virtio-hub-paced.json is the virtio-net hub wire's evidence
// (virtio-hub.json: a 6.12 guest, CPU 0 93 % busy) with the numbers of CI's
// nic-baseline on a fresh machine: iperf3 paced at 10 Mbit/s for 3 s, its
// sender app-limited 99 % of the time, its received packets waiting 2.8 ms
// (weighted by time) between the driver and TCP, which the rule called a
// warning.
func TestRxBacklogWantsAWaitThatCostsThroughput(t *testing.T) {
	// bulk makes the stream's sender one with more to send (cwnd-limited).
	bulk := func(ev *Evidence) {
		for i := range ev.Flows {
			if f := &ev.Flows[i]; f.BytesAcked > 1<<20 {
				f.LimitShares = map[string]float64{"cwnd": 0.8, "app": 0.05, "ok": 0.15}
			}
		}
	}
	rtt := func(us uint32) func(*Evidence) {
		return func(ev *Evidence) {
			for i := range ev.Flows {
				if f := &ev.Flows[i]; f.BytesAcked > 1<<20 {
					f.RTTus = us
				}
			}
		}
	}
	// unobserved leaves only the receiving end, as the doctor on a receiving host sees it.
	unobserved := func(ev *Evidence) {
		var keep []Flow
		for _, f := range ev.Flows {
			if f.BytesAcked <= 1<<20 {
				keep = append(keep, f)
			}
		}
		ev.Flows = keep
	}
	drops := func(ev *Evidence) { ev.Softnet.Dropped = 40 }
	cases := []struct {
		name   string
		adjust []func(*Evidence)
		fire   bool
		want   string
	}{
		{"paced by its application", nil, false, ""},
		{"paced, with backlog drops", []func(*Evidence){drops}, false, ""},
		{"bulk, the wait 12 % of the sender's 22.5 ms round trip", []func(*Evidence){bulk}, false, ""},
		{"bulk, the wait 35 % of the sender's 8 ms round trip", []func(*Evidence){bulk, rtt(8000)}, true, "the wait is 35 % of the round trip (8.0 ms, the sender's"},
		{"bulk, backlog drops", []func(*Evidence){bulk, drops}, true, "40 packets dropped by full per-CPU backlogs"},
		{"the sender unobserved, the wait 43 % of the receiver's 6.5 ms", []func(*Evidence){unobserved}, true, "the receiver's estimate"},
		{"the sender unobserved, the wait 12 % of the receiver's 22.5 ms", []func(*Evidence){unobserved, func(ev *Evidence) { ev.Flows[0].RTTus = 22504 }}, false, ""},
	}
	rule := stageRule("rx-backlog")
	for _, c := range cases {
		ev := load(t, "nic/virtio-hub-paced.json")
		for _, a := range c.adjust {
			a(ev)
		}
		fs := rule(ev)
		if got := len(fs) > 0; got != c.fire {
			t.Errorf("%s: fired %v, want %v: %v", c.name, got, c.fire, fs)
			continue
		}
		if !c.fire {
			continue
		}
		f := fs[0]
		if f.Severity != finding.Warning || !strings.Contains(f.Title, "wait 2.8 ms before TCP") || !strings.Contains(strings.Join(f.Evidence, "\n"), c.want) {
			t.Errorf("%s: %s %q, evidence lacks %q:\n%s", c.name, f.Severity, f.Title, c.want, strings.Join(f.Evidence, "\n"))
		}
	}
	// The whole doctor on the paced stream: healthy, as the lab's nic-baseline expects.
	if top := Diagnose(load(t, "nic/virtio-hub-paced.json")).Top(finding.Warning); top != nil && top.ID == "rx-backlog" {
		t.Errorf("the paced stream's top finding is rx-backlog: %s", top.Title)
	}
}

// The lab's reader-late: the reader is the limit, named as the process
// that read the bytes, and the first remedy is its change.
func TestReaderLateNamesTheReader(t *testing.T) {
	rep := Diagnose(load(t, "lab/reader-late.json"))
	for _, f := range rep.Findings {
		if f.ID != "reader-late" {
			continue
		}
		if f.Limit == nil || f.Limit.Kind != KindReadPace || f.Limit.SetBy == nil || f.Limit.SetBy.PID == 0 {
			t.Fatalf("limit %+v, want the reader's %s", f.Limit, KindReadPace)
		}
		if want := "in " + f.Limit.SetBy.String() + ": read as soon as data arrives"; !strings.HasPrefix(f.Remedy[0], want) {
			t.Errorf("remedy %q, want it to start %q", f.Remedy[0], want)
		}
		return
	}
	t.Fatalf("no reader-late finding: %v", ids(rep.Findings))
}
