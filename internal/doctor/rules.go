package doctor

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Thresholds the rules share. A flow is "bulk" when it moves at least
// bulkBps, or at least minBulkBps not held by its application: below that,
// per-skb offload counts say little.
// SpareBusy: a CPU less busy than this has time for work moved to it (the
// lab builds its misplaced-work faults to this bar).
const SpareBusy = 0.6

const (
	bulkBps        = 100e6
	minBulkBps     = 1e6  // a stream not paced by its application counts from here (streaming)
	limitShare     = 0.3  // a send-limit reason holding the sender this share of the time
	cpuBusy        = 0.9  // a CPU this busy is a bottleneck candidate
	competingUser  = 0.4  // user time that is not the network path's: a stream's own sender and reader take up to about a quarter
	otherWork      = 0.25 // user time on one CPU of the processes that made no socket call
	smallPacket    = 512  // bytes per socket call or packet
	smallCallRate  = 20000
	noCoalescing   = 1.5 // segments per skb below which offloads do nothing
	minOffloadSkbs = 1000
	smallWindow    = 64 << 10 // a default socket's initial window: only SO_RCVBUF or a reader that does not drain keeps it below
	nagleWaitUs    = 1000     // a Nagle hold this long on average waits for a (delayed) ACK, not for a fast path's round trip
	// stoppedReaderRun is how long a shut window stays shut on average when
	// the reader stops, not merely falls behind (a CPU-bound reader's runs
	// last a few milliseconds here).
	stoppedReaderRun = 20 * time.Millisecond
	// readerCPUBusy is the busiest CPU's share below which no reader is
	// CPU-bound (such readers leave it 80 % busy and more here).
	readerCPUBusy = 0.7
	// standingQueueRTT: a round trip this many times its minimum is mostly
	// queue. Buffer-capped senders keep 4-6x (veth, TCG guests) and reach
	// 20x on a loaded host; healthy veth streams that fill the receiver's
	// backlog reach 27-89x.
	standingQueueRTT = 12
	// heldShare: a sender its buffer holds this share of its time is held
	// by the buffer, whatever the queue: buffer-capped senders wait 73-99 %,
	// healthy streams behind a standing queue up to 46 % on a loaded host.
	heldShare = 0.6
	// stoppedReaderShare is the least [swnd] share that convicts a reader
	// that stops (10-45 % measured for one stopped 400 ms in every 450).
	stoppedReaderShare = 0.1
	// pathQueueDelay is the growth of a flow's round trip over its minimum
	// that says packets wait in a queue somewhere, not in the ends' stacks.
	pathQueueDelay = 5 * time.Millisecond
	// coalesceHoldUs of receive interrupt coalescing is long enough to
	// lengthen a round trip on a LAN (drivers default to tens of µs, or adapt).
	coalesceHoldUs = 500
	// minLocatedDrops of a flow's packets, with their reason and place,
	// convict a loss; fewer happen on any busy host.
	minLocatedDrops = 10
)

// Offload features by the kernel's names, as the evidence holds them.
const (
	featTSO = "tx-tcp-segmentation"
	featGSO = "tx-generic-segmentation"
	featGRO = "rx-gro"
	featLRO = "rx-lro"
	// fragmentShare of a device's received packets reassembled as IP
	// fragments makes fragments, not the packets, what it receives.
	fragmentShare = 0.5
	// GSO needs scatter-gather, which needs transmit checksumming.
	featSG     = "tx-scatter-gather"
	featTxCsum = "tx-checksum-ip-generic"
	featRxCsum = "rx-checksum"
)

// Rule turns evidence into findings; each finding id of docs/findings.md has one.
type Rule struct {
	ID    string
	Check func(*Evidence) []finding.Finding
}

// Rules is every rule, in no particular order: Diagnose ranks the findings.
var Rules = []Rule{
	{"cpu-saturated", cpuSaturated},
	{"sndbuf-limited", sndbufLimited},
	{"nagle-delay", nagleDelay},
	{"rwnd-limited", rwndLimited},
	{"cwnd-limited", cwndLimited},
	{"packet-loss", packetLoss},
	{"app-limited", appLimited},
	{"offload-disabled", offloadDisabled},
	{"known-nic-issue", knownNICIssue},
	{"mtu-mismatch", mtuMismatch},
	{"small-packet-bound", smallPacketBound},
	{"gro-blocked", groBlocked},
	{"ip-fragmented", ipFragmented},
	{"rate-shaped", rateShaped},
	{"asymmetric-path", asymmetricPath},
	{"irq-coalescing", irqCoalescing},
}

// symptoms lists findings that another finding explains: when the cause is
// present at warning or above, the symptom drops to info with a note, so the
// root cause ranks first.
var symptoms = map[string][]string{
	"cwnd-limited":     {"packet-loss", "mtu-mismatch", "rate-shaped"},
	"packet-loss":      {"mtu-mismatch", "rate-shaped", "known-nic-issue", "gro-blocked", "ip-fragmented"},
	"rwnd-limited":     {"cpu-saturated", "mtu-mismatch", "small-packet-bound"},
	"cpu-saturated":    {"small-packet-bound", "offload-disabled", "gro-blocked", "ip-fragmented", "rate-shaped"},
	"asymmetric-path":  {"known-nic-issue", "offload-disabled"},
	"offload-disabled": {"known-nic-issue", "rate-shaped"},
	// A NIC that holds received packets lengthens every round trip through
	// it: the growth is its wait, not a queue beyond the host.
	"rate-shaped": {"irq-coalescing"},
}

// Diagnose applies every rule and ranks the findings.
func Diagnose(ev *Evidence) *Report {
	var fs []finding.Finding
	for _, r := range Rules {
		fs = append(fs, r.Check(ev)...)
	}
	present := map[string]bool{}
	for _, f := range fs {
		if f.Severity >= finding.Warning {
			present[f.ID] = true
		}
	}
	// A cause is at least as severe, and weighs at least as much, as the
	// symptoms it explains.
	own := map[*finding.Finding]float64{}
	for i := range fs {
		own[&fs[i]] = fs[i].Impact
	}
	heaviest := map[string]float64{}
	for i := range fs {
		if fs[i].ID == "cpu-saturated" && misplacedScope(ev, fs[i].Scope) {
			continue // its cause is where the work runs
		}
		for _, cause := range symptoms[fs[i].ID] {
			if present[cause] && fs[i].Severity >= finding.Warning {
				heaviest[cause] = max(heaviest[cause], fs[i].Impact)
				fs[i].Severity = finding.Info
				fs[i].Explanation += " This is a consequence of " + cause + ", reported above."
				break
			}
		}
	}
	for i := range fs {
		if w, ok := heaviest[fs[i].ID]; ok && fs[i].Severity >= finding.Warning && fs[i].Impact < w {
			fs[i].Impact = w
			fs[i].ImpactText += fmt.Sprintf("; at least the %s its consequences put at stake", pct(w))
		}
	}
	// Causes raised to one stake rank by what each costs on its own: two
	// offloads off that both explain a saturated CPU.
	order := make([]int, len(fs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		fa, fb := &fs[order[a]], &fs[order[b]]
		if fa.Severity != fb.Severity {
			return fa.Severity > fb.Severity
		}
		if fa.Impact != fb.Impact {
			return fa.Impact > fb.Impact
		}
		return own[fa] > own[fb]
	})
	ranked := make([]finding.Finding, len(fs))
	for i, j := range order {
		ranked[i] = fs[j]
	}
	fs = ranked
	rep := &Report{Findings: fs, Evidence: ev, Notes: ev.Notes}
	if n := unsufferedDrops(ev); n != "" {
		rep.Notes = append(slices.Clone(rep.Notes), n)
	}
	if rep.Top(finding.Warning) == nil {
		rep.Healthy = healthy(ev)
	}
	if fs == nil {
		rep.Findings = []finding.Finding{}
	}
	return rep
}

// healthy says what limited a run with nothing to fix.
func healthy(ev *Evidence) string {
	s := ev.senders()
	if len(s) == 0 {
		return "no TCP flow moved data during the observation; nothing to judge (run a workload with -- COMMAND, or observe longer)"
	}
	f := s[0]
	msg := fmt.Sprintf("no finding above info. The fastest flow, %s -> %s, moved %s", f.Local, f.Peer, units.Bits(f.SendBps()))
	if r, share := topLimit(f); r != "" {
		msg += fmt.Sprintf(", its sender limited by %s %s of the time", r, pct(share))
	}
	if c := busiest(ev); c != nil && c.Busy() >= cpuBusy {
		msg += fmt.Sprintf("; CPU %d was %s busy (%s)", c.CPU, pct(c.Busy()), cpuSplit(c))
		if d := ev.device(f.Netns, f.Dev); d != nil && d.Kind == "device" && d.Driver != "" && !d.physical() {
			msg += fmt.Sprintf(": CPU-bound over %s (%s), a NIC that reports no link speed to judge the rate against", d.Name, d.Driver)
		} else if !physicalPath(ev, f) {
			msg += ": CPU-bound copying over a virtual device, as expected on loopback or veth"
		}
	}
	return msg + "."
}

// benign says whether a drop follows from normal operation.
func benign(d *Drop) bool { return event.RoutineDrop(d.Reason, d.Location) }

