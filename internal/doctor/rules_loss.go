package doctor

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

func packetLoss(ev *Evidence) []finding.Finding {
	var drops []Drop
	var dropped, late uint64
	reordered := ev.reordered()
	for _, d := range ev.Drops {
		if !benign(&d) && ev.suffered(&d) {
			if lateCopy(&d, reordered) {
				late += d.Count
				continue
			}
			drops = append(drops, d)
			dropped += d.Count
		}
	}
	// Retransmissions the receivers proved needless (DSACK), and the rest
	// with them when most were, beyond what located drops explain, were not
	// lost: reordering or a too-early timer sent them (rules_reorder.go).
	located := ev.locatedLoss()
	var retrans, segs, rawRetrans, needless int64
	var packets uint64
	var where []string
	for i := range ev.Namespaces {
		ns := &ev.Namespaces[i]
		s := ev.splitRetrans(ns, located)
		where = append(where, s.describe()...)
		retrans, segs = retrans+s.lost(), segs+s.segs
		rawRetrans, needless = rawRetrans+s.retrans, needless+s.proven+s.assumed
		for _, d := range ns.Devices {
			packets += d.Stats.RxPackets + d.Stats.TxPackets
		}
	}
	ratio, dropRatio := 0.0, 0.0
	if segs > 0 {
		ratio = float64(retrans) / float64(segs)
	}
	if packets > 0 {
		dropRatio = float64(dropped) / float64(packets)
	}
	// A sender's own qdisc that drops its segment tells TCP at once: the
	// segment is sent again, not retransmitted, and the window is cut (CWR)
	// each time. Few such drops cost much: they count by the cuts.
	var localDrops uint64
	for _, d := range drops {
		if strings.HasPrefix(d.Reason, "QDISC_") {
			localDrops += d.Count
		}
	}
	cuts, cutShare := 0, 0.0
	for _, f := range ev.senders() {
		cuts += f.CongStates["CWR"]
		cutShare = max(cutShare, f.LimitShares["cwnd"])
	}
	local := localDrops >= 10 && cuts >= 3
	// A flow that waits on retransmission timeouts lost what it sent,
	// however few segments that was: it is stalled, never healthy.
	// A flow stalled from its first segment has nothing acknowledged: every
	// flow is looked at, not only the senders.
	var stalled *Flow
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.LimitShares["rto"] >= limitShare && (stalled == nil || f.LimitShares["rto"] > stalled.LimitShares["rto"]) {
			stalled = f
		}
	}
	var ring *ringOverflow
	for ns, d := range ev.devices {
		if o := ringOverflowOf(ns.Name, d); o != nil && (ring == nil || o.missed > ring.missed) {
			ring = o
		}
	}
	ringLoss := ring != nil && packets > 0 && ring.missed >= 10 && float64(ring.missed)/float64(packets) >= 0.001
	// Relative thresholds: a busy host drops a few packets in any second.
	lost := retrans >= 10 && ratio >= 0.001 || dropped >= 10 && dropRatio >= 0.001 || local || stalled != nil
	if late > 0 {
		where = append(where, fmt.Sprintf("%d segments discarded by the receivers as older than those they had (skb_drop [TCP_RFC7323_PAWS]): late copies on a path that reorders, not loss", late))
	}
	if !lost && !ringLoss {
		return needlessRetrans(where, rawRetrans, segs, needless)
	}
	// A ring's misses that TCP flows did not retransmit were not their
	// segments (a missed segment is sent again; a real overflow's
	// retransmissions number about its misses): QEMU's e1000 moved
	// rx_missed_errors by 7,000-9,000 in runs (a paced 10 Mbit/s stream among
	// them) whose flows retransmitted at most a segment. Datagrams have no
	// retransmission to show it: without TCP senders the misses stand.
	severity, ringTheirs := finding.Warning, true
	if ring != nil && float64(retrans) < 0.01*float64(ring.missed) && len(ev.senders()) > 0 {
		ringTheirs = false
		if !lost {
			severity = finding.Info
		}
	}
	sort.Slice(drops, func(i, j int) bool { return drops[i].Count > drops[j].Count })
	evidence := where
	if stalled != nil {
		evidence = append(evidence, fmt.Sprintf("%s -> %s waited on retransmission timeouts %s of the time (tcp_sendlim [rto]), entered Loss %d times",
			stalled.Local, stalled.Peer, pct(stalled.LimitShares["rto"]), stalled.CongStates["Loss"]))
	}
	if local {
		evidence = append(evidence, fmt.Sprintf("%d of the senders' own segments dropped by their qdisc, %d window cuts (tcp_cong CWR): "+
			"the sender waited for its congestion window %s of the time", localDrops, cuts, pct(cutShare)))
	}
	var remedy []string
	for i, d := range drops {
		if i == 3 {
			break
		}
		evidence = append(evidence, fmt.Sprintf("%d skb_drop [%s] at %s on %s", d.Count, d.Reason, d.Location, orNone(d.Dev)))
		if r, ok := dropRemedies[d.Reason]; ok {
			remedy = append(remedy, strings.NewReplacer("{ns}", nsPrefix(ev.deviceNetns(d.Dev)), "{dev}", orNone(d.Dev)).Replace(r))
		}
	}
	if ev.Softnet.Dropped > 0 {
		evidence = append(evidence, fmt.Sprintf("%d packets dropped by full per-CPU backlogs (/proc/net/softnet_stat)", ev.Softnet.Dropped))
	}
	for _, d := range ev.devices {
		for _, k := range slices.Sorted(maps.Keys(d.ErrorStats)) {
			if v := d.ErrorStats[k]; v > 0 && (strings.Contains(k, "drop") || strings.Contains(k, "miss") || RingCounter(k)) {
				evidence = append(evidence, fmt.Sprintf("%s: ethtool -S %s moved by %d", d.Name, k, v))
			}
		}
	}
	if ring != nil && ringTheirs {
		remedy = append(ring.remedy, remedy...)
	}
	if len(drops) == 0 && (ring == nil || !ringTheirs) {
		remedy = append(remedy, "record where packets die: skbtrace record -e skb_drop,tcp_retrans -d 10s, then skbtrace stat")
	}
	lossStake, held := 5*math.Sqrt(ratio), windowHeldShare(ev)
	impact := math.Min(0.9, math.Max(dropRatio, math.Min(lossStake, held)))
	if local {
		impact = math.Max(impact, cutShare/2)
	}
	if stalled != nil {
		impact = math.Max(impact, stalled.LimitShares["rto"])
	}
	// Drops of the flows' packets, with a reason, convict; retransmissions
	// alone say something was lost, not where.
	lossConfidence := finding.Likely
	if len(drops) > 0 && dropped >= minLocatedDrops {
		lossConfidence = finding.Strong
	}
	title := "packets are lost on the path"
	if len(drops) > 0 {
		title = fmt.Sprintf("packets are dropped: %s at %s", drops[0].Reason, drops[0].Location)
	}
	if ring != nil && ringTheirs && (len(drops) == 0 || ring.missed > drops[0].Count) {
		// The NIC drops before any skb exists: no skb_drop sees it.
		title = fmt.Sprintf("%s's receive ring overflows: %d packets missed (ethtool -S), none of them an skb", ring.dev, ring.missed)
		lossConfidence = finding.Strong
	}
	impactText := fmt.Sprintf("about %s (from the retransmission and drop rates)", pct(impact))
	if impact > 0 && impact == held && held < lossStake {
		impactText = fmt.Sprintf("about %s: the time the senders waited on their congestion window and timeouts (tcp_sendlim), less than the retransmission rate alone would put at stake (%s)", pct(impact), pct(math.Min(0.9, lossStake)))
	}
	// Without the loss the flows would run until the path's speed, or the
	// CPU, holds them: that is the gain where the loss holds the senders
	// (they waited on their window and timeouts most of the time; 92-95 %
	// gained where the retransmission rates put 49-71 % at stake), and it
	// bounds what the rates put at stake where it is less.
	if gain, how, ok := lossFreeGain(ev); ok && (gain < impact || held >= 0.5) {
		impact, impactText = gain, fmt.Sprintf("about %s: what the flows would gain without the loss, %s", pct(gain), how)
	}
	if severity == finding.Info {
		title = fmt.Sprintf("%s missed %d frames (ethtool -S) and the TCP flows retransmitted %d segments: the frames were not theirs", ring.dev, ring.missed, retrans)
		impact, impactText = 0, "none"
	}
	fd := finding.Finding{ID: "packet-loss", Severity: severity, Title: title, Evidence: evidence,
		Explanation: "Every lost segment is retransmitted and halves the congestion window; with loss p a Reno/CUBIC flow " +
			"reaches at most about MSS/RTT x 1.2/sqrt(p). Lost UDP datagrams are simply gone.",
		Remedy: remedy, Scope: "path", Impact: impact,
		ImpactText: impactText, Confidence: lossConfidence,
		Confirm: []string{"skbtrace record -e skb_drop,tcp_retrans -d 10, then skbtrace stat: drops by reason and location beside the retransmissions"}}
	lossByUDPBuffer(ev, drops, &fd)
	return []finding.Finding{fd}
}

