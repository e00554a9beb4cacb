package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor/observe"
)

func init() {
	Variants = append(Variants, cgroupVariants...)
	Noise = append(Noise, cgroupNoise...)
}

// cgroupVariants hold the sending application back by its cgroup's CPU
// quota: the flow waits on a process the scheduler stops, which tcp_info
// and the send-limit events call application-limited.
var cgroupVariants = []*Scenario{
	{
		Name:      "cgroup-cpu-quota",
		Mechanism: "the sending application (iperf3) in a cgroup of its own with a CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us), as a container's CPU limit",
		Fault:     "iperf3's client in cgroup skbtrace-lab-ID at 0.05 CPU (control: the same cgroup at 2 CPUs, a quota it does not reach)",
		Expect:    "cgroup-cpu-throttled",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Prepare:   func(p *Pair) error { return addLabCgroup(p, 2) },
		Inject:    func(p *Pair) error { return labCgroupOf(p).setQuota(0.05) },
		During:    func(ctx context.Context, p *Pair) { labCgroupOf(p).watch(ctx) },
		Workload:  iperf3Placed(cgroupPlace),
		// The scenario's own fix, where the doctor prescribes none: the quota lifted.
		Fix: func(p *Pair) error { return labCgroupOf(p).setQuota(0) },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			periods, throttled, wait := labCgroupOf(p).during()
			return fmt.Sprintf("the cgroup throttled in %d of %d periods, %.2f s of waiting in the fault run; throughput %s",
				throttled, periods, wait.Seconds(), change(c, f)), periods > 0 && throttled*2 > periods && f.Load.Bps < 0.7*c.Load.Bps
		},
	},
}

// cgroupNoise is the healthy control: a container-like cgroup whose quota
// the stream never reaches.
var cgroupNoise = []*Scenario{
	{
		Name:      "noise-cgroup-quota-unreached",
		Mechanism: "iperf3's client in a cgroup with a CPU quota of 2 CPUs, which one stream does not reach",
		Fault:     "iperf3's client in cgroup skbtrace-lab-ID at 2 CPUs (control: iperf3 outside it)",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject:    func(p *Pair) error { return addLabCgroup(p, 2) },
		During:    func(ctx context.Context, p *Pair) { labCgroupOf(p).watch(ctx) },
		Workload:  iperf3Placed(cgroupPlace),
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			periods, throttled, _ := labCgroupOf(p).during()
			return fmt.Sprintf("the stream's sender in a cgroup at 2 CPUs, throttled in %d of %d periods", throttled, periods), periods > 0
		}),
	},
}

// labCgroup is a cgroup the lab made for a pair's sending application,
// removed when the pair closes.
type labCgroup struct {
	version int
	dir     string
	mu      sync.Mutex
	// The cgroup's throttling over the fault run (During).
	periods, throttled uint64
	wait               time.Duration
	watched            chan struct{}
}

var (
	labCgroupsMu sync.Mutex
	labCgroups   = map[*Pair]*labCgroup{}
)

func labCgroupOf(p *Pair) *labCgroup {
	labCgroupsMu.Lock()
	defer labCgroupsMu.Unlock()
	return labCgroups[p]
}

// cgroupPlace moves the client into the pair's cgroup when it has one.
// (A command started in a namespace sees a sysfs of its own, without the
// cgroup mounts: it cannot move itself.)
func cgroupPlace(p *Pair, pid int) error {
	cg := labCgroupOf(p)
	if cg == nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("moving the client into the lab's cgroup: %w", err)
	}
	return nil
}

