package doctor

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The lab's cgroup-cpu-quota fault run (v1 here): iperf3's client at 0.05
// CPU, throttled in 21 of 21 periods. The quota ranks first, above the
// app-limited it explains and the busy CPUs of the other work on the host,
// with the cgroup's path, its quota and the command that raises it to what
// the group's one thread can use.
func TestCgroupCPUThrottledNamesTheQuotaFirst(t *testing.T) {
	ev := load(t, "cgroup/cgroup-cpu-quota.json")
	rep := Diagnose(ev)
	f := rep.Top(finding.Warning)
	if f == nil || f.ID != "cgroup-cpu-throttled" {
		t.Fatalf("top %v, want cgroup-cpu-throttled", ids(rep.Findings))
	}
	c := ev.CgroupCPU[0]
	if f.Limit == nil || f.Limit.Kind != "cgroup_cpu_max" || f.Limit.Where.Object != c.Dir || f.Limit.Arithmetic == "" {
		t.Fatalf("limit %+v", f.Limit)
	}
	want := "sh -c 'echo 110000 > " + c.Dir + "/cpu.cfs_quota_us'"
	if len(f.Remedy) == 0 || f.Remedy[0] != want || f.Limit.Undo[0].Argv[0] != "sh" {
		t.Errorf("remedy %q, want first %q", f.Remedy, want)
	}
	joined := strings.Join(f.Evidence, "\n")
	for _, s := range []string{c.Path, "0.05 CPU", "21 of its 21 periods", "iperf3[", "tcp_sendlim [app]"} {
		if !strings.Contains(joined, s) {
			t.Errorf("evidence lacks %q:\n%s", s, joined)
		}
	}
	// The gain measured by the remedy in that run: 89 %.
	if f.Impact < 0.74 || f.Impact > 1 {
		t.Errorf("impact %.2f, want within 15 points of the 89 %% measured", f.Impact)
	}
}

// The healthy control: the client in a cgroup at 2 CPUs, never throttled.
// And the fault's cgroup when its sockets are not the observed flows', or
// when it was throttled in one period in twenty.
func TestCgroupCPUThrottledStaysQuiet(t *testing.T) {
	for name, ev := range map[string]*Evidence{
		"unreached quota": load(t, "cgroup/noise-cgroup-quota-unreached.json"),
		"other sockets": func() *Evidence {
			ev := load(t, "cgroup/cgroup-cpu-quota.json")
			ev.CgroupCPU[0].Flows = []string{"10.9.9.9:1 10.9.9.8:2"}
			return ev
		}(),
		"rarely throttled": func() *Evidence {
			ev := load(t, "cgroup/cgroup-cpu-quota.json")
			ev.CgroupCPU[0].Throttled, ev.CgroupCPU[0].ThrottledUs = 1, 50000
			return ev
		}(),
	} {
		if fs := cgroupCPUThrottled(ev); len(fs) != 0 {
			t.Errorf("%s: %v", name, fs[0].Title)
		}
	}
	if len(load(t, "cgroup/noise-cgroup-quota-unreached.json").CgroupCPU) == 0 {
		t.Error("the control's fixture has no cgroup: the quiet case proves nothing")
	}
}

// The remedy is set where the cgroup's owner sets it: systemd's property,
// the container runtime's flag, a pod's spec; cgroup v2's cpu.max.
func TestCgroupCPUThrottledRemedyByOwner(t *testing.T) {
	for _, tc := range []struct {
		path, want, second string
	}{
		{"/system.slice/iperf3.service", "systemctl set-property iperf3.service CPUQuota=110%", `echo "110000 100000" > /sys/fs/cgroup/system.slice/iperf3.service/cpu.max`},
		{"/system.slice/docker-" + strings.Repeat("ab", 32) + ".scope", "docker update --cpus 1.1 abababababab", "cpu.max"},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-" + strings.Repeat("cd", 32) + ".scope",
			"raise the pod's CPU limit (resources.limits.cpu) to 1100m", "cpu.max"},
		{"/skbtrace-lab-1-1", `sh -c 'echo "110000 100000" > /sys/fs/cgroup/skbtrace-lab-1-1/cpu.max'`, "max 100000"},
	} {
		ev := load(t, "cgroup/cgroup-cpu-quota.json")
		c := &ev.CgroupCPU[0]
		c.Version, c.Path, c.Dir = 2, tc.path, "/sys/fs/cgroup"+tc.path
		c.Runtime, c.Container, c.Unit = CgroupOwner(tc.path)
		fs := cgroupCPUThrottled(ev)
		if len(fs) != 1 {
			t.Fatalf("%s: %d findings", tc.path, len(fs))
		}
		if r := fs[0].Remedy; len(r) < 2 || !strings.HasPrefix(r[0], tc.want) || !strings.Contains(r[1], tc.second) {
			t.Errorf("%s: remedy %q, want %q then %q", tc.path, r, tc.want, tc.second)
		}
	}
}

func TestCgroupOwner(t *testing.T) {
	for _, tc := range []struct{ path, runtime, container, unit string }{
		{"/system.slice/nginx.service", "systemd", "", "nginx.service"},
		{"/user.slice/user-1000.slice/session-2.scope", "systemd", "", "session-2.scope"},
		{"/docker/" + strings.Repeat("0f", 32), "docker", "0f0f0f0f0f0f", ""},
		{"/machine.slice/libpod-" + strings.Repeat("1a", 32) + ".scope/container", "podman", "1a1a1a1a1a1a", "libpod-" + strings.Repeat("1a", 32) + ".scope"},
		{"/kubepods/burstable/pod7f3e/" + strings.Repeat("9b", 32), "kubernetes", "9b9b9b9b9b9b", ""},
		{"/skbtrace-lab-10-1", "", "", ""},
	} {
		r, c, u := CgroupOwner(tc.path)
		if r != tc.runtime || c != tc.container || u != tc.unit {
			t.Errorf("%s: %q %q %q, want %q %q %q", tc.path, r, c, u, tc.runtime, tc.container, tc.unit)
		}
	}
}