// dropRemedies say where to look for each drop reason.
var dropRemedies = map[string]string{
	"NETFILTER_DROP":  "a firewall rule drops packets: {ns}nft list ruleset (or iptables -L -v -n); look for statistic, limit or numgen rules",
	"QDISC_DROP":      "a qdisc overflows: {ns}tc -s qdisc show dev {dev}; raise its limit or use fq_codel",
	"QDISC_OVERLIMIT": "a qdisc overflows: {ns}tc -s qdisc show dev {dev}; raise its limit",
	"CPU_BACKLOG":     "the per-CPU backlog overflows: sysctl -w net.core.netdev_max_backlog=10000, and spread receive work (RPS)",
	"SOCKET_RCVBUFF":  "the receiving socket's buffer is full: raise net.core.rmem_max and the application's SO_RCVBUF, or read faster",
	"PROTO_MEM":       "TCP/UDP memory pressure: raise net.ipv4.tcp_mem / udp_mem",
	"FULL_RING":       "the device's ring is full: ethtool -G {dev} rx 4096 tx 4096 (up to the maximum ethtool -g shows)",
	"TCP_CSUM":        "packets arrive with bad checksums: check cabling, the NIC and offload settings (ethtool -S {dev})",
	"IP_CSUM":         "packets arrive with bad checksums: check cabling, the NIC and offload settings (ethtool -S {dev})",
	"PKT_TOO_BIG":     "packets exceed the MTU: see mtu-mismatch",
}