// outputPlaced is Netns.Output with place called on the started command's
// PID; a command it cannot place is ended.
func outputPlaced(p *Pair, cmd *exec.Cmd, place func(p *Pair, pid int) error) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := p.Sender.Start(cmd); err != nil {
		return nil, err
	}
	if err := place(p, cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s in %s: %w: %s", strings.Join(cmd.Args, " "), p.Sender.Name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// addLabCgroup creates skbtrace-lab-ID in the cpu hierarchy with a quota
// of cpus, removed when the pair closes, on every way out.
func addLabCgroup(p *Pair, cpus float64) error {
	version, root := observe.CPUCgroupRoot()
	if version == 0 {
		return &NotBuildable{"no cgroup hierarchy carries the cpu controller"}
	}
	if version == 2 {
		if err := delegateCPU(p, root); err != nil {
			return err
		}
	}
	id := strings.TrimSuffix(strings.TrimPrefix(p.Sender.Name, "skbtrace-"), "-snd")
	cg := &labCgroup{version: version, dir: filepath.Join(root, "skbtrace-lab-"+id)}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return fmt.Errorf("creating the lab's cgroup: %w", err)
	}
	labCgroupsMu.Lock()
	labCgroups[p] = cg
	labCgroupsMu.Unlock()
	p.undo = append(p.undo, func() error {
		labCgroupsMu.Lock()
		delete(labCgroups, p)
		labCgroupsMu.Unlock()
		return cg.remove()
	})
	return cg.setQuota(cpus)
}

// delegateCPU enables the cpu controller for the root's children, as
// systemd does at boot, where nothing has (a kernel guest's bare init): a
// child then has no cpu.max. What it enabled it disables when the pair
// closes, after the lab's cgroup is gone (undo runs last first).
func delegateCPU(p *Pair, root string) error {
	control := filepath.Join(root, "cgroup.subtree_control")
	b, err := os.ReadFile(control)
	if err != nil {
		return fmt.Errorf("reading the cgroup root's controllers: %w", err)
	}
	if slices.Contains(strings.Fields(string(b)), "cpu") {
		return nil
	}
	if err := os.WriteFile(control, []byte("+cpu"), 0o644); err != nil {
		return &NotBuildable{fmt.Sprintf("the cpu controller cannot be enabled for %s's children: %v", root, err)}
	}
	p.undo = append(p.undo, func() error {
		if err := os.WriteFile(control, []byte("-cpu"), 0o644); err != nil {
			return fmt.Errorf("disabling the cpu controller the lab enabled in %s: %w", control, err)
		}
		return nil
	})
	return nil
}

// setQuota sets the quota to cpus of one CPU per 100 ms period; 0 lifts it.
func (cg *labCgroup) setQuota(cpus float64) error {
	quota := strconv.Itoa(int(cpus * 100000))
	file, value := "cpu.max", quota+" 100000"
	if cpus == 0 {
		value = "max 100000"
	}
	if cg.version == 1 {
		file, value = "cpu.cfs_quota_us", quota
		if cpus == 0 {
			value = "-1"
		}
	}
	if err := os.WriteFile(filepath.Join(cg.dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting the lab cgroup's quota: %w", err)
	}
	return nil
}

// stat reads nr_periods, nr_throttled and the throttled time.
func (cg *labCgroup) stat() (periods, throttled uint64, wait time.Duration) {
	b, _ := os.ReadFile(filepath.Join(cg.dir, "cpu.stat"))
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(v, 10, 64)
		switch k {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		case "throttled_usec":
			wait = time.Duration(n) * time.Microsecond
		case "throttled_time":
			wait = time.Duration(n)
		}
	}
	return periods, throttled, wait
}

// watch measures the cgroup's throttling until ctx ends (the fault run).
func (cg *labCgroup) watch(ctx context.Context) {
	cg.mu.Lock()
	cg.watched = make(chan struct{})
	cg.mu.Unlock()
	defer close(cg.watched)
	p0, t0, w0 := cg.stat()
	<-ctx.Done()
	p1, t1, w1 := cg.stat()
	cg.mu.Lock()
	cg.periods, cg.throttled, cg.wait = p1-p0, t1-t0, w1-w0
	cg.mu.Unlock()
}

// during is the throttling watch measured.
func (cg *labCgroup) during() (periods, throttled uint64, wait time.Duration) {
	cg.mu.Lock()
	done := cg.watched
	cg.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	cg.mu.Lock()
	defer cg.mu.Unlock()
	return cg.periods, cg.throttled, cg.wait
}

// remove deletes the cgroup once its processes are gone (a killed
// client leaves it a moment later).
func (cg *labCgroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(cg.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing the lab's cgroup %s: %w", cg.dir, err)
}
