package doctor

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Bars of the stage rules (tcp_stage): a stage convicts when it holds a
// direction's bytes most of their way, long enough to matter to anyone.
const (
	// minStageSamples: fewer timed bytes say little of a stage's median. A
	// socket times one byte at a time, so a stage that holds bytes half a
	// second is timed twice a second: 8 times in the lab's 4 s run.
	minStageSamples = 3
	// minStageBytes: a direction that carried less waits on nobody. iperf3's
	// control connection (226 bytes in 3 s) had its few messages read when
	// the server got to them, 6.7 ms late weighted by time.
	minStageBytes = 64 << 10
	// dominantStage is the share of a direction's mean way a stage must hold.
	dominantStage = 0.5
	// longSendQueue: a byte waiting this long in the send queue, and
	// sendQueueRTTs round trips, waits behind data the path cannot take
	// yet, not for its turn in a window.
	longSendQueue = 20 * time.Millisecond
	sendQueueRTTs = 4
	// longQdisc: a local flow's wait in a qdisc this long is a deep queue,
	// the bar forwarded traffic's shaper queue is judged by too
	// (deepShaperQueue); an htb's default queue behind 300 Mbit/s held an
	// iperf3 flow's bytes 5.4 ms, a shaper doing its job.
	longQdisc = 50 * time.Millisecond
	// deepShaperQueue: a shaper's standing backlog this long at its rate,
	// which a flow's round trip shows, is a deep queue (tbf's "latency
	// 20ms" keeps it at 20 ms).
	deepShaperQueue = 50 * time.Millisecond
	longReceiveQ    = 5 * time.Millisecond // bytes a reader leaves this long it reads late
	longRxStack     = 1 * time.Millisecond // a softirq backlog, not GRO's few microseconds
	// rxBacklogRTT: a receive backlog's wait this share of the round trip
	// costs a window-bound flow about as much of its rate (the window is
	// acknowledged that much later); the 2.8 ms a paced stream waited on a
	// virtio-net wire's busy emulated CPUs is 12 % of a bulk stream's 22.5
	// ms round trip there.
	rxBacklogRTT   = 0.25
	defaultWmemMax = 4 << 20 // tcp_wmem's default maximum
	// wmemOvershoot: the send buffer counts bytes at their skbs' size and
	// a write fills one skb past it, so an autotuned queue's unsent bytes
	// stay below defaultWmemMax; a raised limit (SO_SNDBUF 8 MB) held 14 MB.
	wmemOvershoot  = 1 << 20
	sharedCPUBusy  = SpareBusy // a receive CPU this busy has other work
	stageImpactCap = 0.95      // a stage never explains all of a way
)

// stageRule keeps stageFindings' findings of one id: each id is a rule.
func stageRule(id string) func(*Evidence) []finding.Finding {
	return func(ev *Evidence) []finding.Finding {
		var out []finding.Finding
		for _, f := range stageFindings(ev) {
			if f.ID == id {
				out = append(out, f)
			}
		}
		if id == "qdisc-bloat" {
			out = append(out, forwardingQueues(ev, out)...)
		}
		return out
	}
}

// stageFindings names the stage that holds a flow's bytes most of their way
// on this host: its send queue, its qdisc, the receiving CPU's backlog or
// the receive queue its reader drains late.
func stageFindings(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.Flows {
		f := &ev.Flows[i]
		if st, share := dominant(f, "send_queue", "qdisc", "driver", "ack"); st != nil && f.BytesAcked >= minStageBytes {
			switch st.Stage {
			case "send_queue":
				out = append(out, sendQueueBloat(ev, f, st, share)...)
			case "qdisc":
				out = append(out, qdiscBloat(ev, f, st, share)...)
			}
		}
		if st, share := dominant(f, "rx_stack", "rx_queue"); st != nil && f.BytesReceived >= minStageBytes {
			switch st.Stage {
			case "rx_queue":
				out = append(out, readerLate(ev, f, st, share)...)
			case "rx_stack":
				out = append(out, rxBacklog(ev, f, st, share)...)
			}
		}
	}
	return out
}

