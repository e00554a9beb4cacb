package doctor

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// CgroupCPU is a cgroup with a CPU quota (cgroup v2 cpu.max, v1
// cpu.cfs_quota_us) whose processes owned observed TCP sockets, with its
// throttling over the observation (cpu.stat, the change over Seconds).
type CgroupCPU struct {
	// Version is the cgroup hierarchy's (1 or 2); Path the cgroup's path in
	// it, as /proc/PID/cgroup names it; Dir its directory on the observed
	// host, where the quota is written.
	Version int    `json:"version"`
	Path    string `json:"path"`
	Dir     string `json:"dir"`
	// QuotaUs of CPU time per PeriodUs: QuotaUs/PeriodUs CPUs.
	QuotaUs  int64 `json:"quota_us"`
	PeriodUs int64 `json:"period_us"`
	// Periods that began with the group runnable, those in which it used up
	// its quota and was throttled, and how long its run queues stayed
	// throttled (summed over CPUs: a group running on two CPUs can wait up
	// to twice the observation).
	Periods     uint64  `json:"nr_periods"`
	Throttled   uint64  `json:"nr_throttled"`
	ThrottledUs uint64  `json:"throttled_us"`
	Seconds     float64 `json:"seconds"`
	// UsageUs is the CPU time the group used (v2 cpu.stat usage_usec, v1
	// cpuacct.usage where cpuacct is mounted with cpu); nil where unknown.
	UsageUs *uint64 `json:"usage_us,omitempty"`
	// Created says the cgroup appeared (or got its quota) during the
	// observation: its counters count from then.
	Created bool `json:"created,omitempty"`
	// Processes are its processes seen owning TCP sockets, and Flows those
	// sockets as "local peer".
	Processes []CgroupProcess `json:"processes"`
	Flows     []string        `json:"flows,omitempty"`
	// Unit and Container name who owns the cgroup, from its path: a systemd
	// unit, a container's runtime and id.
	Unit      string `json:"unit,omitempty"`
	Container string `json:"container,omitempty"`
	Runtime   string `json:"runtime,omitempty"`
}

// CgroupProcess is a process of a cgroup.
type CgroupProcess struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	// Threads it ran when first seen: each can use one CPU at most.
	Threads int `json:"threads,omitempty"`
}

// CPUs is the quota as a share of one CPU.
func (c *CgroupCPU) CPUs() float64 {
	if c.PeriodUs <= 0 {
		return 0
	}
	return float64(c.QuotaUs) / float64(c.PeriodUs)
}

// Limit is the quota as a setting that holds the group's processes back.
func (c *CgroupCPU) Limit() finding.Limit {
	l := finding.Limit{Kind: "cgroup_cpu_max", Where: finding.Place{Layer: finding.LayerCgroup, Object: c.Dir}}
	if c.Version == 2 {
		l.Value = fmt.Sprintf("%d %d (%.2f CPU)", c.QuotaUs, c.PeriodUs, c.CPUs())
		l.Source = "cgroup v2 " + path.Join(c.Dir, "cpu.max")
	} else {
		l.Value = fmt.Sprintf("cfs_quota_us %d, cfs_period_us %d (%.2f CPU)", c.QuotaUs, c.PeriodUs, c.CPUs())
		l.Source = "cgroup v1 " + path.Join(c.Dir, "cpu.cfs_quota_us")
	}
	if c.Unit != "" || c.Container != "" {
		l.SetBy = &finding.Owner{Unit: c.Unit, Container: c.Container}
		if c.Runtime != "" && c.Runtime != "systemd" {
			l.SetBy.Container = c.Runtime + " " + c.Container
		}
	}
	l.Applies.Flows = slices.Clone(c.Flows)
	for _, p := range c.Processes {
		l.Applies.PIDs = append(l.Applies.PIDs, p.PID)
	}
	return l
}

