package doctor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

func cpuSaturated(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.CPUs {
		c := &ev.CPUs[i]
		if c.Busy() < cpuBusy {
			continue
		}
		var linkLimit, impactText string
		var impact float64
		evidence := []string{fmt.Sprintf("CPU %d busy %s of %.1f s: %s (/proc/stat)", c.CPU, pct(c.Busy()), ev.Seconds, cpuSplit(c))}
		if c.NetRx+c.NetTx > 0 {
			evidence = append(evidence, fmt.Sprintf("NET_RX softirq %s and NET_TX %s of CPU %d (softirq events)", pct(c.NetRx), pct(c.NetTx), c.CPU))
		}
		for i := range ev.Flows {
			f := &ev.Flows[i]
			d := ev.DeviceNamed(f.Netns, f.Dev)
			if !d.physical() || rateSetByApps(ev, f) {
				continue
			}
			speed := float64(d.SpeedMbps) * 1e6
			if tput := max(f.SendBps(), f.RecvBps()); tput < 0.9*speed {
				linkLimit = fmt.Sprintf("%s moves %s on %s, a %d Mbit/s link: %s of line rate",
					f.Local, units.Bits(tput), d.Name, d.SpeedMbps, pct(tput/speed))
				impact = 1 - tput/speed
				break
			}
		}
		others, otherUser := otherWorkOn(ev, c.CPU)
		competing := c.User >= competingUser || otherUser >= otherWork
		spare := misplaced(ev, c)
		if linkLimit == "" && !competing && spare == nil {
			continue // CPU-bound copying over virtual devices: the healthy limit
		}
		if spare != nil {
			// What moving the work could gain: the other CPU's spare time.
			impact = max(impact, (1-spare.Busy())/2)
		}
		explanation := fmt.Sprintf("CPU %d has no idle time left, so packets and copies wait for it: the CPU, not the network, sets the rate.", c.CPU)
		var remedy []string
		evidence = append(evidence, interruptsOn(ev, c.CPU)...)
		if linkLimit != "" {
			evidence = append(evidence, linkLimit)
			for _, d := range physicalDevices(ev) {
				if d.ErrorStatsClean() {
					evidence = append(evidence, fmt.Sprintf("%s: no driver error or drop counter moved (ethtool -S)", d.Name))
				}
			}
		}
		if competing {
			evidence = append(evidence, fmt.Sprintf("%s of CPU %d went to user-space work", pct(c.User), c.CPU))
			for i, p := range others {
				if i == 3 {
					break
				}
				source := "/proc/PID/task/*/stat"
				if ev.ProcessesSampled {
					source = "cpu-clock samples"
				}
				evidence = append(evidence, fmt.Sprintf("%s (pid %d) ran %s of CPU %d in user space and made no socket call (%s, sock_io)",
					p.Comm, p.PID, pct(p.User), c.CPU, source))
			}
			explanation += " A large share of it runs user-space code, which competes with the network path for the CPU."
			impact = max(impact, c.User)
			// With the CPU to themselves the flows also batch more, so
			// their cost per byte falls: over the kernel's own devices a
			// stream's rate on this host bounds them (a receiver beside a
			// loop at 60 % of its CPU gained 77 %).
			if tx, unshaped := ev.sendersOverVirtual(); unshaped && linkLimit == "" {
				if g, how, ok := liftedGain(ev, tx); ok {
					impact, impactText = g, fmt.Sprintf("about %s: what the flows would gain with the CPU to themselves, %s)", pct(g), how)
				}
			}
		}
		var limit *finding.Limit
		if competing {
			if limit = competitorLimit(ev, c, others); limit != nil {
				evidence = append(evidence, limit.Describe(), "how: "+limit.Arithmetic)
				remedy = limit.Remedy()
			} else {
				remedy = append(remedy, fmt.Sprintf("find what runs on CPU %d: top -1, or perf top -C %d", c.CPU, c.CPU),
					"move competing work to other CPUs (taskset -pc CPUS PID, cgroup cpusets) or give the network path its own CPU")
			}
		}
		if lim := steering(ev, c); lim != nil && limit == nil {
			// A mask put the receive work here: it is the limit, and
			// its change the first remedy.
			limit = lim
			evidence = append(evidence, fmt.Sprintf("CPU %d meanwhile was %s busy", spare.CPU, pct(spare.Busy())), lim.Describe())
			explanation += fmt.Sprintf(" The receive work of %s is steered here by its %s (%s), while CPU %d has time to spare: the mask placed it, not the load.",
				lim.Applies.Devices[0], lim.Kind, lim.Value, spare.CPU)
			remedy = append(lim.Remedy(), remedy...)
		} else if idle := spare; idle != nil && limit == nil {
			evidence = append(evidence, fmt.Sprintf("CPU %d meanwhile was %s busy", idle.CPU, pct(idle.Busy())))
			explanation += fmt.Sprintf(" A NIC's interrupts, and the receive work they start, land on this CPU while CPU %d has time to spare: "+
				"the work is placed, not too much.", idle.CPU)
			remedy = append(spreadRemedy(ev), remedy...)
		} else if ev.CPUCount == 1 {
			explanation += " This host has one CPU: RPS, RFS and multiqueue only spread work across CPUs and cannot help; only a faster CPU, less work per byte (offloads, larger MTU) or fewer copies can."
			remedy = append(remedy, "check that TSO/GSO/GRO are on (ethtool -k DEV): they cut per-packet CPU cost",
				"a larger MTU on the whole path (ip link set DEV mtu 9000) halves-to-sixths the packets per byte")
		} else if c.Softirq+c.NetRx >= 0.3 {
			remedy = append(remedy, spreadRemedy(ev)...)
		}
		if impactText == "" {
			impactText = fmt.Sprintf("up to %s of throughput", pct(impact))
		}
		out = append(out, finding.Finding{ID: "cpu-saturated", Severity: finding.Warning,
			Title:    fmt.Sprintf("CPU %d is saturated (%s busy)", c.CPU, pct(c.Busy())),
			Evidence: evidence, Explanation: explanation, Remedy: remedy, Scope: fmt.Sprintf("cpu %d", c.CPU), Limit: limit,
			Impact: impact, ImpactText: impactText, Confidence: finding.Likely,
			Confirm: []string{fmt.Sprintf("mpstat -P %d 1 during the transfer (is it 100 %% busy throughout?), then perf top -C %d: what runs there", c.CPU, c.CPU)}})
	}
	return out
}