// dominant is the stage of a direction (its stages, in order) that holds
// at least dominantStage of the direction's mean way, with its share.
func dominant(f *Flow, stages ...string) (*StageTime, float64) {
	var total float64
	var best *StageTime
	for _, name := range stages {
		st := f.Stage(name)
		if st == nil {
			continue
		}
		total += st.MeanUs
		if best == nil || st.MeanUs > best.MeanUs {
			best = st
		}
	}
	if best == nil || total <= 0 || best.Samples < minStageSamples || best.MeanUs/total < dominantStage {
		return nil, 0
	}
	return best, best.MeanUs / total
}

func us(v uint64) time.Duration { return time.Duration(v) * time.Microsecond }

// waitOf is the stage's wait the rules report: that of a byte taken at a
// random moment. tcp_stage times one byte per way, so a run of short ways
// (a queue still filling as a connection starts) is timed many times for
// each long one, and the median of a few flips between them
// (send-queue-bloat in CI: 416 us with two of six bytes at 557 ms).
// Evidence from before this field: the mean.
func waitOf(st *StageTime) time.Duration {
	if st.TimeWeightedUs == 0 {
		return time.Duration(st.MeanUs * float64(time.Microsecond))
	}
	return time.Duration(st.TimeWeightedUs * float64(time.Microsecond))
}

// waitsLong says whether the stage held bytes at least bar: weighted by
// time, and for at least a quarter of the bytes timed (p75), since one
// stalled byte (a loss's timeout, a connection's last bytes) weighs as
// much as hundreds of short ways: packet-loss-router-forward's send queue
// read 136 ms weighted, its p99 10 ms. Evidence from before these fields:
// the median.
func waitsLong(st *StageTime, bar time.Duration) bool {
	if st.TimeWeightedUs == 0 && st.P75Us == 0 {
		return us(st.P50Us) >= bar
	}
	return waitOf(st) >= bar && us(st.P75Us) >= bar
}

func stageLine(st *StageTime, share float64, way string) string {
	return fmt.Sprintf("tcp_stage: %s timed; a byte waited %s (weighted by time; median %s, p75 %s, p99 %s) in %s, %s of their way %s",
		units.Bytes(st.Samples), units.Duration(waitOf(st)), units.Duration(us(st.P50Us)), units.Duration(us(st.P75Us)),
		units.Duration(us(st.P99Us)),
		strings.ReplaceAll(st.Stage, "_", " "), pct(share), way)
}

func stageImpact(share float64) float64 { return min(share, stageImpactCap) }

