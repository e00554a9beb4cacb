package observe

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// cgroupTree copies a fixture's cgroup tree (testdata/cgroup/VERSION) to
// a directory the test may change, and finds its cpu hierarchy.
func cgroupTree(t *testing.T, version string) (root string, hiers []cgroupHier) {
	t.Helper()
	root = t.TempDir()
	if err := os.CopyFS(root, os.DirFS(filepath.Join("testdata", "cgroup", version))); err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile(filepath.Join(root, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	return root, cpuHierarchies(mi, root)
}

// ends moves the fixture's end readings (NAME.end) into place.
func ends(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.Rename(filepath.Join(dir, n+".end"), filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// observed runs a watch over the fixture: the start readings, then the
// end ones, two seconds later.
func observed(t *testing.T, hiers []cgroupHier, atEnd func()) []doctor.CgroupCPU {
	t.Helper()
	w := newCgroupWatch(hiers, filepath.Join("testdata", "cgroup", "proc"))
	w.begin()
	atEnd()
	w.start = w.start.Add(-2 * time.Second)
	cgs, notes := w.finish()
	if len(notes) > 0 {
		t.Errorf("notes: %v", notes)
	}
	return cgs
}

// cgroup v1 as a hybrid host mounts it (cpu with cpuacct, a cgroup2 mount
// without controllers beside): the quota of a docker container's cgroup,
// its throttling over the observation (throttled_time in ns), its usage
// from cpuacct, its process and that process's TCP sockets (IPv4 and an
// IPv4-mapped IPv6 one; not the listener); a cgroup without a quota
// (user.slice, sshd's socket) is left out.
func TestCgroupWatchReadsV1QuotaThrottlingAndSockets(t *testing.T) {
	root, hiers := cgroupTree(t, "v1")
	if len(hiers) != 1 || hiers[0].version != 1 || hiers[0].root != filepath.Join(root, "sys/fs/cgroup/cpu,cpuacct") {
		t.Fatalf("hierarchies %+v, want v1's cpu,cpuacct alone", hiers)
	}
	dir := filepath.Join(hiers[0].root, "system.slice", "docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope")
	cgs := observed(t, hiers, func() { ends(t, dir, "cpu.stat", "cpuacct.usage") })
	if len(cgs) != 1 {
		t.Fatalf("cgroups %+v, want the container's alone", cgs)
	}
	c := cgs[0]
	if c.Version != 1 || c.Dir != dir || c.QuotaUs != 50000 || c.PeriodUs != 100000 || c.CPUs() != 0.5 {
		t.Errorf("quota: %+v", c)
	}
	if c.Periods != 20 || c.Throttled != 19 || c.ThrottledUs != 900000 || c.UsageUs == nil || *c.UsageUs != 1000000 || c.Created {
		t.Errorf("throttling over the observation: periods %d throttled %d for %d us, usage %v, created %v", c.Periods, c.Throttled, c.ThrottledUs, c.UsageUs, c.Created)
	}
	if c.Seconds < 1.9 || c.Seconds > 3 {
		t.Errorf("seconds %.2f, want about 2", c.Seconds)
	}
	if c.Runtime != "docker" || c.Container != "0123456789ab" || c.Unit != "docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope" {
		t.Errorf("owner: runtime %q container %q unit %q", c.Runtime, c.Container, c.Unit)
	}
	if !slices.Equal(c.Processes, []doctor.CgroupProcess{{PID: 4242, Comm: "iperf3", Threads: 1}}) {
		t.Errorf("processes %+v", c.Processes)
	}
	if want := []string{"10.200.0.1:45298 10.200.0.2:5201", "10.200.0.1:45300 10.200.0.2:5201"}; !slices.Equal(c.Flows, want) {
		t.Errorf("flows %q, want %q", c.Flows, want)
	}
	l := c.Limit()
	if l.Kind != "cgroup_cpu_max" || l.SetBy == nil || l.SetBy.Container != "docker 0123456789ab" || !slices.Equal(l.Applies.PIDs, []int{4242}) {
		t.Errorf("limit %+v", l)
	}
}

// cgroup v2: cpu.max and cpu.stat's throttled_usec and usage_usec, a
// systemd service's cgroup; one that gets its quota during the
// observation counts from zero.
func TestCgroupWatchReadsV2QuotaAndOneSetDuringTheObservation(t *testing.T) {
	root, hiers := cgroupTree(t, "v2")
	if len(hiers) != 1 || hiers[0].version != 2 || hiers[0].root != filepath.Join(root, "sys/fs/cgroup") {
		t.Fatalf("hierarchies %+v, want v2's", hiers)
	}
	dir := filepath.Join(hiers[0].root, "system.slice", "iperf3.service")
	cgs := observed(t, hiers, func() { ends(t, dir, "cpu.stat") })
	if len(cgs) != 1 {
		t.Fatalf("cgroups %+v, want the service's", cgs)
	}
	c := cgs[0]
	if c.Version != 2 || c.QuotaUs != 20000 || c.Periods != 20 || c.Throttled != 20 || c.ThrottledUs != 1600000 || c.UsageUs == nil || *c.UsageUs != 400000 {
		t.Errorf("v2 reading: %+v", c)
	}
	if c.Runtime != "systemd" || c.Unit != "iperf3.service" || c.Path != "/system.slice/iperf3.service" {
		t.Errorf("owner: runtime %q unit %q path %q", c.Runtime, c.Unit, c.Path)
	}

	_, hiers = cgroupTree(t, "v2")
	dir = filepath.Join(hiers[0].root, "system.slice", "iperf3.service")
	if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("max 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cgs = observed(t, hiers, func() {
		ends(t, dir, "cpu.stat")
		if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("20000 100000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if len(cgs) != 1 || !cgs[0].Created || cgs[0].Periods != 70 || cgs[0].ThrottledUs != 4600000 {
		t.Errorf("a quota set during the observation: %+v, want its counters whole, created", cgs)
	}
}

// A cgroup2 mount whose cgroup.controllers lacks cpu carries no quota.
func TestCPUHierarchiesSkipACgroup2WithoutTheCPUController(t *testing.T) {
	root, _ := cgroupTree(t, "v2")
	if err := os.WriteFile(filepath.Join(root, "sys/fs/cgroup/cgroup.controllers"), []byte("memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mi, _ := os.ReadFile(filepath.Join(root, "mountinfo"))
	if h := cpuHierarchies(mi, root); len(h) != 0 {
		t.Errorf("hierarchies %+v, want none", h)
	}
}
