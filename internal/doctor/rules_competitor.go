package doctor

import (
	"fmt"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// KindCPUCompetitor is other processes' user-space work on the CPU the
// network path saturates: the processes that made no socket call and ran
// there, as the CPU samples (or their threads' times) charged them.
const KindCPUCompetitor = "cpu_competitor"

// minCompetitor is the share of a CPU a process must take to be named as
// competing with the network path there: less is any host's background.
const minCompetitor = 0.05

// competitorLimit names the processes that compete with the network path
// for CPU c as its limit. Its first action puts them, every thread, in the
// idle scheduling class (SCHED_IDLE: they run only when the CPU has
// nothing else to do), which the kernel's softirq work and the flows'
// threads then always come before; moving them to a CPU with room is
// offered next. Nice 19 yields less: two busy loops reniced kept iperf3 at
// 90 % of its rate, in the idle class at 93-95 % (unpinned, on this VM).
// Nil where no process took at least minCompetitor of the CPU.
func competitorLimit(ev *Evidence, c *CPUUse, others []ProcessCPU) *finding.Limit {
	var named []ProcessCPU
	var user float64
	for _, p := range others {
		if p.User >= minCompetitor && len(named) < 3 {
			named = append(named, p)
			user += p.User
		}
	}
	if len(named) == 0 {
		return nil
	}
	var who, pids []string
	var pidNums []int
	for _, p := range named {
		who = append(who, fmt.Sprintf("%s[%d] %s", p.Comm, p.PID, pct(p.User)))
		pids = append(pids, fmt.Sprint(p.PID))
		pidNums = append(pidNums, p.PID)
	}
	// Room: a CPU that stays below the bottleneck bar with their time
	// added, as the limited run loaded it. Moving them there is offered,
	// not applied first: the flows load it more once they speed up (a
	// busy loop moved to the receiver's CPU 30 % busy restored 49 %).
	var room []int
	var shares []string
	for _, o := range ev.CPUs {
		shares = append(shares, fmt.Sprintf("CPU %d %s busy", o.CPU, pct(o.Busy())))
		if o.CPU != c.CPU && o.Busy()+user < cpuBusy {
			room = append(room, o.CPU)
		}
	}
	var cmds []string
	for _, pid := range pids {
		cmds = append(cmds, "chrt -a -i -p 0 "+pid)
	}
	first := finding.Command("", "sh", "-c", strings.Join(cmds, "; "))
	if len(cmds) == 1 {
		first = finding.Command("", strings.Fields(cmds[0])...)
	}
	undo := []finding.Action{first}
	arithmetic := fmt.Sprintf("%s; their user time %s", strings.Join(shares, ", "), pct(user))
	if len(room) > 0 {
		list := host.FormatCPUList(room)
		arithmetic += fmt.Sprintf(" fits on CPU %s below %s busy as it was loaded", list, pct(cpuBusy))
		undo = append(undo, finding.Change("or move them to CPU %s, every thread: taskset -a -p -c %s PID", list, list))
	}
	undo = append(undo,
		finding.Change("or, if that work matters more than the network's, give the network path CPUs of its own: the flows' threads "+
			"(taskset), their devices' interrupts and receive steering (smp_affinity_list, rps_cpus), and a cgroup cpuset for the rest"),
		finding.Change("undo with chrt -a -o -p 0 PID (the normal class)"))
	top := named[0]
	source := "cpu-clock samples"
	if !ev.ProcessesSampled {
		source = "/proc/PID/task/*/stat"
	}
	return &finding.Limit{Kind: KindCPUCompetitor,
		Value:      fmt.Sprintf("%s of CPU %d in user space: %s", pct(user), c.CPU, strings.Join(who, ", ")),
		Where:      finding.Place{Layer: finding.LayerProcess, Object: fmt.Sprintf("CPU %d", c.CPU)},
		SetBy:      &finding.Owner{PID: top.PID, Comm: top.Comm},
		Applies:    finding.Scope{CPUs: []int{c.CPU}, PIDs: pidNums},
		Undo:       undo,
		Arithmetic: arithmetic, Source: source + " and sock_io (processes that made no socket call)"}
}
