package doctor

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

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
	offeredDrops   = 1000 // a flow's packets dropped: traffic offered, whatever moved
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
	// receiverQueueBusy: an observed receiver's CPU this busy with receive
	// work holds a queue of its own (its ring and backlog). vmxnet3 with GRO
	// off under TCG leaves both CPUs 87-90 % busy, on both sides of cpuBusy
	// from run to run: the bar sits well below them.
	receiverQueueBusy = 0.75
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
	{"cgroup-cpu-throttled", cgroupCPUThrottled},
	{"offload-disabled", offloadDisabled},
	{"known-nic-issue", knownNICIssue},
	{"mtu-mismatch", mtuMismatch},
	{"small-packet-bound", smallPacketBound},
	{"gro-blocked", groBlocked},
	{"ip-fragmented", ipFragmented},
	{"rate-shaped", func(ev *Evidence) []finding.Finding { return append(rateShaped(ev), pacingCapped(ev)...) }},
	{"asymmetric-path", asymmetricPath},
	{"irq-coalescing", irqCoalescing},
	{"send-queue-bloat", stageRule("send-queue-bloat")},
	{"qdisc-bloat", stageRule("qdisc-bloat")},
	{"reader-late", stageRule("reader-late")},
	{"rx-backlog", stageRule("rx-backlog")},
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
	// A reader that lets the window shut is named by the sender's wait
	// for it; its bytes' wait in the queue is the same reader.
	"reader-late": {"rwnd-limited"},
}

// Diagnose applies every rule and ranks the findings.
func Diagnose(ev *Evidence) *Report {
	var fs []finding.Finding
	for _, r := range Rules {
		fs = append(fs, r.Check(ev)...)
	}
	present, limits := map[string]bool{}, map[string][]*finding.Limit{}
	for _, f := range fs {
		if f.Severity >= finding.Warning {
			present[f.ID] = true
			if f.Limit != nil {
				limits[f.ID] = append(limits[f.ID], f.Limit)
			}
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
		// Every present cause is raised to the symptom's stake (a CPU
		// saturated by TSO off and GRO blocked together), so that they then
		// rank by their own costs; the first one listed is named.
		if fs[i].Severity < finding.Warning {
			continue
		}
		policy := droppedByPolicy(&fs[i])
		named := ""
		for _, cause := range symptoms[fs[i].ID] {
			if present[cause] && (!policy || slices.ContainsFunc(limits[cause], fs[i].Limit.Same)) {
				heaviest[cause] = max(heaviest[cause], fs[i].Impact)
				if named == "" {
					named = cause
				}
			}
		}
		if named != "" {
			fs[i].Severity = finding.Info
			fs[i].Explanation += " This is a consequence of " + named + ", reported above."
		}
	}
	// The stake ranks; the impact stays the cause's own estimate of what
	// lifting it gains (a 2-packet queue's drops gained 17-25 %, where its
	// consequence, the window held 85 % of the time, put 47 % at stake).
	stake := maps.Clone(own)
	for i := range fs {
		if w, ok := heaviest[fs[i].ID]; ok && fs[i].Severity >= finding.Warning && fs[i].Impact < w {
			stake[&fs[i]] = w
			fs[i].ImpactText += fmt.Sprintf("; ranked by the %s its consequences put at stake", pct(w))
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
		if stake[fa] != stake[fb] {
			return stake[fa] > stake[fb]
		}
		return own[fa] > own[fb]
	})
	ranked := make([]finding.Finding, len(fs))
	for i, j := range order {
		ranked[i] = fs[j]
	}
	fs = ranked
	rep := &Report{Findings: fs, Evidence: ev, Notes: ev.Notes, Throughput: throughput(ev)}
	if n := unsufferedDrops(ev); n != "" {
		rep.Notes = append(slices.Clone(rep.Notes), n)
	}
	if c := ev.Command; c.Failed() {
		rep.Failed = commandFailure(c)
	}
	if !trafficMoved(ev) {
		// Findings rank by the throughput at stake; with none moving, none
		// is more than a remark.
		for i := range fs {
			if fs[i].Severity >= finding.Warning {
				fs[i].Severity, fs[i].Impact, fs[i].ImpactText = finding.Info, 0, "none: no traffic moved"
				fs[i].Explanation += " No traffic moved during the observation, so no throughput was at stake."
			}
		}
		rep.NoTraffic = fmt.Sprintf("no flow moved data during the %.1f s observation; nothing's throughput to judge "+
			"(run a workload with -- COMMAND, or observe longer)", ev.Seconds)
	}
	if rep.Top(finding.Warning) == nil && rep.Failed == "" && rep.NoTraffic == "" {
		rep.Healthy = healthy(ev)
	}
	if fs == nil {
		rep.Findings = []finding.Finding{}
	}
	return rep
}

// droppedByPolicy says a loss was traced to the setting that drops on
// purpose: a program, a firewall rule, a tc filter's drop action. Those drops
// are no other cause's consequence, but one that names that very setting
// (an XDP program that blocks GRO and whose ring overflows): QEMU's e1000e
// sends TSO as IP fragments in the control too, and naming the fragments
// first for a tc program's random drops flipped with the receiving CPU's
// busy share (2026-11-28).
func droppedByPolicy(f *finding.Finding) bool {
	if f.ID != "packet-loss" || f.Limit == nil {
		return false
	}
	l := f.Limit
	return l.Where.Layer == finding.LayerProgram || l.Where.Layer == finding.LayerRule || l.Kind == KindTcFilterDrop
}

// trafficMoved says whether anything moved, or was offered, whose
// throughput can be judged: a TCP flow that moved data (a path MTU black
// hole's small segments too), a device that moved minBulkBps, iperf3's own
// result, sockets that were handed minBulkBps, or a flow's packets dropped
// by the thousand (UDP a device drops whole, as the veth of a smaller MTU
// does, moves nothing a counter shows). A connection that never came up
// (SYNs retransmitted) moved nothing.
func trafficMoved(ev *Evidence) bool {
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.BytesAcked > 0 || f.BytesReceived > 0 {
			return true
		}
	}
	if r := ev.Command.iperf3(); r != nil && max(r.SentBps, r.ReceivedBps) > 0 {
		return true
	}
	var sent, dropped uint64
	for _, io := range ev.SockIO {
		if io.Dir == "send" {
			sent += io.Bytes
		}
	}
	for i := range ev.Drops {
		if d := &ev.Drops[i]; ev.suffered(d) {
			dropped += d.Count
		}
	}
	if rate(sent, ev.Seconds) >= minBulkBps || dropped >= offeredDrops {
		return true
	}
	for _, d := range ev.devices {
		if rate(max(d.Stats.TxBytes, d.Stats.RxBytes), ev.Seconds) >= minBulkBps {
			return true
		}
	}
	return false
}