// windowHeldShare bounds what retransmissions put at stake: a loss costs a
// TCP sender throughput through its congestion window and the timeouts it
// waits on, so a sender that waited on neither most of its time (tcp_sendlim)
// was held elsewhere. QEMU's vmxnet3 receiver with GRO off lost 1 % of the
// segments (5·sqrt(p) = 51 %) while its sender waited on its window 38 % of
// the time. Without tcp_sendlim nothing bounds it (1).
func windowHeldShare(ev *Evidence) float64 {
	held, measured := 0.0, false
	for _, f := range ev.senders() {
		if len(f.LimitShares) > 0 {
			held, measured = max(held, f.LimitShares["cwnd"]+f.LimitShares["rto"]), true
		}
	}
	if !measured {
		return 1
	}
	return held
}

// RingCounter says whether a driver counter counts packets the NIC had no
// receive buffer for: e1000e's rx_no_buffer_count and rx_missed_errors,
// ixgbe's and i40e's rx_no_dma_resources, virtio's rx drops, FIFO overruns.
func RingCounter(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"no_buffer", "nobuf", "missed", "no_dma", "fifo", "rx_dropped", "rx_drops", "rx_queue_0_drops"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

type ringOverflow struct {
	dev    string
	missed uint64
	remedy []string
}

// ringOverflowOf reads a device's ring-overflow counters and what the ring
// can still grow to (ethtool -g): a larger ring where the driver allows,
// else faster draining of the one there is.
func ringOverflowOf(netns string, d *Device) *ringOverflow {
	if d == nil {
		return nil
	}
	var missed uint64
	for k, v := range d.ErrorStats {
		if RingCounter(k) && strings.HasPrefix(strings.ToLower(k), "rx") {
			missed = max(missed, v)
		}
	}
	if missed == 0 {
		return nil
	}
	o := &ringOverflow{dev: d.Name, missed: missed}
	if d.RxRingMax > d.RxRing && d.RxRing > 0 {
		o.remedy = append(o.remedy, nsPrefix(netns)+fmt.Sprintf("ethtool -G %s rx %d (the ring holds %d of the %d descriptors the driver allows): more room while the CPU catches up",
			d.Name, d.RxRingMax, d.RxRing, d.RxRingMax))
	} else if d.RxRing > 0 {
		o.remedy = append(o.remedy, fmt.Sprintf("%s's ring is at the driver's maximum (%d): drain it faster, by a CPU of its own for its interrupt and NAPI (/proc/irq/N/smp_affinity) and nothing else there", d.Name, d.RxRing))
	}
	o.remedy = append(o.remedy, fmt.Sprintf("the CPU that polls %s falls behind: see cpu-saturated, and move competing work off that CPU", d.Name))
	return o
}

// lossFreeGain is the share of throughput the sending flows would gain
// without their loss: until the CPU their work weighs on most saturates,
// or, where they leave through a NIC, its speed if that comes first (a
// QEMU NIC's 10 Gbit/s under emulation, whose CPUs saturate at a tenth).
// Where every sender leaves through the kernel's own devices with no
// shaper on them (sendersOverVirtual), a stream's rate on this host bounds
// them too: a lossy stream costs more per byte (its recoveries'
// retransmissions and SACKs, shorter bursts), so its CPU's busy share
// understates the rate without the loss (a 1 % drop's stream ran 9.4
// Gbit/s with its CPU 51 % busy; without the drop it ran 32).
func lossFreeGain(ev *Evidence) (float64, string, bool) {
	var speed float64
	for _, f := range ev.senders() {
		if d := ev.DeviceNamed(f.Netns, f.Dev); d.physical() {
			speed = max(speed, float64(d.SpeedMbps)*1e6)
		}
	}
	tx, unshaped := ev.sendersOverVirtual()
	if tx <= 0 {
		return 0, "", false
	}
	gain, how, ok := cpuBoundGain(ev, tx)
	if unshaped {
		gain, how, ok = liftedGain(ev, tx)
	}
	how += ")"
	if speed > 0 {
		if link := max(0, 1-min(tx, speed)/speed); !ok || link < gain {
			return link, fmt.Sprintf("1 - %s / the link's %s", units.Bits(tx), units.Bits(speed)), true
		}
	}
	return gain, how, ok
}
