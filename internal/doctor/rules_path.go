package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

func rateShaped(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
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
				evidence = append(evidence, fmt.Sprintf("backlog up to %s (qdisc events)", units.Bytes(uint64(d.QdiscBacklogMax))))
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
			impact, impactHow := shaperImpact(ev, d, tx, limit)
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
			fd := finding.Finding{ID: "rate-shaped", Severity: finding.Warning,
				Title: title, Evidence: evidence, Explanation: explanation, Remedy: remedy,
				Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: impact,
				ImpactText: "everything above the configured rate: " + impactHow, Confidence: finding.Strong,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("tc -s qdisc show dev %s twice, a second apart: overlimits and the backlog grow with the flow", d.Name)}}
			// The shaper as the observer read it (rules_shaper.go): who
			// feeds it, and the tc commands that lift it, as run.
			if lim := shaperLimit(ev, ns.Name, d.Name, q.Handle); lim != nil {
				shaperFinding(&fd, lim, qdiscRate{RateBps: q.RateBps}, remedyBurst != "")
			}
			out = append(out, fd)
		}
	}
	if len(out) == 0 {
		out = pathQueues(ev)
	}
	return out
}

func parentArg(parent string) string {
	if parent == "root" || parent == "" {
		return "root"
	}
	return "parent " + parent
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
				units.Duration(time.Duration(f.RTTus)*time.Microsecond), units.Duration(time.Duration(f.MinRTTus)*time.Microsecond), units.Duration(queued)),
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
			explanation += " Here the receiving end is observed and a CPU was busy with its receive work: the queue is the receiver's input, not a hop."
		} else if d := lossElsewhere(ev, f); d != nil {
			severity = finding.Info
			evidence = append(evidence, fmt.Sprintf("but %d of the flow's packets were dropped as skb_drop [%s] at %s on %s: loss, not a hop's rate, cuts its window",
				d.Count, d.Reason, d.Location, orNone(d.Dev)))
			explanation += " Here the flow also lost packets to something other than a queue (packet-loss): the loss holds its window."
		}
		fd := finding.Finding{ID: "rate-shaped", Severity: severity,
			Title:       fmt.Sprintf("a queue beyond this host holds %s -> %s to %s: a shaper or a slower link on the path", f.Local, f.Peer, units.Bits(f.SendBps())),
			Evidence:    evidence,
			Explanation: explanation,
			Remedy: []string{
				"find the hop: tc -s qdisc show on each router or namespace of the path (a rate, overlimits, a standing backlog)",
				"a rate limit there works as configured: raise it or move the flow; a slower link: upgrade it or spread the load",
				"keep that queue short (fq_codel or a smaller limit) to take the queueing delay out of every flow through it",
			},
			Scope: flowScope(f), Impact: 0.5, ImpactText: "everything above the hop's rate", Confidence: finding.Likely,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -c 20 %s during the transfer and without it: the difference is the queue", f.Peer.Addr())}}
		if severity == finding.Warning {
			hopShaper(ev, f, &fd)
		}
		out = append(out, fd)
	}
	return out
}

// hopShaper names the shaper of a queue beyond this host where the
// observer found exactly one in the namespaces next to the observed ones
// (a router between the ends that the doctor does not observe): the flow
// passes it, and nothing else there shapes. Several are listed, none named.
func hopShaper(ev *Evidence, f *Flow, fd *finding.Finding) {
	var found []*finding.Limit
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if (l.Kind == KindTBFRate || l.Kind == KindHTBClassRate) && ev.NamespaceNamed(l.Where.Netns) == nil {
			found = append(found, l)
		}
	}
	switch len(found) {
	case 0:
		return
	case 1:
		lim := *found[0]
		lim.Undo = append([]finding.Action{}, lim.Undo...)
		fd.Evidence = append(fd.Evidence, fmt.Sprintf("the only shaper in the namespaces next to this host's (%s, not observed), which the flow passes, is the next line's", lim.Where.Netns))
		shaperFinding(fd, &lim, qdiscRate{}, false)
		fd.Impact, fd.ImpactText = shaperImpact(ev, nil, f.SendBps(), 0)
		fd.ImpactText = "everything above the shaper's rate: " + fd.ImpactText
		fd.Confidence = finding.Strong
	default:
		for _, l := range found {
			fd.Evidence = append(fd.Evidence, "a shaper in a namespace next to this host's, one of several: "+l.Describe())
		}
	}
}

// receiverSaturated is a CPU busy (receiverQueueBusy) with receive work
// where the flow's receiver is observed on this host: a queue there is the
// receiver waiting for its CPU. A receiver a peer's agent observed runs on
// CPUs the evidence does not hold (Peers has them).
// Receive work is the kernel's, in softirq and in system time: with receive
// checksum offload off, the checksum is summed in the copy to the reader
// (e1000 in QEMU: CPU 1 92 % busy, 23 % softirq and 52 % system).
func receiverSaturated(ev *Evidence, f *Flow) *CPUUse {
	if p := ev.peerFlow(f); p == nil || p.remote() {
		return nil
	}
	for i := range ev.CPUs {
		if c := &ev.CPUs[i]; c.Busy() >= receiverQueueBusy && receiving(c) {
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

// deliveryRate is tcp_info's delivery rate for evidence, or nothing when
// the flow was not read from tcp_info.
func deliveryRate(f *Flow) string {
	if f.FromRecording {
		return ""
	}
	return fmt.Sprintf(" (delivery rate %s)", units.Bits(float64(f.DeliveryRate)*8))
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