// commandFailure says how the observed command failed, with its last words.
func commandFailure(c *Command) string {
	msg := fmt.Sprintf("%s exited with status %d", c.Name(), c.ExitCode)
	if c.ExitCode > 128 {
		msg = fmt.Sprintf("%s was ended by signal %d (exit status %d)", c.Name(), c.ExitCode-128, c.ExitCode)
	}
	if c.LastLine != "" {
		msg += fmt.Sprintf("; it said last: %q", c.LastLine)
	}
	return msg + ": what it measured is not a result"
}

// throughput says what the run reached: iperf3's own summary where the
// command is iperf3, else the observed flows' bytes over the observation.
func throughput(ev *Evidence) string {
	if r := ev.Command.iperf3(); r != nil {
		s := fmt.Sprintf("%s received, %s sent (%s's %s summary)", units.Bits(r.ReceivedBps), units.Bits(r.SentBps), ev.Command.Name(), r.Protocol)
		if r.Protocol == "TCP" {
			s += fmt.Sprintf(", %d retransmitted", r.Retransmits)
		} else if r.LostPercent > 0 {
			s += fmt.Sprintf(", %.2g %% lost", r.LostPercent)
		}
		return s
	}
	var sent, received uint64
	n := 0
	for i := range ev.Flows {
		f := &ev.Flows[i]
		if strings.Contains(f.Netns, peerNetnsSep) {
			continue // a peer's end of a local flow
		}
		sent, received, n = sent+f.BytesAcked, received+f.BytesReceived, n+1
	}
	s := ev.senders()
	if n == 0 || ev.Seconds <= 0 {
		return ""
	}
	if sent == 0 && received == 0 {
		return fmt.Sprintf("none: %d TCP flows moved no data in the %.1f s observation (tcp_info)", n, ev.Seconds)
	}
	msg := fmt.Sprintf("%s sent, %s received by %d TCP flows over the %.1f s observation (tcp_info)",
		units.Bits(rate(sent, ev.Seconds)), units.Bits(rate(received, ev.Seconds)), n, ev.Seconds)
	if len(s) > 0 {
		msg += fmt.Sprintf("; the fastest, %s -> %s, sent %s", s[0].Local, s[0].Peer, units.Bits(s[0].SendBps()))
	}
	return msg
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
		if d := ev.DeviceNamed(f.Netns, f.Dev); d != nil && d.Kind == "device" && d.Driver != "" && !d.physical() {
			msg += fmt.Sprintf(": CPU-bound over %s (%s), a NIC that reports no link speed to judge the rate against", d.Name, d.Driver)
		} else if !physicalPath(ev, f) {
			msg += ": CPU-bound copying over a virtual device, as expected on loopback or veth"
		}
	}
	return msg + "."
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