// sendQueueBloat: bytes wait in the socket far longer than the round trip:
// the send buffer holds more than the path's bandwidth x RTT.
func sendQueueBloat(ev *Evidence, f *Flow, st *StageTime, share float64) []finding.Finding {
	wait := waitOf(st)
	rtt := time.Duration(f.RTTus) * time.Microsecond
	if !waitsLong(st, max(longSendQueue, sendQueueRTTs*rtt)) {
		return nil
	}
	evidence := []string{stageLine(st, share, "from the write to the ACK")}
	if rtt > 0 {
		evidence = append(evidence, fmt.Sprintf("srtt %s: a byte waits %.0f round trips before it is sent", units.Duration(rtt), float64(wait)/float64(rtt)))
	}
	if f.MaxNotSent > 0 {
		evidence = append(evidence, fmt.Sprintf("up to %s written and not yet sent (tcp_info notsent, the largest of the readings)", units.Bytes(uint64(f.MaxNotSent))))
	}
	severity := finding.Info
	explanation := "The socket accepts writes far ahead of what the path takes: written bytes wait in its send queue " +
		"before TCP sends them, so whatever the application writes next reaches the peer that much later (bufferbloat " +
		"in the socket). Throughput is the same with a send queue of about one bandwidth x RTT."
	// More unsent than the kernel's default limit can hold: a limit was
	// raised. Measured, not the rate times the longest wait: a lossy
	// 864 Mbit/s stream's p99 wait of 49 ms made 5.3 MB of an autotuned
	// buffer that cannot hold 4.
	if f.MaxNotSent > defaultWmemMax+wmemOvershoot {
		severity = finding.Warning
		explanation += " Here the queue holds more than the kernel's default send buffer limit can: an SO_SNDBUF or a " +
			"raised tcp_wmem lets it grow."
		if wmem := ev.sysctl(f.Netns, "net.ipv4.tcp_wmem"); wmemMax(wmem) > defaultWmemMax {
			evidence = append(evidence, fmt.Sprintf("net.ipv4.tcp_wmem = %s: beyond the kernel's default maximum of %s", wmem, units.Bytes(defaultWmemMax)))
		}
	} else {
		explanation += " The kernel's autotuning grew the buffer (as it does behind a shaper or while losses hold the window small): reported for the latency it adds, not as a limit on throughput."
	}
	fd := finding.Finding{ID: "send-queue-bloat", Severity: severity,
		Title:       fmt.Sprintf("%s -> %s: written bytes wait %s in the send queue before they are sent", f.Local, f.Peer, units.Duration(wait)),
		Evidence:    evidence,
		Explanation: explanation,
		Remedy: []string{
			nsPrefix(f.Netns) + "sysctl -w net.ipv4.tcp_notsent_lowat=131072   (or setsockopt TCP_NOTSENT_LOWAT in the application: writes wait until the unsent data is below it)",
			"drop the application's SO_SNDBUF, or lower net.ipv4.tcp_wmem's maximum: a send buffer of about twice bandwidth x RTT is enough",
		},
		Scope: flowScope(f), Impact: stageImpact(share), ImpactText: "the share of each byte's way spent in the send queue",
		Confidence: finding.Strong,
		Confirm:    []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -tmi dst %s: notsent bytes (unsent) of several round trips' worth", f.Peer.Addr())}}
	if severity == finding.Warning {
		// What let the queue grow, as read (rules_sndbuf.go).
		if lim := bloatedBufferLimit(ev, f); lim != nil {
			fd.Evidence = append(fd.Evidence, lim.Describe(), "the buffer it needs: "+lim.Arithmetic)
			fd.Limit, fd.Remedy = lim, lim.Remedy()
		}
	}
	return []finding.Finding{fd}
}

// wmemMax is tcp_wmem's third field, 0 when unknown.
func wmemMax(v string) int {
	fields := strings.Fields(v)
	if len(fields) != 3 {
		return 0
	}
	n, _ := strconv.Atoi(fields[2])
	return n
}

// qdiscBloat: the flow's packets wait in a qdisc far longer than any
// scheduler needs: a deep queue on this host.
func qdiscBloat(ev *Evidence, f *Flow, st *StageTime, share float64) []finding.Finding {
	wait := waitOf(st)
	if !waitsLong(st, longQdisc) {
		return nil
	}
	evidence := []string{stageLine(st, share, "from the write to the ACK")}
	remedy := []string{nsPrefix(f.Netns) + fmt.Sprintf("tc qdisc replace dev %s root fq_codel   (a fair queue with AQM: its own packets wait, not every flow's)", orNone(f.Dev))}
	if d := ev.DeviceNamed(f.Netns, f.Dev); d != nil {
		for _, q := range d.Qdiscs {
			if q.Kind == "noqueue" || q.Kind == "" {
				continue
			}
			line := fmt.Sprintf("%s %s on %s", q.Kind, q.Handle, d.Name)
			if q.RateBps > 0 {
				line += fmt.Sprintf(" shapes to %s", units.Bits(float64(q.RateBps)*8))
				remedy = append(remedy, nsPrefix(f.Netns)+fmt.Sprintf("tc qdisc change dev %s %s %s ... limit LIMIT   (a limit of a few milliseconds at the rate: %s at 5 ms)",
					d.Name, parentArg(q.Parent), q.Kind, units.Bytes(uint64(float64(q.RateBps)*0.005))))
			}
			evidence = append(evidence, line)
		}
		if d.QdiscBacklogMax > 0 {
			evidence = append(evidence, fmt.Sprintf("backlog up to %s (qdisc events)", units.Bytes(uint64(d.QdiscBacklogMax))))
		}
	}
	return []finding.Finding{{ID: "qdisc-bloat", Severity: finding.Warning,
		Title:    fmt.Sprintf("%s -> %s: packets wait %s in a qdisc on %s", f.Local, f.Peer, units.Duration(wait), orNone(f.Dev)),
		Evidence: evidence,
		Explanation: "A qdisc on this host holds the flow's packets longer than any scheduling needs: its queue is deep " +
			"(local bufferbloat). Every flow through it waits behind the queue, and TCP sees a round trip that long.",
		Remedy: remedy,
		Scope:  fmt.Sprintf("device %s (netns %s)", orNone(f.Dev), f.Netns), Impact: stageImpact(share),
		ImpactText: "the share of each byte's way spent in the qdisc", Confidence: finding.Strong,
		Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("tc -s qdisc show dev %s: a standing backlog while the flow runs", orNone(f.Dev))}}}
}