// rateSetByApps says whether a flow carried, both ways, only what its
// applications offered (request/response): its sender mostly app-limited,
// and its peer's too, or, without the peer, no more received than sent. Its
// rate then says nothing of what the link or a busy CPU allowed (an e1000e
// wire's 61 transactions/s beside two CPUs 91 % busy under QEMU).
func rateSetByApps(ev *Evidence, f *Flow) bool {
	if f.LimitShares["app"] < 0.5 {
		return false
	}
	if p := ev.peerFlow(f); p != nil {
		return p.LimitShares["app"] >= 0.5
	}
	return f.RecvBps() <= f.SendBps()
}

// misplacedScope says whether a cpu-saturated finding's CPU ("cpu N") is
// misplaced work.
func misplacedScope(ev *Evidence, scope string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(scope, "cpu "))
	if err != nil {
		return false
	}
	for i := range ev.CPUs {
		if ev.CPUs[i].CPU == n {
			return misplaced(ev, &ev.CPUs[i]) != nil
		}
	}
	return false
}

// misplaced finds, for a saturated CPU that takes most of a NIC's
// interrupts, another CPU with time to spare: receive work could move
// there. Such saturation is its own cause, whatever else costs CPU.
func misplaced(ev *Evidence, c *CPUUse) *CPUUse {
	if c.Busy() < cpuBusy || len(interruptsOn(ev, c.CPU)) == 0 && steering(ev, c) == nil {
		return nil
	}
	for i := range ev.CPUs {
		if o := &ev.CPUs[i]; o.CPU != c.CPU && o.Busy() < SpareBusy {
			return o
		}
	}
	return nil
}

// interruptsOn says which NICs took most of their interrupts on a CPU
// during the observation (/proc/interrupts): its receive work starts there.
func interruptsOn(ev *Evidence, cpu int) []string {
	var out []string
	for _, d := range ev.devices {
		var total uint64
		for _, n := range d.Interrupts {
			total += n
		}
		if cpu >= len(d.Interrupts) || total < minOffloadSkbs/10 || float64(d.Interrupts[cpu]) < 0.5*float64(total) {
			continue
		}
		out = append(out, fmt.Sprintf("%s took %s of its %d interrupts on CPU %d (/proc/interrupts, IRQ %s)",
			d.Name, pct(float64(d.Interrupts[cpu])/float64(total)), total, cpu, joinInts(d.IRQs)))
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// spreadRemedy spreads receive processing over CPUs by what each receiving
// device accepts: more queues only where the driver offers more channels
// than it uses (ethtool -l), else RPS in software; IRQ affinity for all.
func spreadRemedy(ev *Evidence) []string {
	var out []string
	for ns, d := range ev.devices {
		if _, rx := ev.bulkThrough(ns.Name, d.Name); rx == 0 || d.Kind != "device" {
			continue
		}
		used := max(d.CombinedChannels, d.RxChannels)
		if d.MaxChannels > used {
			out = append(out, nsPrefix(ns.Name)+fmt.Sprintf("ethtool -L %s combined %d (%d of %d queues in use): each queue's interrupt on a CPU of its own", d.Name, d.MaxChannels, used, d.MaxChannels))
			continue
		}
		queues := "one receive queue"
		if used > 1 {
			queues = fmt.Sprintf("all %d of its queues in use", used)
		}
		irq := "N"
		if len(d.IRQs) > 0 {
			irq = joinInts(d.IRQs[:1])
		}
		out = append(out, nsPrefix(ns.Name)+fmt.Sprintf("%s has %s: steer its receive processing to other CPUs with RPS (echo MASK > /sys/class/net/%s/queues/rx-0/rps_cpus) and its interrupts with /proc/irq/%s/smp_affinity_list", d.Name, queues, d.Name, irq))
	}
	if out == nil {
		out = []string{"spread receive processing: RPS (echo MASK > /sys/class/net/DEV/queues/rx-0/rps_cpus), more queues where the driver offers them (ethtool -l DEV), IRQ affinity"}
	}
	return out
}

// otherWorkOn is the user time on a CPU of the processes that moved none of
// the observed traffic (no socket call in sock_io), the observer aside,
// busiest first. Without the socket calls nobody can be told apart.
func otherWorkOn(ev *Evidence, cpu int) ([]ProcessCPU, float64) {
	if len(ev.SockIO) == 0 {
		return nil, 0
	}
	sendsOrReceives := map[int]bool{ev.ObserverPID: true}
	for _, s := range ev.SockIO {
		sendsOrReceives[int(s.Pid)] = true
	}
	var out []ProcessCPU
	var user float64
	for _, p := range ev.Processes {
		if p.CPU == cpu && !sendsOrReceives[p.PID] && p.User >= 0.01 {
			out = append(out, p)
			user += p.User
		}
	}
	sortBy(out, func(p ProcessCPU) float64 { return -p.User })
	return out, user
}

func physicalDevices(ev *Evidence) []*Device {
	var out []*Device
	for _, d := range ev.devices {
		if d.physical() {
			out = append(out, d)
		}
	}
	return out
}