var (
	// A container's id in its cgroup's name: docker-ID.scope (systemd
	// driver), docker/ID (cgroupfs driver), libpod-ID.scope (podman),
	// cri-containerd-ID.scope and crio-ID.scope (Kubernetes' runtimes).
	containerScope = regexp.MustCompile(`^(docker|libpod|cri-containerd|crio)-([0-9a-f]{12,})\.scope$`)
	containerID    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// CgroupOwner names who owns a cgroup from its path: the runtime
// ("docker", "podman", "kubernetes", "systemd" or ""), a container's id and
// the systemd unit whose cgroup it is.
func CgroupOwner(p string) (runtime, container, unit string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	kube := slices.ContainsFunc(parts, func(s string) bool { return strings.HasPrefix(s, "kubepods") })
	for i := len(parts) - 1; i >= 0; i-- {
		s := parts[i]
		if m := containerScope.FindStringSubmatch(s); m != nil {
			runtime, container = map[string]string{"docker": "docker", "libpod": "podman", "cri-containerd": "kubernetes", "crio": "kubernetes"}[m[1]], m[2]
			if runtime == "docker" || runtime == "podman" {
				unit = s
			}
			break
		}
		if containerID.MatchString(s) && i > 0 {
			switch {
			case parts[i-1] == "docker":
				runtime, container = "docker", s
			case kube || strings.HasPrefix(parts[i-1], "pod"):
				runtime, container = "kubernetes", s
			default:
				continue
			}
			break
		}
		if strings.HasSuffix(s, ".service") || strings.HasSuffix(s, ".scope") {
			return "systemd", "", s
		}
	}
	if runtime == "" && kube {
		runtime = "kubernetes"
	}
	if len(container) > 12 {
		container = container[:12]
	}
	return runtime, container, unit
}

// Throttling bars: a group throttled in this share of its periods, whose
// run queues waited this share of the observation, held its processes.
const (
	throttledPeriods = 0.2
	throttledTime    = 0.1
)

// cgroupCPUThrottled names the CPU quota that held the processes moving
// flows' bytes: their cgroup ran out of quota and its run queues waited.
func cgroupCPUThrottled(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	covered := map[string]bool{}
	cgs := slices.Clone(ev.CgroupCPU)
	// The group that waited longest first: a nested quota that held the
	// same flows is the same cause told twice.
	slices.SortStableFunc(cgs, func(a, b CgroupCPU) int {
		return -cmpFloat(float64(a.ThrottledUs)/max(a.Seconds, 1e-9), float64(b.ThrottledUs)/max(b.Seconds, 1e-9))
	})
	for i := range cgs {
		c := &cgs[i]
		if c.Periods == 0 || c.Seconds <= 0 || c.PeriodUs <= 0 {
			continue
		}
		flows := cgroupFlows(ev, c)
		if len(flows) == 0 || slices.IndexFunc(flows, func(f *Flow) bool { return !covered[flowKey(f)] }) < 0 {
			continue
		}
		periodShare := float64(c.Throttled) / float64(c.Periods)
		waited := float64(c.ThrottledUs) / 1e6 / c.Seconds // CPUs' worth of waiting
		if periodShare < throttledPeriods || waited < throttledTime {
			continue
		}
		for _, f := range flows {
			covered[flowKey(f)] = true
		}
		used, usedFrom := cgroupUsage(ev, c)
		wanted := used + waited
		// What it wanted with a quarter more for bursts, in tenths of a CPU;
		// at least a CPU for each of its threads (used and waited are a
		// lower bound: between throttles a sender also blocks on its socket),
		// at most the host's CPUs, above the quota it has.
		threads := 0
		for _, p := range c.Processes {
			threads += p.Threads
		}
		next := math.Ceil(wanted*1.25*10) / 10
		sized := fmt.Sprintf("x1.25 for bursts = %.1f CPU", next)
		if float64(threads) > next {
			next = float64(threads)
			sized = fmt.Sprintf("its processes' %s can use %d CPU", units.Count(threads, "thread", "threads"), threads)
		}
		if n := float64(ev.CPUCount); n > 0 && next > n {
			next, sized = n, sized+fmt.Sprintf(", the host has %d", ev.CPUCount)
		}
		next = max(next, math.Ceil(c.CPUs()*10+1)/10)
		quota := int64(math.Round(next * float64(c.PeriodUs)))
		impact := 0.0
		if wanted > 0 {
			impact = min(max(1-used/wanted, 0), 0.95)
		}
		l := c.Limit()
		l.Arithmetic = fmt.Sprintf("the group used %.2f CPU (%s) and its run queues waited %.2f CPU (throttled %s over %s): it wanted at least %.2f CPU; "+
			"%s: a quota of %.1f CPU = %d us per %d us period", used, usedFrom, waited,
			units.Duration(time.Duration(c.ThrottledUs)*time.Microsecond), units.Duration(time.Duration(c.Seconds*float64(time.Second))), wanted, sized, next, quota, c.PeriodUs)
		l.Undo = cgroupRemedy(c, next, quota)
		var procs []string
		for _, p := range c.Processes {
			procs = append(procs, fmt.Sprintf("%s[%d]", p.Comm, p.PID))
		}
		var moved []string
		for _, f := range flows {
			moved = append(moved, fmt.Sprintf("%s -> %s %s", f.Local, f.Peer, units.Bits(max(f.SendBps(), f.RecvBps()))))
		}
		evidence := []string{
			fmt.Sprintf("cgroup %s (v%d) has a CPU quota of %.2f CPU (%d us per %d us)", c.Path, c.Version, c.CPUs(), c.QuotaUs, c.PeriodUs),
			fmt.Sprintf("throttled in %d of its %d periods (%s) and for %s of the %s observed (%.2f CPU of waiting)",
				c.Throttled, c.Periods, pct(periodShare), units.Duration(time.Duration(c.ThrottledUs)*time.Microsecond), units.Duration(time.Duration(c.Seconds*float64(time.Second))), waited),
			fmt.Sprintf("its processes %s moved the flows %s", strings.Join(procs, ", "), strings.Join(moved, ", ")),
			l.Describe(),
		}
		for _, f := range flows {
			if share := f.LimitShares["app"]; f.BytesAcked > 0 && share >= 0.3 {
				evidence = append(evidence, fmt.Sprintf("its sender %s had nothing to send %s of its time (tcp_sendlim [app]): the process was not running", f.Local, pct(share)))
			}
		}
		if c.Created {
			evidence = append(evidence, "the cgroup appeared or got its quota during the observation: its counters count from then")
		}
		sev := finding.Warning
		if impact < 0.1 {
			sev = finding.Info
		}
		out = append(out, finding.Finding{ID: "cgroup-cpu-throttled", Severity: sev,
			Title: fmt.Sprintf("the processes moving %s are held by their cgroup's CPU quota of %.2f CPU (%s)",
				flowsNamed(flows), c.CPUs(), c.Path),
			Evidence: evidence,
			Explanation: "The cgroup used up its CPU quota within each period and the scheduler stopped its processes until the next one: " +
				"they could not write or read while throttled, so their flows waited on them (the sender looks application-limited). " +
				"The quota, not the network, sets the rate.",
			Remedy: l.Remedy(), Limit: &l,
			Scope: "cgroup " + c.Path, Impact: impact,
			ImpactText: fmt.Sprintf("%s of the throughput: the group ran %.2f CPU of the %.2f it wanted, and its flows move with its CPU", pct(impact), used, wanted),
			Confidence: finding.Strong,
			Confirm:    []string{"cat " + path.Join(c.Dir, "cpu.stat") + "   (nr_throttled and the throttled time grow while the flow runs)"}})
	}
	return out
}

// cgroupFlows are the observed flows that moved data through the cgroup's sockets.
func cgroupFlows(ev *Evidence, c *CgroupCPU) []*Flow {
	var out []*Flow
	for i := range ev.Flows {
		f := &ev.Flows[i]
		if f.BytesAcked == 0 && f.BytesReceived == 0 {
			continue
		}
		if slices.Contains(c.Flows, flowKey(f)) {
			out = append(out, f)
		}
	}
	return out
}

// flowKey is a flow as a limit's scope names it: "local peer".
func flowKey(f *Flow) string {
	return unmapped(f.Local).String() + " " + unmapped(f.Peer).String()
}

func flowsNamed(fs []*Flow) string {
	if len(fs) == 1 {
		return fmt.Sprintf("%s -> %s", fs[0].Local, fs[0].Peer)
	}
	return fmt.Sprintf("%d flows", len(fs))
}

// cgroupUsage is the CPU the group used over the observation: its own
// accounting, else its processes' sampled CPU time.
func cgroupUsage(ev *Evidence, c *CgroupCPU) (float64, string) {
	if c.UsageUs != nil {
		return float64(*c.UsageUs) / 1e6 / c.Seconds, "its CPU accounting"
	}
	var used float64
	for _, p := range ev.Processes {
		if slices.ContainsFunc(c.Processes, func(q CgroupProcess) bool { return q.PID == p.PID }) {
			used += p.User + p.System
		}
	}
	if used == 0 {
		// Throttled in its periods, it ran its quota in each of them.
		return c.CPUs() * min(1, float64(c.Periods)*float64(c.PeriodUs)/1e6/c.Seconds), "its quota over its periods"
	}
	return used, "its processes' CPU time"
}

// cgroupRemedy raises the quota to cpus (quota us per period) the way
// its owner sets it, then lifts it where the cgroup is written directly.
func cgroupRemedy(c *CgroupCPU, cpus float64, quota int64) []finding.Action {
	write := func(value string) finding.Action {
		if c.Version == 2 {
			return finding.Command("", "sh", "-c", fmt.Sprintf("echo %q > %s", value, path.Join(c.Dir, "cpu.max")))
		}
		return finding.Command("", "sh", "-c", fmt.Sprintf("echo %s > %s", value, path.Join(c.Dir, "cpu.cfs_quota_us")))
	}
	raise, lift := write(fmt.Sprintf("%d %d", quota, c.PeriodUs)), write(fmt.Sprintf("max %d", c.PeriodUs))
	if c.Version == 1 {
		raise, lift = write(fmt.Sprint(quota)), write("-1")
	}
	cpu := strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.1f", cpus), "0"), ".")
	switch c.Runtime {
	case "systemd":
		return []finding.Action{finding.Command("", "systemctl", "set-property", c.Unit, fmt.Sprintf("CPUQuota=%d%%", int(math.Round(cpus*100)))), raise}
	case "docker", "podman":
		if c.Container != "" {
			return []finding.Action{finding.Command("", c.Runtime, "update", "--cpus", cpu, c.Container), raise}
		}
	case "kubernetes":
		return []finding.Action{finding.Change("raise the pod's CPU limit (resources.limits.cpu) to %dm in its spec%s: the kubelet writes the cgroup from it",
			int(math.Round(cpus*1000)), ownerNote(c)), raise}
	}
	return []finding.Action{raise, lift}
}

func ownerNote(c *CgroupCPU) string {
	if c.Container != "" {
		return " (container " + c.Container + ")"
	}
	return ""
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