// readerLate: received bytes wait in the socket until its reader copies
// them: the application drains the receive queue late.
func readerLate(ev *Evidence, f *Flow, st *StageTime, share float64) []finding.Finding {
	wait := waitOf(st)
	if !waitsLong(st, longReceiveQ) {
		return nil
	}
	evidence := []string{stageLine(st, share, "from the driver to the reader")}
	reader := readerOf(ev, f.Netns)
	if reader != "" {
		evidence = append(evidence, "the reading process: "+reader+" (sock_io)")
	} else {
		reader = "the application reading " + f.Local.String()
	}
	severity := finding.Warning
	explanation := "Bytes reach the socket in time but its reader copies them out late: it sleeps, blocks on other " +
		"work or reads too little at a time between its reads. Every byte waits in the receive queue for the next read; " +
		"when the queue fills, the window closes and the sender waits too."
	// A reader without a CPU reads late too: what takes the CPU is the
	// finding (a saturated receive path, offloads off), not the reader.
	// Without a CPU means saturated: a reader on a CPU 99 % busy waited
	// 8.9 ms (offload-disabled-sg-off --deep); one that slept on its own
	// beside a CPU 72 % busy (CI's parallel tests) is late by itself.
	if c := busiest(ev); c != nil && c.Busy() >= cpuBusy {
		severity = finding.Info
		evidence = append(evidence, fmt.Sprintf("but CPU %d was %s busy (%s): the reader waits for a CPU", c.CPU, pct(c.Busy()), cpuSplit(c)))
		explanation += " Here a CPU was busy enough that the reader waits for it: what keeps it busy comes first."
	} else if o := ringOverflowOf(f.Netns, ev.DeviceNamed(f.Netns, f.Dev)); o != nil {
		// A receive ring that overflowed on the flow's device says the
		// same whatever the CPUs' shares read: the CPU that drains it fell
		// behind (an e1000 wire under TCG, GRO off, missed 5,341 frames
		// while its CPUs read under 90 % busy and the reader's bytes
		// waited 9.9 ms).
		severity = finding.Info
		evidence = append(evidence, fmt.Sprintf("but %s's receive ring overflowed (%d frames missed, ethtool -S): the receive path fell behind its CPU, and the reader waits for that CPU too", o.dev, o.missed))
		explanation += " Here the receive path itself fell behind: what keeps its CPU busy comes first."
	}
	lim := readPaceLimit(ev, f, fmt.Sprintf("received bytes wait %s for its reads", units.Duration(wait)),
		"read as soon as data arrives (poll/epoll, a thread that only reads) and in large reads",
		stageLine(st, share, "from the driver to the reader")+"; the reading process: "+reader)
	evidence = append(evidence, lim.Describe())
	return []finding.Finding{{ID: "reader-late", Severity: severity,
		Title:       fmt.Sprintf("%s <- %s: received bytes wait %s for the reader", f.Local, f.Peer, units.Duration(wait)),
		Evidence:    evidence,
		Explanation: explanation,
		Remedy:      lim.Remedy(), Limit: lim,
		Scope: flowScope(f), Impact: stageImpact(share), ImpactText: "the share of each received byte's way spent in the receive queue",
		Confidence: finding.Strong,
		Confirm:    []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -tm src %s: Recv-Q stays high while the flow runs", f.Local)}}}
}

// readerOf names the processes that received on sockets in netns, the most
// bytes first (sock_io: it records no socket, so all receivers of the
// observation).
func readerOf(ev *Evidence, _ string) string {
	var rs []SockIO
	for _, s := range ev.SockIO {
		if s.Dir == "recv" && s.Bytes > 0 {
			rs = append(rs, s)
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].Bytes > rs[b].Bytes })
	if len(rs) == 0 {
		return ""
	}
	r := rs[0]
	return fmt.Sprintf("%s (pid %d, %d reads of %s on average)", r.Comm, r.Pid, r.Calls, units.Bytes(r.Bytes/max(r.Calls, 1)))
}

// rxBacklog: packets the driver handed over wait long before TCP gets them:
// the receiving CPU's backlog waits for a CPU busy with other work.
func rxBacklog(ev *Evidence, f *Flow, st *StageTime, share float64) []finding.Finding {
	wait := waitOf(st)
	// The cause it names is a busy CPU: without one, the wait is elsewhere
	// on the way in (an ingress shaper through an ifb held 3.5 ms).
	c := busiest(ev)
	if !waitsLong(st, longRxStack) || c == nil || c.Busy() < sharedCPUBusy {
		return nil
	}
	cost := rxBacklogCost(ev, f, wait)
	if cost == "" {
		return nil
	}
	evidence := []string{stageLine(st, share, "from the driver to the reader"),
		fmt.Sprintf("CPU %d was %s busy (%s)", c.CPU, pct(c.Busy()), cpuSplit(c)), cost}
	dev := orNone(f.Dev)
	return []finding.Finding{{ID: "rx-backlog", Severity: finding.Warning,
		Title:    fmt.Sprintf("%s <- %s: received packets wait %s before TCP takes them", f.Local, f.Peer, units.Duration(wait)),
		Evidence: evidence,
		Explanation: "The driver hands packets over in time, but the CPU that processes them (its softirq backlog, GRO, " +
			"or the socket's backlog while the application holds it) gets to them late: that CPU is busy with other work.",
		Remedy: []string{
			nsPrefix(f.Netns) + fmt.Sprintf("echo MASK > /sys/class/net/%s/queues/rx-0/rps_cpus   (RPS: spread receive work to idle CPUs)", dev),
			"move the other work off the receiving CPU (taskset, or the NIC's IRQ affinity to an idle CPU)",
		},
		Scope: flowScope(f), Impact: stageImpact(share), ImpactText: "the share of each received byte's way before TCP",
		Confidence: finding.Likely,
		Confirm:    []string{"mpstat -P ALL 1: the receiving CPU busy in softirq or with another task"}}}
}

// rxBacklogCost says what shows that a receive backlog's wait costs the
// flow throughput, "" if nothing does: a busy CPU alone does not (CI's
// nic-baseline, a 10 Mbit/s iperf3 stream paced by its application on a
// virtio-net wire, waited 2.8 ms there on the guest's busy emulated CPUs
// and lost nothing). A sender that had no more to send lost nothing;
// packets dropped from full backlogs are lost; else the wait must hold up
// the window's acknowledgement a meaningful share of the round trip (the
// sender's when observed, else the receiver's own estimate).
func rxBacklogCost(ev *Evidence, f *Flow, wait time.Duration) string {
	sender := ev.peerFlow(f)
	if sender != nil && sender.LimitShares["app"] >= 0.5 {
		return ""
	}
	if ev.Softnet.Dropped > 0 {
		return fmt.Sprintf("%d packets dropped by full per-CPU backlogs (/proc/net/softnet_stat)", ev.Softnet.Dropped)
	}
	rtt, whose := us(uint64(f.RTTus)), "the receiver's estimate"
	if sender != nil {
		rtt, whose = us(uint64(sender.RTTus)), fmt.Sprintf("the sender's, tcp_sendlim [app] %s of its time", pct(sender.LimitShares["app"]))
	}
	if rtt <= 0 || float64(wait) < rxBacklogRTT*float64(rtt) {
		return ""
	}
	return fmt.Sprintf("the wait is %s of the round trip (%s, %s): each window is acknowledged that much later",
		pct(float64(wait)/float64(rtt)), units.Duration(rtt), whose)
}

// forwardingQueues finds shapers whose queue holds flows' packets long: a
// backlog of deepShaperQueue or more at the shaper's rate, and a flow whose
// round trip grew by at least half of it. A local flow's own bytes wait in
// its socket instead (TCP small queues keep them out of the qdisc), so this
// is a queue of forwarded traffic, or of many flows. Devices reported
// already are skipped.
func forwardingQueues(ev *Evidence, already []finding.Finding) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
		scope := fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name)
		if slices.ContainsFunc(already, func(f finding.Finding) bool { return f.Scope == scope }) {
			continue
		}
		for _, q := range d.Qdiscs {
			if q.RateBps == 0 || d.QdiscBacklogMax == 0 {
				continue
			}
			sojourn := time.Duration(float64(d.QdiscBacklogMax) / float64(q.RateBps) * float64(time.Second))
			if sojourn < deepShaperQueue {
				continue
			}
			var held *Flow
			for _, f := range ev.senders() {
				grown := time.Duration(f.RTTus-min(f.MinRTTus, f.RTTus)) * time.Microsecond
				if grown >= sojourn/2 && (held == nil || f.SendBps() > held.SendBps()) {
					held = f
				}
			}
			if held == nil {
				continue
			}
			rate := float64(q.RateBps) * 8
			fd := finding.Finding{ID: "qdisc-bloat", Severity: finding.Warning,
				Title: fmt.Sprintf("a %s qdisc on %s queues %s of packets at its rate", q.Kind, d.Name, units.Duration(sojourn)),
				Evidence: []string{
					fmt.Sprintf("%s %s on %s shapes to %s; its backlog reached %s (qdisc events): %s at that rate",
						q.Kind, q.Handle, d.Name, units.Bits(rate), units.Bytes(uint64(d.QdiscBacklogMax)), units.Duration(sojourn)),
					fmt.Sprintf("%s -> %s: srtt %s against a minimum of %s (tcp_info)", held.Local, held.Peer,
						units.Duration(time.Duration(held.RTTus)*time.Microsecond), units.Duration(time.Duration(held.MinRTTus)*time.Microsecond)),
				},
				Explanation: "The shaper's queue is deep: packets wait in it far longer than any link needs to stay busy " +
					"(bufferbloat). Every flow through it waits behind the queue, whatever its own rate; a short queue or an AQM keeps the rate and drops the wait.",
				Remedy: []string{
					nsPrefix(ns.Name) + fmt.Sprintf("tc qdisc change dev %s %s %s rate %.0fkbit burst 64kb latency 5ms   (a queue of 5 ms at the rate)", d.Name, parentArg(q.Parent), q.Kind, rate/1e3),
					nsPrefix(ns.Name) + fmt.Sprintf("tc qdisc replace dev %s %s cake bandwidth %.0fkbit   (shaping with AQM and fair queues)", d.Name, parentArg(q.Parent), rate/1e3),
				},
				Scope: scope, Impact: stageImpact(1 - float64(held.MinRTTus)/float64(max(held.RTTus, 1))),
				ImpactText: "the share of the flow's round trip spent in the queue", Confidence: finding.Likely,
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("tc -s qdisc show dev %s during the transfer: a standing backlog", d.Name)}}
			// The shaper's queue limit as read (rules_shaper.go).
			if lim := shaperQueueLimit(ev, ns.Name, d.Name, q.Handle, q.RateBps); lim != nil {
				fd.Evidence = append(fd.Evidence, lim.Describe(), "the queue it needs: "+lim.Arithmetic)
				fd.Limit, fd.Remedy = lim, lim.Remedy()
			}
			out = append(out, fd)
		}
	}
	return out
}
