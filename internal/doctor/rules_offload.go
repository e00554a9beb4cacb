package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
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

func offloadDisabled(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
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
			impactText := "CPU per byte several times higher; throughput where the CPU is the limit"
			// On a virtual device the CPU is the path's rate: the stream
			// would run at what it carries here with segmentation on.
			if impact == 0.4 && virtualDevice(d) && severity >= finding.Warning {
				if g, how, ok := liftedGain(ev, tx); ok && g > impact {
					impact, impactText = min(g, maxShaperImpact), "what the flows would gain with segmentation on: "+how+")"
				}
			}
			lines := []string{fmt.Sprintf("%s sends %s of TCP", d.Name, units.Bits(tx))}
			if d.Xmit != nil {
				lines = append(lines, fmt.Sprintf("%.2f segments per skb at transmit over %d skbs (dev_xmit)", d.Xmit.SegsPerSkb(), d.Xmit.Skbs))
			} else {
				lines = append(lines, fmt.Sprintf("%.0f bytes per transmitted packet (device counters)", d.txBytesPerPacket()))
			}
			if off != "" {
				lines = append(lines, fmt.Sprintf("%s off (ethtool -k %s)", off, d.Name))
			}
			f := finding.Finding{ID: "offload-disabled", Severity: severity,
				Title: title, Evidence: lines, Explanation: explanation, Remedy: remedy,
				Scope: fmt.Sprintf("device %s (netns %s)", d.Name, ns.Name), Impact: impact,
				ImpactText: impactText, Confidence: shapeConfidence(d.Xmit != nil, severity)}
			if l := ev.deviceLimit(kindSegOff, ns.Name, d.Name); l != nil && off != "" {
				nameLimit(&f, l)
			}
			f.Confirm = []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -k %s | grep -e segmentation -e checksum", d.Name),
				"turn it on for one run and compare: " + f.Remedy[0]}
			out = append(out, f)
		}
		// Without dev_recv, received packets no larger than the MTU show
		// that nothing upstream (the peer's GSO over veth) made them large.
		notMerged := d.Recv.SegsPerSkb() > 0 && d.Recv.SegsPerSkb() < noCoalescing && d.Recv.Skbs >= minOffloadSkbs && d.Recv.smallSkbs() ||
			d.Recv == nil && d.rxBytesPerPacket() > 0 && d.rxBytesPerPacket() <= float64(d.MTU+l2Header)
		if rx > 0 && notMerged && d.featureOff(featGRO) {
			severity, explanation := receiveHeadroom(ev, d, "GRO merges consecutive segments of a flow into one large skb before the stack processes it; "+
				"without it every MSS-sized packet pays the whole receive path.")
			// A veth receives single segments only when its peer makes
			// them: with the peer's segmentation off (its own finding) the
			// peer's limit is the cause, and GRO off, veth's default,
			// costs nothing once it is lifted.
			if pns, p := ev.vethPeer(ns, d); p != nil && p.featureOff(featTSO) && p.featureOff(featGSO) && ev.deviceLimit(kindSegOff, pns.Name, p.Name) != nil {
				severity = finding.Info
				explanation += fmt.Sprintf(" Its peer %s (netns %s) sends them single, with TSO and GSO off: with GSO on there, %s receives whole 64 KB skbs, GRO or not.",
					p.Name, pns.Name, d.Name)
			}
			f := finding.Finding{ID: "offload-disabled", Severity: severity,
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
				Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -K %s gro on for one run and compare", d.Name)}}
			if l := ev.deviceLimit(kindGROOff, ns.Name, d.Name); l != nil {
				nameLimit(&f, l)
			}
			out = append(out, f)
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
	return out
}

// cpuHeadroom lowers an offload finding to info when no CPU is near busy:
// offloads save CPU, and with CPU to spare they do not set the rate.
func cpuHeadroom(ev *Evidence, severity finding.Severity, explanation string) (finding.Severity, string) {
	if c := busiest(ev); c != nil && c.Busy() < 0.5 {
		return finding.Info, explanation + fmt.Sprintf(" No CPU was more than %s busy, so at this rate it costs CPU, not throughput.", pct(c.Busy()))
	}
	return severity, explanation
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
	// A ring that overflowed says the receive path fell behind, whatever
	// the CPUs' shares read (an e1000 wire under TCG missed 5,341 frames
	// with GRO off while its CPUs read under 90 % busy).
	if o := ringOverflowOf("", d); o != nil {
		return finding.Warning, explanation + fmt.Sprintf(" %s's receive ring overflowed (%d frames missed, ethtool -S): the receive path fell behind, so each packet's extra cost comes out of throughput.",
			d.Name, o.missed)
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

// l2Header allows for the Ethernet and VLAN headers device counters include.
const l2Header = 18

func recvShape(d *Device) string {
	if d.Recv != nil {
		return fmt.Sprintf("%.2f segments per skb at receive over %d skbs (dev_recv)", d.Recv.SegsPerSkb(), d.Recv.Skbs)
	}
	return fmt.Sprintf("%.0f bytes per received packet, MTU %d (device counters)", d.rxBytesPerPacket(), d.MTU)
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

func groBlocked(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
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
		if reassembled(ns, blocked) {
			continue // fragments, which GRO never merges: ip-fragmented
		}
		if r == nil || r.Skbs < minOffloadSkbs || r.SegsPerSkb() >= noCoalescing || !r.smallSkbs() || !blocked.Features[featGRO] {
			continue
		}
		evidence = append(evidence, fmt.Sprintf("%.2f segments per skb at receive on %s over %d skbs (dev_recv), with rx-gro (generic-receive-offload) on",
			r.SegsPerSkb(), blocked.Name, r.Skbs))
		if blocked.Features[featLRO] {
			out = append(out, lroBypass(ns, blocked, evidence))
			continue
		}
		f := finding.Finding{ID: "gro-blocked", Severity: finding.Warning,
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
			Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("tcpdump -i %s -s 128 -c 20000 -w gro.pcap, then skbtrace pcap gro.pcap: IP-ID continuity of DF=0 packets, outer and inner", blocked.Name)}}
		if l := ev.groLimit(ns, blocked); l != nil {
			groBlockedBy(&f, blocked, l)
		}
		out = append(out, f)
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
	for ns, d := range ev.devices {
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
		sns := ev.NamespaceNamed(p.Netns)
		sd := ev.DeviceNamed(p.Netns, p.Dev)
		if sns == nil || sd == nil || sns.Counters["Ip.FragCreates"] > 0 || sd.Xmit.SegsPerSkb() < noCoalescing || !sd.Features[featTSO] {
			continue
		}
		return &sendingDevice{sns, sd}
	}
	return nil
}

// irqCoalescing names a NIC that waits long after a packet arrives before
// it interrupts (ethtool -C rx-usecs), where a flow's round trip through it
// is short enough for that wait to be a large part of it: every request,
// response and ACK it receives waits.
func irqCoalescing(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
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

func usText(us uint32) string {
	return units.Duration(time.Duration(us) * time.Microsecond)
}

func knownNICIssue(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for ns, d := range ev.devices {
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
	return out
}
