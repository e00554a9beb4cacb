package observe

import (
	"fmt"
	"sort"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
)

// CPUShares is how each CPU spent the time between two /proc/stat readings.
func CPUShares(before, after []host.CPUTimes) []doctor.CPUUse {
	var out []doctor.CPUUse
	for i := range min(len(before), len(after)) {
		out = append(out, cpuUse(i, after[i].Sub(before[i])))
	}
	return out
}

func cpuUse(cpu int, t host.CPUTimes) doctor.CPUUse {
	total := float64(t.Total())
	if total == 0 {
		return doctor.CPUUse{CPU: cpu, Idle: 1}
	}
	return doctor.CPUUse{CPU: cpu, User: float64(t.User+t.Nice) / total, System: float64(t.System) / total,
		Softirq: float64(t.SoftIRQ) / total, IRQ: float64(t.IRQ) / total, Steal: float64(t.Steal) / total,
		Idle: float64(t.Idle+t.IOWait) / total}
}

// maxProcesses keeps the busiest processes' CPU time: those that can
// matter on a saturated CPU.
const maxProcesses = 16

// ProcessShares is each process's CPU time per CPU between two readings of
// the threads, over seconds, fitted to the CPUs' own time (fitToCPUs); a
// thread started since counts from zero. Each thread counts on the CPU it
// last ran on: exact for a pinned thread only, so it stands in for the
// samples (SampledShares) only where the CPUs cannot be sampled.
func ProcessShares(before, after map[int]host.ThreadTimes, seconds float64, cpus []doctor.CPUUse) []doctor.ProcessCPU {
	if seconds <= 0 {
		return nil
	}
	type key struct{ pid, cpu int }
	ticks := map[key]*doctor.ProcessCPU{}
	for tid, a := range after {
		b := before[tid]
		if b.PID != a.PID || b.User > a.User || b.System > a.System {
			b = host.ThreadTimes{} // a new thread, or a thread id reused
		}
		k := key{a.PID, a.CPU}
		p := ticks[k]
		if p == nil {
			p = &doctor.ProcessCPU{PID: a.PID, CPU: a.CPU}
			ticks[k] = p
		}
		if a.TID == a.PID || p.Comm == "" {
			p.Comm = a.Comm
		}
		p.User += float64(a.User - b.User)
		p.System += float64(a.System - b.System)
	}
	var out []doctor.ProcessCPU
	for _, p := range ticks {
		p.User, p.System = p.User/userHZ/seconds, p.System/userHZ/seconds
		out = append(out, *p)
	}
	return busiestProcesses(fitToCPUs(out, cpus))
}

// SampledShares is each process's share of each CPU from the CPU samples:
// the samples that found it running there over all of that CPU's samples,
// fitted to the CPUs' own time (fitToCPUs). A process that has exited is
// named by its exec'd name, else by its pid.
func SampledShares(s *CPUSamples, cpus []doctor.CPUUse) []doctor.ProcessCPU {
	type key struct{ pid, cpu int }
	shares := map[key]*doctor.ProcessCPU{}
	for k, n := range s.Counts {
		total := s.Total[k.CPU]
		if total == 0 {
			continue
		}
		p := shares[key{k.PID, k.CPU}]
		if p == nil {
			comm := s.Comms[k.PID]
			if comm == "" {
				comm = fmt.Sprintf("pid %d", k.PID)
			}
			p = &doctor.ProcessCPU{PID: k.PID, CPU: k.CPU, Comm: comm}
			shares[key{k.PID, k.CPU}] = p
		}
		if k.User {
			p.User += float64(n) / float64(total)
		} else {
			p.System += float64(n) / float64(total)
		}
	}
	out := make([]doctor.ProcessCPU, 0, len(shares))
	for _, p := range shares {
		out = append(out, *p)
	}
	return busiestProcesses(fitToCPUs(out, cpus))
}

// fitToCPUs makes the processes' shares of each CPU add up to no more than
// that CPU's own user time, and kernel time (system, softirq and irq), of
// /proc/stat: the processes' user shares of a CPU are scaled down together
// where they exceed it, as are the kernel ones. A CPU /proc/stat did not
// measure charges nobody.
func fitToCPUs(procs []doctor.ProcessCPU, cpus []doctor.CPUUse) []doctor.ProcessCPU {
	byCPU := map[int]*doctor.CPUUse{}
	for i := range cpus {
		byCPU[cpus[i].CPU] = &cpus[i]
	}
	user, kernel := map[int]float64{}, map[int]float64{}
	for _, p := range procs {
		user[p.CPU] += p.User
		kernel[p.CPU] += p.System
	}
	out := procs[:0]
	for _, p := range procs {
		c := byCPU[p.CPU]
		if c == nil {
			continue
		}
		if u := user[p.CPU]; u > c.User {
			p.User *= c.User / u
		}
		if k, budget := kernel[p.CPU], c.System+c.Softirq+c.IRQ; k > budget {
			p.System *= budget / k
		}
		out = append(out, p)
	}
	return out
}

// busiestProcesses keeps the maxProcesses busiest of those with at least
// 1 % of a CPU, busiest first.
func busiestProcesses(procs []doctor.ProcessCPU) []doctor.ProcessCPU {
	var out []doctor.ProcessCPU
	for _, p := range procs {
		if p.User+p.System >= 0.01 {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if ti, tj := out[i].User+out[i].System, out[j].User+out[j].System; ti != tj {
			return ti > tj
		}
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].CPU < out[j].CPU
	})
	return out[:min(len(out), maxProcesses)]
}
