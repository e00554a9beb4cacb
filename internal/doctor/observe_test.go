package doctor

import (
	"math"
	"sort"
	"testing"

	"github.com/skbtrace/skbtrace/internal/host"
)

func TestProcessSharesSumThreadsByTheCPUTheyLastRanOn(t *testing.T) {
	th := func(pid, tid int, comm string, user, sys uint64, cpu int) host.ThreadTimes {
		return host.ThreadTimes{PID: pid, TID: tid, Comm: comm, User: user, System: sys, CPU: cpu}
	}
	before := map[int]host.ThreadTimes{
		10: th(10, 10, "hog", 1000, 0, 1),
		20: th(20, 20, "srv", 50, 50, 0),
		21: th(20, 21, "srv-worker", 10, 10, 0),
		30: th(30, 30, "old", 500, 0, 0), // exited; its id reused below
		40: th(40, 40, "idle", 7, 7, 0),
	}
	after := map[int]host.ThreadTimes{
		10: th(10, 10, "hog", 1100, 0, 1),       // 1 s of user on CPU 1
		20: th(20, 20, "srv", 70, 90, 0),        // 0.2 s user, 0.4 s system on CPU 0
		21: th(20, 21, "srv-worker", 40, 10, 1), // moved to CPU 1: 0.3 s user there
		22: th(20, 22, "srv-worker", 20, 0, 0),  // started since: 0.2 s user on CPU 0
		30: th(31, 30, "new", 40, 0, 1),         // another process's thread: counted from zero
		40: th(40, 40, "idle", 7, 7, 0),         // no time: left out
	}
	got := ProcessShares(before, after, 2)
	want := []ProcessCPU{
		{PID: 10, Comm: "hog", CPU: 1, User: 0.5},
		{PID: 20, Comm: "srv", CPU: 0, User: 0.2, System: 0.2},
		{PID: 20, Comm: "srv-worker", CPU: 1, User: 0.15},
		{PID: 31, Comm: "new", CPU: 1, User: 0.2},
	}
	sort.Slice(got, func(i, j int) bool { return got[i].PID*10+got[i].CPU < got[j].PID*10+got[j].CPU })
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PID != w.PID || g.Comm != w.Comm || g.CPU != w.CPU || math.Abs(g.User-w.User) > 1e-9 || math.Abs(g.System-w.System) > 1e-9 {
			t.Errorf("%d: got %+v, want %+v", i, g, w)
		}
	}
	if ProcessShares(before, after, 0) != nil {
		t.Error("no time, yet shares")
	}
}