func offloadDisabled(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, ns := range ev.Namespaces {
		for i := range ns.Devices {
			d := &ns.Devices[i]
			tx, rx := ev.bulkThrough(ns.Name, d.Name)
			if tx > 0 && (d.Xmit.SegsPerSkb() > 0 && d.Xmit.SegsPerSkb() < noCoalescing && d.Xmit.Skbs >= minOffloadSkbs && d.Xmit.smallSkbs() ||
				d.Xmit == nil && d.featureOff(featTSO, featGSO) && d.txBytesPerPacket() <= float64(d.MTU+l2Header)) {
				off := d.offList(featTSO, featGSO)
				severity, title := finding.Warning, fmt.Sprintf("segmentation offload is off on %s", d.Name)
				explanation := "Without TSO/GSO the stack builds, queues and hands the driver one skb per MSS-sized packet " +
					"instead of one per up to 64 KB: many times the per-packet CPU cost for the same bytes."
				remedy := []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s tso on gso on", d.Name)}
				if off != "" && d.locked(featTSO, featGSO) {
					// ethtool -K would be refused: say what the device lacks.
					title = fmt.Sprintf("%s cannot segment: %s", d.Name, lockedText(d))
					explanation += " The device does not let them be switched on: " + lockedText(d) + "."
					remedy = segmentationRemedy(ns.Name, d)
				}
				impact := 0.4
				if off == featTSO && d.Features[featGSO] && !d.locked(featTSO) {
					// GSO carries each 64 KB skb through the stack and the
					// qdisc and segments it just before the driver: the
					// stack's saving stays, the device's does not.
					title = fmt.Sprintf("TSO is off on %s (GSO segments in software)", d.Name)
					explanation = "Without TSO the CPU cuts each large skb into MSS-sized packets (GSO, just before the driver) and the driver " +
						"maps and queues every one of them: GSO keeps most of the stack's saving, but each packet still costs the CPU at the device."
					impact = 0.15
				}
				if off == "" && d.Features != nil {
					// On, yet skbs arrive one segment each: a shaper segmenting
					// (tbf does above its burst), or the application writing small.
					severity, title = finding.Info, fmt.Sprintf("TSO/GSO are on but skbs reach %s as single segments", d.Name)
					explanation = "Segmentation offload is enabled, but something upstream of the driver splits the skbs " +
						"(a qdisc such as tbf segments skbs larger than its burst) or the application writes in small pieces."
					remedy = []string{nsPrefix(ns.Name) + fmt.Sprintf("tc -s qdisc show dev %s", d.Name)}
				}
				severity, explanation = cpuHeadroom(ev, severity, explanation)
				ev := []string{fmt.Sprintf("%s sends %s of TCP", d.Name, units.Bits(tx))}
				if d.Xmit != nil {
					ev = append(ev, fmt.Sprintf("%.2f segments per skb at transmit over %d skbs (dev_xmit)", d.Xmit.SegsPerSkb(), d.Xmit.Skbs))
				} else {
					ev = append(ev, fmt.Sprintf("%.0f bytes per transmitted packet (device counters)", d.txBytesPerPacket()))
				}
				if off != "" {
					ev = append(ev, fmt.Sprintf("%s off (ethtool -k %s)", off, d.Name))
				}
				out = append(out, finding.Finding{ID: "offload-disabled", Severity: severity,
					Title: title, Evidence: ev, Explanation: explanation, Remedy: remedy,
					Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: impact,
					ImpactText: "CPU per byte several times higher; throughput where the CPU is the limit",
					Confidence: shapeConfidence(d.Xmit != nil, severity),
					Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -k %s | grep -e segmentation -e checksum", d.Name),
						"turn it on for one run and compare: " + remedy[0]}})
			}
			// Without dev_recv, received packets no larger than the MTU show
			// that nothing upstream (the peer's GSO over veth) made them large.
			notMerged := d.Recv.SegsPerSkb() > 0 && d.Recv.SegsPerSkb() < noCoalescing && d.Recv.Skbs >= minOffloadSkbs && d.Recv.smallSkbs() ||
				d.Recv == nil && d.rxBytesPerPacket() > 0 && d.rxBytesPerPacket() <= float64(d.MTU+l2Header)
			if rx > 0 && notMerged && d.featureOff(featGRO) {
				severity, explanation := receiveHeadroom(ev, d, "GRO merges consecutive segments of a flow into one large skb before the stack processes it; "+
					"without it every MSS-sized packet pays the whole receive path.")
				out = append(out, finding.Finding{ID: "offload-disabled", Severity: severity,
					Title: fmt.Sprintf("GRO is off on %s", d.Name),
					Evidence: []string{
						fmt.Sprintf("%s receives %s of TCP", d.Name, units.Bits(rx)),
						recvShape(d),
						fmt.Sprintf("rx-gro (generic-receive-offload) off (ethtool -k %s)", d.Name),
					},
					Explanation: explanation,
					Remedy:      []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s gro on", d.Name)},
					Scope:       fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: 0.4,
					ImpactText: "receive CPU per byte several times higher", Confidence: shapeConfidence(d.Recv != nil, severity),
					Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s gro on for one run and compare", d.Name)}})
			}
			// A NIC that can check receive checksums but was told not to:
			// the stack sums every byte of every segment in software. (A
			// [fixed] one is the device's nature, no setting to fix.)
			if rx > 0 && d.Kind == "device" && d.featureOff(featRxCsum) && !slices.Contains(d.Fixed, featRxCsum) {
				severity, explanation := receiveHeadroom(ev, d, "With receive checksum offload off the kernel verifies each segment's checksum "+
					"in software, reading every byte once more on the receiving CPU (GRO does it before merging).")
				out = append(out, finding.Finding{ID: "offload-disabled", Severity: severity,
					Title: fmt.Sprintf("receive checksum offload is off on %s", d.Name),
					Evidence: []string{
						fmt.Sprintf("%s receives %s of TCP", d.Name, units.Bits(rx)),
						fmt.Sprintf("rx-checksum off (ethtool -k %s), and the driver can turn it on", d.Name),
					},
					Explanation: explanation,
					Remedy:      []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s rx on", d.Name)},
					Scope:       fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: 0.2,
					ImpactText: "receive CPU per byte higher", Confidence: finding.Possible,
					Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s rx on for one run and compare the receiving CPU's softirq time", d.Name)}})
			}
		}
	}
	return out
}

// irqCoalescing names a NIC that waits long after a packet arrives before
// it interrupts (ethtool -C rx-usecs), where a flow's round trip through it
// is short enough for that wait to be a large part of it: every request,
// response and ACK it receives waits.
func irqCoalescing(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, ns := range ev.Namespaces {
		for i := range ns.Devices {
			d := &ns.Devices[i]
			c := d.Coalesce
			if c == nil || c.AdaptiveRx || c.RxUsecs < coalesceHoldUs {
				continue
			}
			// The flow that suffers most: the shortest round trip through
			// the device, from either end where both are observed.
			var worst *Flow
			for j := range ev.Flows {
				f := &ev.Flows[j]
				through := f.Netns == ns.Name && f.Dev == d.Name || d.holds(f.Peer.Addr())
				if through && f.RTTus > 0 && f.BytesAcked+f.BytesReceived > 0 && (worst == nil || f.RTTus < worst.RTTus) {
					worst = f
				}
			}
			evidence := []string{fmt.Sprintf("%s (%s) may hold a received packet %d µs before it interrupts (ethtool -c %s: rx-usecs %d, adaptive-rx off)",
				d.Name, orNone(d.Driver), c.RxUsecs, d.Name, c.RxUsecs)}
			var irqs uint64
			for _, n := range d.Interrupts {
				irqs += n
			}
			if irqs > 0 && ev.Seconds > 0 {
				evidence = append(evidence, fmt.Sprintf("%.0f interrupts/s for %.0f packets/s received (/proc/interrupts, device counters)",
					float64(irqs)/ev.Seconds, float64(d.Stats.RxPackets)/ev.Seconds))
			}
			severity, impact, confidence := finding.Info, 0.0, finding.Possible
			explanation := "The NIC waits up to rx-usecs after a packet arrives before it raises an interrupt, to take several packets per interrupt. " +
				"Every packet it receives waits: a request, its response, a flow's ACKs."
			if worst != nil {
				evidence = append(evidence, fmt.Sprintf("%s -> %s (netns %s): srtt %s, minimum %s",
					worst.Local, worst.Peer, worst.Netns, usText(worst.RTTus), usText(worst.MinRTTus)))
				if float64(worst.RTTus) <= 4*float64(c.RxUsecs) {
					severity, confidence = finding.Warning, finding.Likely
					impact = min(0.9, float64(c.RxUsecs)/float64(worst.RTTus))
					explanation += fmt.Sprintf(" Here the wait can be %s of that flow's round trip: a request/response exchange runs at about one per wait, "+
						"and a stream's window grows only as fast as its ACKs arrive.", pct(min(1, float64(c.RxUsecs)/float64(worst.RTTus))))
				} else {
					explanation += " The flows through it have round trips long enough that the wait matters little."
				}
			}
			out = append(out, finding.Finding{ID: "irq-coalescing", Severity: severity,
				Title:    fmt.Sprintf("%s holds received packets up to %s before interrupting", d.Name, usText(c.RxUsecs)),
				Evidence: evidence, Explanation: explanation,
				Remedy: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -C %s rx-usecs %d", d.Name, coalesceRemedyUs(d.Driver)),
					"or, where the driver offers it (ethtool -c shows Adaptive RX), " + nsPrefix(ns.Name) + fmt.Sprintf("ethtool -C %s adaptive-rx on", d.Name)},
				Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: impact,
				ImpactText: "the round trips of every flow through it", Confidence: confidence,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -c %s", d.Name),
					"compare a request/response rate (or ping's round trip) with rx-usecs lowered for one run"}})
		}
	}
	return out
}

// coalesceRemedyUs is a short receive hold for a driver: e1000 and e1000e
// read 3 as their default, dynamic conservative mode; others microseconds.
func coalesceRemedyUs(driver string) int {
	if driver == "e1000" || driver == "e1000e" {
		return 3
	}
	return 50
}

// holds says whether the device has the address.
func (d *Device) holds(a netip.Addr) bool {
	for _, p := range d.Addrs {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

func usText(us uint32) string {
	return (time.Duration(us) * time.Microsecond).String()
}

// receiveHeadroom makes a receive offload being off (GRO, checksums) a
// warning only where receive processing loads a CPU. That CPU is the one
// taking most of the device's interrupts, where NAPI, GRO and checksum
// validation run, else the one with the most NET_RX softirq time (softirq
// time without the softirq family). Saturated, it has no idle time to absorb
// the offload's per-packet cost, which then comes out of throughput whatever
// its share; at least half busy with a third of it receive work, the cost is
// large enough to matter. With every CPU of the host that busy on average,
// the receive work has no idle time to move to either: the receive path
// also runs in the reader's context (the socket backlog, the copy), and
// under QEMU's single TCG thread the guest's CPUs share one host core (an
// e1000 wire's interrupt CPU read 87 % busy beside one at 99 %, its GRO off
// costing 40 % of the throughput). Otherwise the setting costs CPU but did
// not set the rate.
func receiveHeadroom(ev *Evidence, d *Device, explanation string) (finding.Severity, string) {
	share := func(c *CPUUse) float64 {
		if c.NetRx > 0 {
			return c.NetRx
		}
		return c.Softirq
	}
	rx, irqs := irqCPU(ev, d), true
	if rx == nil {
		irqs = false
		for i := range ev.CPUs {
			if c := &ev.CPUs[i]; rx == nil || share(c) > share(rx) {
				rx = c
			}
		}
	}
	if rx == nil {
		return finding.Warning, explanation
	}
	where := fmt.Sprintf("The CPU doing the most receive work (CPU %d)", rx.CPU)
	if irqs {
		where = fmt.Sprintf("CPU %d, which takes %s's interrupts and the receive work they start,", rx.CPU, d.Name)
	}
	if rx.Busy() >= cpuBusy {
		return finding.Warning, explanation + fmt.Sprintf(" %s was %s busy: with no idle time left, each packet's extra cost there comes out of throughput.",
			where, pct(rx.Busy()))
	}
	if rx.Busy() >= 0.5 && share(rx) >= 0.3 {
		return finding.Warning, explanation
	}
	if all := meanBusy(ev); all >= cpuBusy {
		return finding.Warning, explanation + fmt.Sprintf(" %s was %s busy and the host's CPUs %s on average: with no idle time anywhere, each packet's extra cost comes out of throughput.",
			where, pct(rx.Busy()), pct(all))
	}
	return finding.Info, explanation + fmt.Sprintf(" %s spent %s on it and was %s busy: receive processing did not set the rate.",
		where, pct(share(rx)), pct(rx.Busy()))
}

// irqCPU is the CPU that took most of a NIC's interrupts during the
// observation (/proc/interrupts), nil for a device without them.
func irqCPU(ev *Evidence, d *Device) *CPUUse {
	var total uint64
	for _, n := range d.Interrupts {
		total += n
	}
	if total < minOffloadSkbs/10 {
		return nil
	}
	for cpu, n := range d.Interrupts {
		if float64(n) < 0.5*float64(total) {
			continue
		}
		for i := range ev.CPUs {
			if ev.CPUs[i].CPU == cpu {
				return &ev.CPUs[i]
			}
		}
	}
	return nil
}

// cpuHeadroom lowers an offload finding to info when no CPU is near busy:
// offloads save CPU, and with CPU to spare they do not set the rate.
func cpuHeadroom(ev *Evidence, severity finding.Severity, explanation string) (finding.Severity, string) {
	if c := busiest(ev); c != nil && c.Busy() < 0.5 {
		return finding.Info, explanation + fmt.Sprintf(" No CPU was more than %s busy, so at this rate it costs CPU, not throughput.", pct(c.Busy()))
	}
	return severity, explanation
}

func groBlocked(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, ns := range ev.Namespaces {
		for i := range ns.Devices {
			d := &ns.Devices[i]
			_, rx := ev.bulkThrough(ns.Name, d.Name)
			if rx == 0 {
				continue
			}
			evidence := []string{fmt.Sprintf("%s receives %s of TCP", d.Name, units.Bits(rx))}
			blocked := d
			if tunnel(d) {
				// Over a tunnel, GRO on the underlay merges the outer packets;
				// the tunnel's own GRO cells merge the inner ones afterwards,
				// which outer headers do not stop.
				blocked = ns.lowerOf(d)
				if blocked == nil {
					continue
				}
				evidence = append(evidence, fmt.Sprintf("it is a %s tunnel over %s", d.Kind, blocked.Name))
				if d.Recv.SegsPerSkb() >= noCoalescing {
					evidence = append(evidence, fmt.Sprintf("%.1f segments per skb on %s after decapsulation (dev_recv): the inner packets merge, the outer ones do not", d.Recv.SegsPerSkb(), d.Name))
				}
			}
			r := blocked.Recv
			if reassembled(&ns, blocked) {
				continue // fragments, which GRO never merges: ip-fragmented
			}
			if r == nil || r.Skbs < minOffloadSkbs || r.SegsPerSkb() >= noCoalescing || !r.smallSkbs() || !blocked.Features[featGRO] {
				continue
			}
			evidence = append(evidence, fmt.Sprintf("%.2f segments per skb at receive on %s over %d skbs (dev_recv), with rx-gro (generic-receive-offload) on",
				r.SegsPerSkb(), blocked.Name, r.Skbs))
			if blocked.Features[featLRO] {
				out = append(out, lroBypass(&ns, blocked, evidence))
				continue
			}
			out = append(out, finding.Finding{ID: "gro-blocked", Severity: finding.Warning,
				Title:    fmt.Sprintf("GRO is on but merges nothing on %s", blocked.Name),
				Evidence: evidence,
				Explanation: "GRO only merges packets that could have come from one segmentation: same flow, consecutive sequence " +
					"numbers and, for IPv4 with DF=0, consecutive IP IDs. Tunnels (VXLAN, Geneve) whose outer headers carry " +
					"DF=0 with IP IDs that jump, or middleboxes that rewrite IDs, stop it; every packet then pays the receive path alone.",
				Remedy: []string{
					"capture on the receiving device and check IP-ID continuity, outer and inner: skbtrace pcap FILE",
					"make the encapsulating side set DF on the outer header (ip link set VXLAN type vxlan ... df set) or keep per-flow IP IDs",
				},
				Scope: fmt.Sprintf("device %s (netns %s)", blocked.Name, ns.Name), Impact: 0.45,
				ImpactText: "receive CPU per byte several times higher; drops where the receive path overflows", Confidence: finding.Likely,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("tcpdump -i %s -s 128 -c 20000 -w gro.pcap, then skbtrace pcap gro.pcap: IP-ID continuity of DF=0 packets, outer and inner", blocked.Name)}})
		}
	}
	return out
}

// lroBypass is GRO that never ran: a driver whose device merges itself
// (LRO on) hands its packets past GRO (vmxnet3 calls netif_receive_skb, not
// napi_gro_receive), and a device that merged nothing (QEMU's vmxnet3 on a
// hub) leaves every segment to the stack alone.
func lroBypass(ns *Namespace, d *Device, evidence []string) finding.Finding {
	evidence = append(evidence, fmt.Sprintf("rx-lro (large-receive-offload) on: the driver passes the device's packets by GRO, and the device merged none (ethtool -k %s)", d.Name))
	remedy := []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s lro off   (GRO then merges in software)", d.Name)}
	if slices.Contains(d.Fixed, featLRO) {
		remedy = []string{fmt.Sprintf("%s's LRO is [fixed] on: the device's own merging must work; check its driver and firmware (ethtool -i %s)", d.Name, d.Name)}
	}
	return finding.Finding{ID: "gro-blocked", Severity: finding.Warning,
		Title:    fmt.Sprintf("%s's LRO is on and merges nothing, and its driver skips GRO for it", d.Name),
		Evidence: evidence,
		Explanation: "With LRO on, some drivers (vmxnet3, for one) hand received packets straight to the stack, trusting the device to " +
			"have merged them. A device that did not merge leaves every MSS-sized packet to pay the receive path alone.",
		Remedy: remedy,
		Scope:  fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: 0.45,
		ImpactText: "receive CPU per byte several times higher", Confidence: finding.Strong,
		Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s lro off for one run: dev_recv's segments per skb rise above one", d.Name)}}
}

// reassembled says whether most of what a device received were IP
// fragments its namespace put back together (Ip.ReasmReqds counts each).
func reassembled(ns *Namespace, d *Device) bool {
	// The device's own count: dev_recv's is scaled from samples.
	frames := d.Stats.RxPackets
	if frames == 0 && d.Recv != nil {
		frames = d.Recv.Skbs
	}
	reqds := ns.Counters["Ip.ReasmReqds"]
	return reqds >= minOffloadSkbs && float64(reqds) >= fragmentShare*float64(frames)
}

// ipFragmented finds bulk TCP that reaches a device as IP fragments. The
// stack reassembles each segment in software and GRO cannot merge
// fragments; where the observed sender's kernel fragmented nothing while
// its device took multi-segment skbs, the device's segmentation offload cut
// them into fragments instead of segments (QEMU's e1000e before 8.0 does,
// on a backend without vnet headers).
func ipFragmented(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.Namespaces {
		ns := &ev.Namespaces[i]
		for j := range ns.Devices {
			d := &ns.Devices[j]
			_, rx := ev.bulkThrough(ns.Name, d.Name)
			if rx == 0 || !reassembled(ns, d) {
				continue
			}
			reqds, oks := ns.Counters["Ip.ReasmReqds"], ns.Counters["Ip.ReasmOKs"]
			evidence := []string{fmt.Sprintf("%s receives %s of TCP", d.Name, units.Bits(rx)),
				fmt.Sprintf("%d IP fragments reassembled into %d datagrams in netns %s (Ip.ReasmReqds, Ip.ReasmOKs), against %d packets received on %s",
					reqds, oks, ns.Name, d.Stats.RxPackets, d.Name)}
			if oks > 0 {
				evidence = append(evidence, fmt.Sprintf("%.1f fragments per datagram", float64(reqds)/float64(oks)))
			}
			if d.Recv != nil {
				evidence = append(evidence, fmt.Sprintf("%.2f segments per skb at receive (dev_recv): GRO merges no fragment", d.Recv.SegsPerSkb()))
			}
			title := fmt.Sprintf("TCP reaches %s as IP fragments: each segment is reassembled in software and GRO merges nothing", d.Name)
			explanation := "A TCP sender never fragments its own segments (it sets DF and sizes them to the path MTU), so fragments " +
				"come from something on the way: a device whose segmentation offload splits large skbs into IP fragments " +
				"instead of TCP segments, or a tunnel or router fragmenting for a smaller MTU. The receiver holds and reassembles " +
				"every fragment, GRO cannot merge them, and one lost fragment loses the whole segment."
			remedy := []string{"capture at the receiver and see which flows arrive fragmented, and from where: skbtrace pcap FILE"}
			confidence := finding.Likely
			if s := fragmentingSender(ev, ns.Name); s != nil {
				sns, sd := s.ns, s.dev
				evidence = append(evidence, fmt.Sprintf("the sender's kernel fragmented nothing (Ip.FragCreates %d in netns %s) and handed %s skbs of %.1f segments each (dev_xmit), %s on",
					sns.Counters["Ip.FragCreates"], sns.Name, sd.Name, sd.Xmit.SegsPerSkb(), featTSO))
				title = fmt.Sprintf("%s's segmentation offload sends IP fragments, not TCP segments: %s reassembles them and GRO merges nothing", sd.Name, d.Name)
				explanation += fmt.Sprintf(" Here the sender's kernel built no fragment: %s's TSO did.", sd.Name)
				confidence = finding.Strong
				remedy = []string{nsPrefix(sns.Name) + fmt.Sprintf("ethtool -K %s tso off (GSO then segments in software, as TCP segments GRO can merge)", sd.Name),
					fmt.Sprintf("report it against %s's driver or device (%s); on an emulated NIC, the hypervisor (QEMU's e1000e fragments TSO before 8.0 on a backend without vnet headers)", sd.Name, orNone(sd.Driver))}
			}
			severity, explanation := receiveHeadroom(ev, d, explanation)
			out = append(out, finding.Finding{ID: "ip-fragmented", Severity: severity, Title: title, Evidence: evidence,
				Explanation: explanation, Remedy: remedy,
				Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: 0.45,
				ImpactText: "receive CPU per byte several times higher; a lost fragment costs a whole segment", Confidence: confidence,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("nstat -az IpReasmReqds IpReasmOKs during the transfer; tcpdump -i %s -c 20 'ip[6:2] & 0x3fff != 0'", d.Name)}})
		}
	}
	return out
}

type sendingDevice struct {
	ns  *Namespace
	dev *Device
}

// fragmentingSender finds the observed sender of the bulk flows received in
// netns whose kernel fragmented nothing while its device took skbs of many
// segments: the device made the fragments.
func fragmentingSender(ev *Evidence, netns string) *sendingDevice {
	for i := range ev.Flows {
		f := &ev.Flows[i]
		p := ev.peerFlow(f)
		if f.Netns != netns || f.RecvBps() < bulkBps && !ev.streaming(f.RecvBps(), p) {
			continue
		}
		if p == nil {
			continue
		}
		sns := ev.namespace(p.Netns)
		sd := ev.device(p.Netns, p.Dev)
		if sns == nil || sd == nil || sns.Counters["Ip.FragCreates"] > 0 || sd.Xmit.SegsPerSkb() < noCoalescing || !sd.Features[featTSO] {
			continue
		}
		return &sendingDevice{sns, sd}
	}
	return nil
}

func tunnel(d *Device) bool { return d.Kind == "vxlan" || d.Kind == "geneve" }

// lowerOf finds a tunnel's underlay: the device it is bound to, or else the
// one device of the namespace that received more packets than the tunnel.
func (ns *Namespace) lowerOf(t *Device) *Device {
	var best *Device
	for i := range ns.Devices {
		d := &ns.Devices[i]
		if t.LowerIndex != 0 && d.Index == t.LowerIndex {
			return d
		}
		if t.LowerIndex == 0 && !tunnel(d) && d.Name != "lo" && d.Recv != nil && (best == nil || d.Recv.Skbs > best.Recv.Skbs) {
			best = d
		}
	}
	return best
}

func knownNICIssue(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, ns := range ev.Namespaces {
		for i := range ns.Devices {
			d := &ns.Devices[i]
			for k := range KnownIssues {
				ki := &KnownIssues[k]
				if !ki.matches(d, ev.Kernel) {
					continue
				}
				evidence := []string{
					fmt.Sprintf("%s: driver %s, PCI %s:%s (%s), firmware %s (ethtool -i, sysfs)", d.Name, d.Driver, d.Vendor, d.DeviceID, ki.Name, orNone(d.Firmware)),
					fmt.Sprintf("kernel %s", ev.Kernel),
				}
				if ki.FeatureOn != "" {
					evidence = append(evidence, fmt.Sprintf("%s is on", ki.FeatureOn))
				}
				if ki.MTUAbove > 0 {
					evidence = append(evidence, fmt.Sprintf("MTU %d, above %d", d.MTU, ki.MTUAbove))
				}
				var remedy []string
				for _, w := range ki.Workaround {
					remedy = append(remedy, nsPrefix(ns.Name)+strings.ReplaceAll(w, "{dev}", d.Name))
				}
				if ki.Note != "" {
					remedy = append(remedy, ki.Note)
				}
				out = append(out, finding.Finding{ID: "known-nic-issue", Severity: finding.Warning,
					Title: fmt.Sprintf("%s matches known issue %s", d.Name, ki.ID), Evidence: evidence,
					Explanation: fmt.Sprintf("%s. Cause: %s (source: %s).", ki.Symptom, ki.Cause, ki.Source),
					Remedy:      remedy, Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: 0.33,
					ImpactText: "as measured where it was found: " + ki.Symptom, Confidence: finding.Possible,
					Confirm: []string{"apply the workaround for one run and compare throughput in both directions (iperf3 and iperf3 -R)"}})
			}
		}
	}
	return out
}

func mtuMismatch(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.Flows {
		f := &ev.Flows[i]
		p := ev.peerFlow(f)
		if p == nil || f.SndMSS == 0 {
			continue
		}
		pd := ev.device(p.Netns, p.Dev)
		if pd == nil {
			continue
		}
		packet := int(f.SndMSS) + headerBytes(f)
		if packet <= pd.MTU {
			continue
		}
		evidence := []string{
			fmt.Sprintf("%s sends segments of MSS %d: %d-byte packets (tcp_info snd_mss)", f.Local, f.SndMSS, packet),
			fmt.Sprintf("the receiving end's %s in netns %s has MTU %d", pd.Name, p.Netns, pd.MTU),
			fmt.Sprintf("throughput %s, %d segments retransmitted", units.Bits(f.SendBps()), max(uint64(f.Retrans), f.TraceRetrans)),
		}
		if sd := ev.device(f.Netns, f.Dev); sd != nil {
			evidence = append(evidence, fmt.Sprintf("the sender's %s has MTU %d", sd.Name, sd.MTU))
		}
		for _, d := range ev.Drops {
			if d.Dev == f.Dev {
				evidence = append(evidence, fmt.Sprintf("%d skb_drop [%s] at %s on %s", d.Count, d.Reason, d.Location, d.Dev))
			}
		}
		minMTU := pd.MTU
		severity, impact, impactText := finding.Critical, 0.99, "nearly all of it: bulk data stalls"
		title := fmt.Sprintf("%s -> %s sends packets larger than the path's MTU %d", f.Local, f.Peer, minMTU)
		explanation := "The sender believes the path carries its large packets, but a link on the way has a smaller MTU and " +
			"drops them without a \"fragmentation needed\" reply reaching the sender: a black hole where the connection " +
			"opens but bulk data stalls in retransmissions."
		if max(uint64(f.Retrans), f.TraceRetrans) == 0 && f.SendBps() >= minBulkBps {
			// Nothing lost: the receiving device took frames above its MTU
			// (virtio-net's mergeable buffers do; many NICs up to their
			// buffer size). Latent, not a black hole yet.
			severity, impact, impactText = finding.Warning, 0.2, "none here yet; all of it where a hop at the smaller MTU drops them"
			title = fmt.Sprintf("%s -> %s sends packets larger than the receiving device's MTU %d, which took them", f.Local, f.Peer, minMTU)
			explanation = fmt.Sprintf("%s accepted frames above its MTU and nothing was retransmitted, so this path works by the receiving "+
				"device's leniency (virtio-net with mergeable buffers, many NICs up to their buffer size). A switch or NIC that "+
				"keeps to the MTU drops them without a \"fragmentation needed\" reply: a black hole.", pd.Name)
		}
		out = append(out, finding.Finding{ID: "mtu-mismatch", Severity: severity,
			Title:       title,
			Evidence:    evidence,
			Explanation: explanation,
			Remedy: []string{
				nsPrefix(f.Netns) + fmt.Sprintf("ip link set %s mtu %d   (one MTU on the whole path)", orNone(f.Dev), minMTU),
				"or remove what advertises the larger MSS (ip route ... advmss), or raise the MTU of every hop",
				nsPrefix(f.Netns) + "sysctl -w net.ipv4.tcp_mtu_probing=1   (recovers from black holes by probing)",
			},
			Scope: flowScope(f), Impact: impact, ImpactText: impactText, Confidence: finding.Strong,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -M do -s %d -c 3 %s   (a full-size packet with DF: no reply through the hole)", packet-28, f.Peer.Addr())}})
	}
	out = append(out, pathMTUHoles(ev, out)...)
	out = append(out, mtuDiffers(ev, out)...)
	return out
}

// pathMTUHoles finds flows whose packets a hop drops as too big for its
// link (PKT_TOO_BIG where this host forwards, in any namespace) while the
// sender goes on sending them: the "fragmentation needed" reply is lost, and
// the flow stalls in retransmission timeouts. Drops that path-MTU discovery
// answers cost a few packets and are no finding.
func pathMTUHoles(ev *Evidence, already []finding.Finding) []finding.Finding {
	if len(already) > 0 {
		return nil
	}
	type hole struct {
		drops   []string
		dropped uint64
	}
	holes := map[*Flow]*hole{}
	var order []*Flow
	for i := range ev.Drops {
		d := &ev.Drops[i]
		if d.Reason != "PKT_TOO_BIG" {
			continue
		}
		f := ev.sentBy(d)
		if f == nil {
			continue
		}
		h := holes[f]
		if h == nil {
			h = &hole{}
			holes[f] = h
			order = append(order, f)
		}
		h.dropped += d.Count
		h.drops = append(h.drops, fmt.Sprintf("%d of its packets dropped as too big for the next link: skb_drop [PKT_TOO_BIG] at %s on %s%s",
			d.Count, d.Location, orNone(d.Dev), unobserved(ev, d.Dev)))
	}
	var out []finding.Finding
	for _, f := range order {
		h := holes[f]
		rto := f.LimitShares["rto"]
		var icmp uint64
		for _, d := range ev.Drops {
			if strings.HasSuffix(d.Protocol, "/icmp") && d.Dst.Addr().Unmap() == f.Local.Addr().Unmap() {
				icmp += d.Count
			}
		}
		if rto < limitShare && icmp == 0 {
			continue
		}
		sends := fmt.Sprintf("%s sends %d-byte packets (tcp_info snd_mss %d, path MTU %d): the sender never learned of the smaller link",
			f.Local, int(f.SndMSS)+headerBytes(f), f.SndMSS, f.PMTU)
		if f.FromRecording {
			sends = fmt.Sprintf("%s sends packets too big for a link on the path: the sender never learned of the smaller link", f.Local)
		}
		evidence := append([]string{sends}, h.drops...)
		if icmp > 0 {
			evidence = append(evidence, fmt.Sprintf("%d ICMP packets to %s dropped on the way back: the \"fragmentation needed\" replies", icmp, f.Local.Addr()))
		}
		severity, impact := finding.Warning, 0.5
		if rto >= limitShare {
			evidence = append(evidence, fmt.Sprintf("the sender waited on retransmission timeouts %s of the time (tcp_sendlim [rto]); %d segments retransmitted, throughput %s",
				pct(rto), max(uint64(f.Retrans), f.TraceRetrans), units.Bits(f.SendBps())))
			severity, impact = finding.Critical, 0.99
		}
		out = append(out, finding.Finding{ID: "mtu-mismatch", Severity: severity,
			Title:    fmt.Sprintf("a path-MTU black hole: a hop drops %s -> %s's full-size packets and the sender is never told", f.Local, f.Peer),
			Evidence: evidence,
			Explanation: "A link on the path has a smaller MTU than the ends. A router drops what it cannot forward and replies " +
				"with ICMP \"fragmentation needed\", which makes the sender lower its path MTU; when a firewall drops that " +
				"reply, the sender retransmits the same packets into the hole: the connection opens, bulk data stalls.",
			Remedy: []string{
				"let ICMP destination-unreachable (fragmentation needed; ICMPv6 packet-too-big) through every firewall on the path: nft list ruleset | grep -n icmp",
				nsPrefix(f.Netns) + "sysctl -w net.ipv4.tcp_mtu_probing=1   (the sender finds the path MTU without ICMP)",
				nsPrefix(f.Netns) + fmt.Sprintf("ip route change %s/%d ... advmss LOWER-MSS   (or clamp the MSS on the router)", f.Peer.Addr(), f.Peer.Addr().BitLen()),
			},
			Scope: flowScope(f), Impact: impact, ImpactText: "bulk data stalls in timeouts", Confidence: finding.Strong,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -M do -s %d -c 3 %s   (a full-size packet with DF: no reply, no error)", fullSizePing(f), f.Peer.Addr())}})
	}
	return out
}

// unobserved says so of a device that no observed namespace holds.
func unobserved(ev *Evidence, dev string) string {
	if dev == "" || ev.deviceNetns(dev) != "" {
		return ""
	}
	return " (a namespace the doctor does not observe)"
}

// mtuDiffers reports veth pairs whose ends disagree. TCP usually works
// across such a link (each end derives its MSS from its own MTU), so it is a
// note until the link's traffic suffers: then the drops and retransmissions
// are its symptoms, and it is at least as severe as they are.
func mtuDiffers(ev *Evidence, already []finding.Finding) []finding.Finding {
	if len(already) > 0 {
		return nil
	}
	var out []finding.Finding
	seen := map[*Device]bool{}
	for i := range ev.Namespaces {
		ns := &ev.Namespaces[i]
		for j := range ns.Devices {
			d := &ns.Devices[j]
			if d.Kind != "veth" || seen[d] {
				continue
			}
			ons, o := ev.vethPeer(ns, d)
			if o == nil || o.MTU == d.MTU {
				continue
			}
			seen[d], seen[o] = true, true
			evidence := []string{fmt.Sprintf("%s (netns %s) MTU %d; its peer %s (netns %s) MTU %d", d.Name, ns.Name, d.MTU, o.Name, ons.Name, o.MTU)}
			var dropped uint64
			for _, dr := range ev.Drops {
				if (dr.Dev == d.Name || dr.Dev == o.Name) && ev.suffered(&dr) && tooBigForLink(dr) {
					dropped += dr.Count
					evidence = append(evidence, fmt.Sprintf("%d skb_drop [%s] at %s on %s", dr.Count, dr.Reason, dr.Location, dr.Dev))
				}
			}
			var retrans, segs uint64
			for k := range ev.Flows {
				f := &ev.Flows[k]
				if f.Netns == ns.Name && f.Dev == d.Name || f.Netns == ons.Name && f.Dev == o.Name {
					retrans, segs = retrans+uint64(f.Retrans), segs+uint64(f.SegsOut)
				}
			}
			if retrans > 0 {
				evidence = append(evidence, fmt.Sprintf("%d of %d segments of the flows over the link retransmitted (tcp_info)", retrans, segs))
			}
			// Only drops of packets too big for the link convict it; the
			// retransmissions of its flows, which any loss causes, size it.
			severity, impact, impactText, confidence := finding.Info, 0.05, "none measured", finding.Possible
			if dropped > 0 {
				severity, impact, confidence = finding.Warning, 0.5, finding.Strong
				if segs > 0 {
					impact = math.Min(0.9, math.Max(impact, 5*math.Sqrt(float64(retrans)/float64(segs))))
				}
				impactText = fmt.Sprintf("about %s (from the link's drops and retransmissions)", pct(impact))
			}
			out = append(out, finding.Finding{ID: "mtu-mismatch", Severity: severity,
				Title:    fmt.Sprintf("the ends of a link disagree on the MTU: %s %d, %s %d", d.Name, d.MTU, o.Name, o.MTU),
				Evidence: evidence,
				Explanation: "Each end derives its MSS from its own MTU, so TCP often works across it; but a packet larger than " +
					"the receiving end's MTU (a larger advertised MSS, GSO or UDP beyond the smaller MTU) is dropped there " +
					"without an ICMP error, and the sender retransmits into the same hole.",
				Remedy: []string{nsPrefix(ns.Name) + fmt.Sprintf("ip link set %s mtu %d", d.Name, min(d.MTU, o.MTU)) +
					"   (or " + nsPrefix(ons.Name) + fmt.Sprintf("ip link set %s mtu %d: one MTU on both ends)", o.Name, max(d.MTU, o.MTU))},
				Scope: "device " + d.Name, Impact: impact, ImpactText: impactText, Confidence: confidence,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ping -M do -s %d -c 3 ADDRESS-BEHIND-%s   (a packet of the larger MTU dies on the link)", max(d.MTU, o.MTU)-28, o.Name)}})
		}
	}
	return out
}

func smallPacketBound(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, s := range ev.SockIO {
		if s.Calls == 0 || ev.Seconds <= 0 {
			continue
		}
		perCall := float64(s.Bytes) / float64(s.Calls)
		callRate := float64(s.Calls) / ev.Seconds
		if callRate < smallCallRate || perCall > smallPacket {
			continue
		}
		evidence := []string{
			fmt.Sprintf("%s (pid %d) made %.0f %s calls/s of %.0f bytes on average: %s of payload (sock_io)",
				s.Comm, s.Pid, callRate, s.Dir, perCall, units.Bits(float64(s.Bytes)*8/ev.Seconds)),
		}
		out = append(out, smallPacketFinding(ev, evidence, fmt.Sprintf("%s (pid %d)", s.Comm, s.Pid), perCall))
	}
	if len(ev.SockIO) > 0 {
		return out
	}
	// Without sock_io, the device counters show the same shape.
	for _, ns := range ev.Namespaces {
		for _, d := range ns.Devices {
			pps := float64(d.Stats.TxPackets) / max(ev.Seconds, 1e-9)
			if d.Name == "lo" || pps < 50000 || d.txBytesPerPacket() > smallPacket {
				continue
			}
			evidence := []string{fmt.Sprintf("%s sent %.0f packets/s of %.0f bytes on average (device counters)", d.Name, pps, d.txBytesPerPacket())}
			out = append(out, smallPacketFinding(ev, evidence, "device "+d.Name, d.txBytesPerPacket()))
		}
	}
	return out
}

func smallPacketFinding(ev *Evidence, evidence []string, scope string, size float64) finding.Finding {
	if c := busiest(ev); c != nil {
		evidence = append(evidence, fmt.Sprintf("busiest CPU %d: %s busy (%s)", c.CPU, pct(c.Busy()), cpuSplit(c)))
	}
	explanation := "Each packet pays a system call, the protocol stack and the driver whatever its size: with small " +
		"packets that fixed cost, not the link, sets the rate, and bits per second fall with the packet size."
	remedy := []string{
		"send larger messages: batch into bigger writes or datagrams (iperf3 -l 1400 for a test)",
		"amortize the system calls: sendmmsg/recvmmsg, UDP GSO (setsockopt UDP_SEGMENT) and UDP GRO on receive",
	}
	if len(ev.Mitigations) > 0 {
		var names []string
		for _, m := range ev.Mitigations {
			names = append(names, m.Name+" ("+strings.TrimPrefix(m.State, "Mitigation: ")+")")
		}
		evidence = append(evidence, "CPU vulnerability mitigations in force: "+strings.Join(names, ", ")+" (/sys/devices/system/cpu/vulnerabilities)")
		explanation += " The mitigations in force add to the cost of every system call and kernel entry, so they weigh most here."
		remedy = append(remedy, "compare with the mitigations relaxed only where the threat model allows it (kernel parameter mitigations=off on an isolated test host) to measure their share")
	}
	return finding.Finding{ID: "small-packet-bound", Severity: finding.Warning,
		Title: fmt.Sprintf("%.0f-byte packets: the per-packet cost sets the rate", size), Evidence: evidence,
		Explanation: explanation, Remedy: remedy, Scope: scope,
		Impact: 1 - size/1472, ImpactText: fmt.Sprintf("%s of what full-size packets would carry", pct(1-size/1472)), Confidence: finding.Likely,
		Confirm: []string{"run the same transfer with 1400-byte messages: bits per second should grow about with the size, packets per second stay"}}
}

func rateShaped(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, ns := range ev.Namespaces {
		for i := range ns.Devices {
			d := &ns.Devices[i]
			tx := ev.sentThrough(ns.Name, d.Name)
			through := fmt.Sprintf("TCP through %s", d.Name)
			// No flow is routed through an ifb (ingress redirected to it) or a
			// device that forwards: its own counters say what passed.
			if tx == 0 && ev.Seconds > 0 {
				tx = float64(d.Stats.TxBytes) * 8 / ev.Seconds
				through = fmt.Sprintf("traffic through %s (its counters: no observed socket sends through it)", d.Name)
			}
			for _, q := range d.Qdiscs {
				if q.RateBps == 0 {
					continue
				}
				limit := float64(q.RateBps) * 8
				pressed := q.Overlimits > 0 || q.Drops > 0 || d.QdiscBacklogMax > 0
				// Below the rate, the shaper still sets the pace when the flow's
				// bursts (TSO skbs) overrun its bucket: most packets wait, or
				// some are dropped, and a backlog stands.
				// Drops alone do not say the rate binds: a short queue under a
				// rate far above the flow drops too (packet-loss names it).
				held := q.Packets > 0 && q.Overlimits*10 >= q.Packets && d.QdiscBacklogMax >= uint32(3*d.MTU)
				if tx > 1.2*limit || !pressed || tx < 0.7*limit && (!held || tx < 0.1*limit) {
					continue
				}
				evidence := []string{
					fmt.Sprintf("%s %s on %s shapes to %s (tc qdisc)", q.Kind, q.Handle, d.Name, units.Bits(limit)),
					fmt.Sprintf("%s: %s, %s of the configured rate", through, units.Bits(tx), pct(tx/limit)),
					fmt.Sprintf("%d packets over the limit, %d dropped during the observation", q.Overlimits, q.Drops),
				}
				if q.Packets > 0 {
					evidence[2] = fmt.Sprintf("%d of %d packets over the limit, %d dropped during the observation", q.Overlimits, q.Packets, q.Drops)
				}
				if d.QdiscBacklogMax > 0 {
					evidence = append(evidence, fmt.Sprintf("backlog up to %d bytes (qdisc events)", d.QdiscBacklogMax))
				}
				title := fmt.Sprintf("a %s qdisc on %s caps the rate at %s", q.Kind, d.Name, units.Bits(limit))
				explanation := "A shaper holds packets back to keep its rate: whatever the link could do, flows through it " +
					"cannot exceed the configured rate."
				remedyBurst := ""
				if tx < 0.7*limit {
					title = fmt.Sprintf("a %s qdisc on %s holds TCP to %s of its %s", q.Kind, d.Name, pct(tx/limit), units.Bits(limit))
					explanation += " Here the flow stays well below that rate: its bursts (a TSO/GSO skb is up to 64 KB) " +
						"overrun the shaper's bucket, so packets wait and TCP's small queues throttle the sender."
					remedyBurst = nsPrefix(ns.Name) + fmt.Sprintf("tc qdisc change dev %s %s %s rate %.0fkbit burst 256k ...   (a bucket of several TSO bursts)",
						d.Name, parentArg(q.Parent), q.Kind, limit/1e3)
				}
				impact := 0.5
				if d.physical() {
					impact = max(0, 1-limit/(float64(d.SpeedMbps)*1e6))
				}
				if remedyBurst != "" {
					impact = max(impact, 1-tx/limit)
				}
				remedy := []string{
					nsPrefix(ns.Name) + fmt.Sprintf("tc qdisc show dev %s   (is the limit intended?)", d.Name),
					nsPrefix(ns.Name) + fmt.Sprintf("tc qdisc change dev %s %s %s rate NEWRATE ...  or  tc qdisc del dev %s %s", d.Name, parentArg(q.Parent), q.Kind, d.Name, parentArg(q.Parent)),
				}
				if remedyBurst != "" {
					remedy = append([]string{remedyBurst}, remedy...)
				}
				out = append(out, finding.Finding{ID: "rate-shaped", Severity: finding.Warning,
					Title: title, Evidence: evidence, Explanation: explanation, Remedy: remedy,
					Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: impact,
					ImpactText: "everything above the configured rate", Confidence: finding.Strong,
					Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("tc -s qdisc show dev %s twice, a second apart: overlimits and the backlog grow with the flow", d.Name)}})
			}
		}
	}
	if len(out) == 0 {
		out = pathQueues(ev)
	}
	return out
}

// pathQueues finds a shaper or slower link the doctor cannot see (another
// host, a namespace it does not observe) by what it does to a flow: the
// sender waits for its congestion window while its round trip grows far
// beyond its minimum, the time its packets queue in front of the slow hop.
// Random loss cuts the window without the queue; a reader that falls behind
// holds the sender by its window instead.
func pathQueues(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, f := range ev.senders() {
		reason, share := topLimit(f)
		if reason != "cwnd" || share < 0.5 || !ackClockSlowed(f) {
			continue
		}
		queueDrops := queueDropsOf(ev, f)
		if len(queueDrops) == 0 && readerBehind(ev, f) > 0 {
			continue
		}
		queued := time.Duration(f.RTTus-f.MinRTTus) * time.Microsecond
		evidence := []string{
			fmt.Sprintf("the sender waited for its congestion window %s of the time (tcp_sendlim [cwnd])", pct(share)),
			fmt.Sprintf("srtt %s against a minimum of %s: %s of queue in front of a slower hop",
				time.Duration(f.RTTus)*time.Microsecond, time.Duration(f.MinRTTus)*time.Microsecond, queued.Round(time.Millisecond/10)),
			fmt.Sprintf("throughput %s%s: the hop's rate", units.Bits(f.SendBps()), deliveryRate(f)),
		}
		for _, d := range queueDrops {
			evidence = append(evidence, fmt.Sprintf("%d of its packets dropped by a full queue: skb_drop [%s] at %s on %s%s", d.Count, d.Reason, d.Location, orNone(d.Dev), unobserved(ev, d.Dev)))
		}
		severity, explanation := finding.Warning, "When a hop forwards slower than the sender can send, packets queue in front of it: the round trip "+
			"grows by the queue, losses come when it overflows, and the flow settles at the hop's rate whatever the "+
			"ends could do. No shaper on the observed devices explains it, so the hop is elsewhere on the path."
		// Drops located on the way, for a reason other than a full queue,
		// convict the window's waits themselves (packet-loss); the longer
		// round trip then says only that something queued, perhaps a busy CPU.
		if c := receiverSaturated(ev, f); c != nil {
			severity = finding.Info
			evidence = append(evidence, fmt.Sprintf("but the receiver was observed and CPU %d was %s busy, %s in softirq and %s in system time: the queue is the receiver's own (its ring and backlog waiting for that CPU)",
				c.CPU, pct(c.Busy()), pct(max(c.Softirq, c.NetRx)), pct(c.System)))
			explanation += " Here the receiving end is observed and its CPU was saturated by receive work: the queue is the receiver's input, not a hop (cpu-saturated)."
		} else if d := lossElsewhere(ev, f); d != nil {
			severity = finding.Info
			evidence = append(evidence, fmt.Sprintf("but %d of the flow's packets were dropped as skb_drop [%s] at %s on %s: loss, not a hop's rate, cuts its window",
				d.Count, d.Reason, d.Location, orNone(d.Dev)))
			explanation += " Here the flow also lost packets to something other than a queue (packet-loss): the loss holds its window."
		}
		out = append(out, finding.Finding{ID: "rate-shaped", Severity: severity,
			Title:       fmt.Sprintf("a queue beyond this host holds %s -> %s to %s: a shaper or a slower link on the path", f.Local, f.Peer, units.Bits(f.SendBps())),
			Evidence:    evidence,
			Explanation: explanation,
			Remedy: []string{
				"find the hop: tc -s qdisc show on each router or namespace of the path (a rate, overlimits, a standing backlog)",
				"a rate limit there works as configured: raise it or move the flow; a slower link: upgrade it or spread the load",
				"keep that queue short (fq_codel or a smaller limit) to take the queueing delay out of every flow through it",
			},
			Scope: flowScope(f), Impact: 0.5, ImpactText: "everything above the hop's rate", Confidence: finding.Likely,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -c 20 %s during the transfer and without it: the difference is the queue", f.Peer.Addr())}})
	}
	return out
}

// ackClockSlowed says a flow's round trip grew far beyond its minimum: its
// packets wait in a queue somewhere, or its ACKs come late.
// lossElsewhere is the largest drop, of at least minLocatedDrops packets,
// that the flow's packets could have suffered for a reason other than a full
// queue (a shaper's or a CPU's backlog overflowing is what a slow hop does).
func lossElsewhere(ev *Evidence, f *Flow) *Drop {
	var worst *Drop
	for i := range ev.Drops {
		d := &ev.Drops[i]
		if benign(d) || strings.HasPrefix(d.Reason, "QDISC_") || d.Reason == "CPU_BACKLOG" || d.Count < minLocatedDrops || !ev.suffered(d) {
			continue
		}
		if s := ev.sentBy(d); s != nil && s != f {
			continue
		}
		if worst == nil || d.Count > worst.Count {
			worst = d
		}
	}
	return worst
}

// queueDropsOf are the drops of a flow's packets by a full queue. Such a
// queue is what slows the flow's ACK clock: a receiver's zero windows beside
// them are the out-of-order data the loss left in its buffer, not a reader
// holding its ACKs back.
func queueDropsOf(ev *Evidence, f *Flow) []Drop {
	var out []Drop
	for _, d := range ev.Drops {
		if strings.HasPrefix(d.Reason, "QDISC_") && ev.sentBy(&d) == f {
			out = append(out, d)
		}
	}
	return out
}

// receiverSaturated is a saturated CPU doing receive work where the flow's
// receiver is observed: a queue there is the receiver waiting for its CPU.
// Receive work is the kernel's, in softirq and in system time: with receive
// checksum offload off, the checksum is summed in the copy to the reader
// (e1000 in QEMU: CPU 1 92 % busy, 23 % softirq and 52 % system).
func receiverSaturated(ev *Evidence, f *Flow) *CPUUse {
	if ev.peerFlow(f) == nil {
		return nil
	}
	for i := range ev.CPUs {
		if c := &ev.CPUs[i]; c.Busy() >= cpuBusy && receiving(c) {
			return c
		}
	}
	return nil
}

// receiving says a saturated CPU spent its time on receive work: 30 % in
// softirq, or half in the kernel (softirq and system) where the copies to
// the reader sum the checksums a NIC left unchecked. A CPU busy with its
// applications' own code is not the receive path's.
func receiving(c *CPUUse) bool {
	softirq := max(c.Softirq, c.NetRx)
	return softirq >= 0.3 || softirq+c.System >= 0.5
}

func ackClockSlowed(f *Flow) bool {
	return f.RTTus >= 4*f.MinRTTus && time.Duration(f.RTTus-f.MinRTTus)*time.Microsecond >= pathQueueDelay
}

// readerBehind counts the zero windows the flow's observed receiver had to
// advertise (its namespace's counters) when the sender met a shut window
// itself: an application that stops reading. A receiver's lone zero window
// (a slow start, a close) says nothing of this flow. Such a receiver also
// holds its ACKs back (it acknowledges at once only when the window can
// move), which slows the sender's ACK clock like a queue.
func readerBehind(ev *Evidence, f *Flow) int64 {
	if f.LimitShares["swnd"] < 0.02 {
		return 0
	}
	p := ev.peerFlow(f)
	if p == nil {
		return 0
	}
	ns := ev.namespace(p.Netns)
	if ns == nil {
		return 0
	}
	return ns.Counters["TcpExt.TCPToZeroWindowAdv"] + ns.Counters["TcpExt.TCPWantZeroWindowAdv"]
}

func asymmetricPath(ev *Evidence) []finding.Finding {
	// Each flow's data direction: out of a sender, into a receiver.
	type dir struct{ from, to string }
	rates := map[dir]float64{}
	sender := map[dir]*Flow{}
	for i := range ev.Flows {
		f := &ev.Flows[i]
		local, peer := f.Local.Addr().String(), f.Peer.Addr().String()
		if r := f.SendBps(); r >= bulkBps/10 {
			k := dir{local, peer}
			if s := sender[k]; s == nil || r > s.SendBps() {
				sender[k] = f
			}
			rates[k] = max(rates[k], r)
		}
		if r := f.RecvBps(); r >= bulkBps/10 {
			rates[dir{peer, local}] = max(rates[dir{peer, local}], r)
		}
	}
	var out []finding.Finding
	seen := map[dir]bool{}
	for k, fwd := range rates {
		back, ok := rates[dir{k.to, k.from}]
		if !ok || seen[k] {
			continue
		}
		seen[k], seen[dir{k.to, k.from}] = true, true
		slow, fast, from, to := fwd, back, k.from, k.to
		if back < fwd {
			slow, fast, from, to = back, fwd, k.to, k.from
		}
		if slow >= 0.7*fast {
			continue
		}
		// A slow direction whose sender waited on the receiver's window, its
		// own buffer or its application was held by an end, not the path.
		if f := sender[dir{from, to}]; f != nil {
			if reason, share := topLimit(f); share >= limitShare && (reason == "swnd" || reason == "sndbuf" || reason == "app") {
				continue
			}
		}
		out = append(out, finding.Finding{ID: "asymmetric-path", Severity: finding.Warning,
			Title: fmt.Sprintf("%s -> %s is %s slower than the reverse direction", from, to, pct(1-slow/fast)),
			Evidence: []string{
				fmt.Sprintf("%s -> %s: %s", from, to, units.Bits(slow)),
				fmt.Sprintf("%s -> %s: %s", to, from, units.Bits(fast)),
			},
			Explanation: "On a full-duplex path both directions should reach about the same rate; when one does not, the " +
				"difference lies in what only that direction uses: the sender's transmit offloads and driver, or the " +
				"receiver's receive path.",
			Remedy: []string{fmt.Sprintf("on %s compare the transmit settings with the other host: ethtool -k DEV (tso/gso), ethtool -i DEV (driver), and try ethtool -K DEV tso off gso off", from)},
			Scope:  fmt.Sprintf("%s -> %s", from, to), Impact: 1 - slow/fast,
			ImpactText: fmt.Sprintf("%s in the slow direction", units.Bits(fast-slow)), Confidence: finding.Likely,
			Confirm: []string{"run the same transfer both ways, one at a time (iperf3, then iperf3 -R): is one direction slow alone too?"}})
	}
	return out
}

// --- helpers ---

// deliveryRate is tcp_info's delivery rate for evidence, or nothing when
// the flow was not read from tcp_info.
func deliveryRate(f *Flow) string {
	if f.FromRecording {
		return ""
	}
	return fmt.Sprintf(" (delivery rate %s)", units.Bits(float64(f.DeliveryRate)*8))
}

// fullSizePing is ping's payload size for one of the flow's full-size
// packets: its MSS where tcp_info gave it, else an Ethernet-MTU packet.
func fullSizePing(f *Flow) int {
	if f.SndMSS == 0 {
		if f.Peer.Addr().Unmap().Is4() {
			return 1500 - 28
		}
		return 1500 - 48
	}
	return int(f.SndMSS) + headerBytes(f) - 28
}

func topLimit(f *Flow) (string, float64) {
	best, share := "", 0.0
	for r, s := range f.LimitShares {
		if s > share {
			best, share = r, s
		}
	}
	return best, share
}

func (e *Evidence) sysctl(netns, name string) string {
	if ns := e.namespace(netns); ns != nil {
		return ns.Sysctls[name]
	}
	return ""
}

// deviceNetns names the observed namespace that holds a device.
func (e *Evidence) deviceNetns(dev string) string {
	for _, ns := range e.Namespaces {
		if e.device(ns.Name, dev) != nil {
			return ns.Name
		}
	}
	return ""
}

// sentThrough sums the TCP rates sent through a device by the observed
// flows whose local address it holds.
func (e *Evidence) sentThrough(netns, dev string) (tx float64) {
	for i := range e.Flows {
		if f := &e.Flows[i]; f.Netns == netns && f.Dev == dev {
			tx += f.SendBps()
		}
	}
	return tx
}

// bulkThrough sums the TCP rates sent and received through a device by the
// observed flows whose local address it holds, when they are bulk: all of
// them from bulkBps together, else those streaming; 0 for none.
func (e *Evidence) bulkThrough(netns, dev string) (tx, rx float64) {
	var allTx, allRx float64
	for i := range e.Flows {
		if f := &e.Flows[i]; f.Netns == netns && f.Dev == dev {
			allTx += f.SendBps()
			allRx += f.RecvBps()
			if e.streaming(f.SendBps(), f) {
				tx += f.SendBps()
			}
			if e.streaming(f.RecvBps(), e.peerFlow(f)) {
				rx += f.RecvBps()
			}
		}
	}
	if allTx >= bulkBps {
		tx = allTx
	}
	if allRx >= bulkBps {
		rx = allRx
	}
	return tx, rx
}

// streaming says whether a flow below bulkBps still moves bulk: at least
// minBulkBps while its sender, observed with a recording, waited on its
// application less than half the time (held by the network), or did so on
// a saturated CPU (an application that cannot write faster is CPU-bound,
// not paced). An emulated NIC's whole stream runs at 3-150 Mbit/s, astride
// any fixed bar; the offload rules want 1000 skbs besides.
func (e *Evidence) streaming(rate float64, sender *Flow) bool {
	if rate < minBulkBps || sender == nil || sender.LimitShares == nil {
		return false
	}
	if sender.LimitShares["app"] < 0.5 {
		return true
	}
	c := busiest(e)
	return c != nil && c.Busy() >= cpuBusy
}

// smallSkbs says whether skbs averaged less than 16 KB: one segment per skb
// only costs where segments are small (not on loopback's 64 KB MTU).
func (d *DirUse) smallSkbs() bool {
	return d.Skbs > 0 && d.Bytes/d.Skbs < 16<<10
}

func (d *Device) featureOff(names ...string) bool {
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			return true
		}
	}
	return false
}

// locked says whether every named feature that is off is one ethtool -K
// cannot turn on: fixed, or held off by another.
func (d *Device) locked(names ...string) bool {
	found := false
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			if !slices.Contains(d.Fixed, n) && !slices.Contains(d.Held, n) {
				return false
			}
			found = true
		}
	}
	return found
}

// lockedText names the segmentation features the device holds off, and
// the switches they wait for.
func lockedText(d *Device) string {
	var fixed, held []string
	for _, n := range []string{featTSO, featGSO, featSG, featTxCsum} {
		if slices.Contains(d.Fixed, n) {
			fixed = append(fixed, n)
		} else if slices.Contains(d.Held, n) {
			held = append(held, n)
		}
	}
	var parts []string
	if len(fixed) > 0 {
		parts = append(parts, strings.Join(fixed, ", ")+" off [fixed] (ethtool -k "+d.Name+")")
	}
	if len(held) > 0 {
		parts = append(parts, strings.Join(held, ", ")+" requested but held off by the features they need")
	}
	return strings.Join(parts, "; ")
}

// segmentationRemedy is what can give a device that refuses TSO and GSO
// its segmentation back: the switches it needs where those can change,
// else the device's backend (a virtio NIC's offloads are the host's).
func segmentationRemedy(netns string, d *Device) []string {
	var can []string
	for _, n := range []string{featTxCsum, featSG} {
		if d.featureOff(n) && !slices.Contains(d.Fixed, n) {
			can = append(can, map[string]string{featTxCsum: "tx on", featSG: "sg on"}[n])
		}
	}
	if len(can) > 0 {
		return []string{nsPrefix(netns) + fmt.Sprintf("ethtool -K %s %s tso on gso on (GSO needs scatter-gather, which needs transmit checksumming)", d.Name, strings.Join(can, " "))}
	}
	if d.Driver == "virtio_net" {
		return []string{"the host gives this virtio NIC no offloads: enable them on the hypervisor's side (a tap or vhost-net backend with vnet headers, e.g. QEMU -netdev tap,vnet_hdr=on; csum and gso on the device), then ethtool -K " + d.Name + " tso on gso on here",
			"until then every packet costs a trip through the stack: a larger MTU on the whole path cuts their number"}
	}
	return []string{fmt.Sprintf("the driver (%s) refuses it on this device: a NIC with TSO, or a larger MTU on the whole path to cut the packets per byte", orNone(d.Driver))}
}

func (d *Device) offList(names ...string) string {
	var off []string
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			off = append(off, n)
		}
	}
	return strings.Join(off, " and ")
}

// l2Header allows for the Ethernet and VLAN headers device counters include.
const l2Header = 18

func recvShape(d *Device) string {
	if d.Recv != nil {
		return fmt.Sprintf("%.2f segments per skb at receive over %d skbs (dev_recv)", d.Recv.SegsPerSkb(), d.Recv.Skbs)
	}
	return fmt.Sprintf("%.0f bytes per received packet, MTU %d (device counters)", d.rxBytesPerPacket(), d.MTU)
}

func (d *Device) rxBytesPerPacket() float64 {
	if d.Stats.RxPackets == 0 {
		return 0
	}
	return float64(d.Stats.RxBytes) / float64(d.Stats.RxPackets)
}

func (d *Device) txBytesPerPacket() float64 {
	if d.Stats.TxPackets == 0 {
		return 0
	}
	return float64(d.Stats.TxBytes) / float64(d.Stats.TxPackets)
}

// ErrorStatsClean says whether no driver trouble counter moved.
func (d *Device) ErrorStatsClean() bool {
	for _, v := range d.ErrorStats {
		if v > 0 {
			return false
		}
	}
	return d.Stats.RxErrors == 0 && d.Stats.TxErrors == 0 && d.Stats.RxDropped == 0
}

func physicalPath(ev *Evidence, f *Flow) bool {
	return ev.device(f.Netns, f.Dev).physical()
}

// physical says whether the device is a NIC with a link speed: veth reports
// a nominal 10000 Mbit/s that limits nothing.
func (d *Device) physical() bool {
	return d != nil && d.Kind == "device" && d.SpeedMbps > 0
}

// meanBusy is the share of all the host's CPU time that was not idle.
func meanBusy(ev *Evidence) float64 {
	if len(ev.CPUs) == 0 {
		return 0
	}
	var sum float64
	for _, c := range ev.CPUs {
		sum += c.Busy()
	}
	return sum / float64(len(ev.CPUs))
}

func busiest(ev *Evidence) *CPUUse {
	var b *CPUUse
	for i := range ev.CPUs {
		if b == nil || ev.CPUs[i].Busy() > b.Busy() {
			b = &ev.CPUs[i]
		}
	}
	return b
}

func cpuSplit(c *CPUUse) string {
	return fmt.Sprintf("user %s, system %s, softirq %s, irq %s", pct(c.User), pct(c.System), pct(c.Softirq), pct(c.IRQ))
}

func headerBytes(f *Flow) int {
	if f.Local.Addr().Is6() {
		return 60
	}
	return 40
}

func flowScope(f *Flow) string {
	return fmt.Sprintf("socket %s -> %s (netns %s)", f.Local, f.Peer, f.Netns)
}

// nsPrefix runs a command in the namespace it concerns.
func nsPrefix(netns string) string {
	if netns == "" || netns == "host" || netns == "init" {
		return ""
	}
	return "ip netns exec " + netns + " "
}

func parentArg(parent string) string {
	if parent == "root" || parent == "" {
		return "root"
	}
	return "parent " + parent
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pct(v float64) string { return fmt.Sprintf("%.0f%%", v*100) }

func sortBy[T any](s []T, key func(T) float64) {
	sort.SliceStable(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
}

// tooBigForLink says a drop is the forwarding check of a link against its
// MTU: veth's __dev_forward_skb (is_skb_forwardable), or the kernel's reason.
func tooBigForLink(d Drop) bool {
	return d.Reason == "PKT_TOO_BIG" || strings.HasPrefix(d.Location, "__dev_forward_skb") || strings.HasPrefix(d.Location, "is_skb_forwardable")
}

// dsackSegs is how many retransmitted segments the receiver reported as
// duplicates: TCPDSACKRecvSegs (5.10 and later), else one per DSACK.
// lostRetrans are a flow's retransmissions less its share of those its
// namespace's receivers proved needless (DSACK): reordering, not loss, and
// TCP undoes the window cuts they caused.
func (ev *Evidence) lostRetrans(f *Flow) uint64 {
	ns := ev.namespace(f.Netns)
	if ns == nil || f.Retrans == 0 {
		return uint64(f.Retrans)
	}
	all := ns.Counters["Tcp.RetransSegs"]
	dup := min(all, dsackSegs(ns.Counters))
	if all <= 0 || dup <= 0 {
		return uint64(f.Retrans)
	}
	return uint64(float64(f.Retrans) * float64(all-dup) / float64(all))
}

func dsackSegs(c map[string]int64) int64 {
	if n, ok := c["TcpExt.TCPDSACKRecvSegs"]; ok {
		return n
	}
	return c["TcpExt.TCPDSACKRecv"]
}

// unsufferedDrops is a note on the drops no flow suffered, with their counts.
func unsufferedDrops(ev *Evidence) string {
	var parts []string
	var total uint64
	for _, d := range ev.Drops {
		if ev.suffered(&d) || benign(&d) {
			continue
		}
		total += d.Count
		if len(parts) < 3 {
			what := d.Protocol
			if d.Dst.Addr().IsValid() {
				what += " to " + d.Dst.Addr().String()
			}
			parts = append(parts, fmt.Sprintf("%d [%s] at %s (%s)", d.Count, d.Reason, d.Location, what))
		}
	}
	if total == 0 {
		return ""
	}
	return fmt.Sprintf("%d dropped packets no flow suffered (neighbour discovery, multicast, other protocols, closed connections), not judged: %s",
		total, strings.Join(parts, "; "))
}

// shapeConfidence grades an offload finding: segments per skb measured by
// events, or inferred from settings and device counters; info ones explain.
func shapeConfidence(measured bool, severity finding.Severity) finding.Confidence {
	switch {
	case severity < finding.Warning:
		return finding.Possible
	case measured:
		return finding.Strong
	}
	return finding.Likely
}
