package doctor

import (
	"fmt"
	"math"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

func mtuMismatch(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.Flows {
		f := &ev.Flows[i]
		p := ev.peerFlow(f)
		if p == nil || f.SndMSS == 0 {
			continue
		}
		pd := ev.DeviceNamed(p.Netns, p.Dev)
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
		if sd := ev.DeviceNamed(f.Netns, f.Dev); sd != nil {
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
		fd := finding.Finding{ID: "mtu-mismatch", Severity: severity,
			Title:       title,
			Evidence:    evidence,
			Explanation: explanation,
			Remedy: []string{
				nsPrefix(f.Netns) + fmt.Sprintf("ip link set %s mtu %d   (one MTU on the whole path)", orNone(f.Dev), minMTU),
				"or remove what advertises the larger MSS (ip route ... advmss), or raise the MTU of every hop",
				nsPrefix(f.Netns) + "sysctl -w net.ipv4.tcp_mtu_probing=1   (recovers from black holes by probing)",
			},
			Scope: flowScope(f), Impact: impact, ImpactText: impactText, Confidence: finding.Strong,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -M do -s %d -c 3 %s   (a full-size packet with DF: no reply through the hole)", packet-28, f.Peer.Addr())}}
		// What makes the packets too big: a route at the receiver that
		// advertises an MSS above its own MTU, else the sender's MTU
		// above its veth peer's.
		probing := "or " + nsPrefix(f.Netns) + "sysctl -w net.ipv4.tcp_mtu_probing=1   (the sender recovers from black holes by probing)"
		if l := ev.advmssLimit(p, pd.MTU); l != nil {
			nameLimit(&fd, l, probing)
		} else if l := ev.deviceLimit(kindMTU, f.Netns, f.Dev); l != nil {
			nameLimit(&fd, l, probing)
		}
		out = append(out, fd)
	}
	out = append(out, pathMTUHoles(ev, out)...)
	out = append(out, mtuDiffers(ev, out)...)
	return out
}

func headerBytes(f *Flow) int {
	if f.Local.Addr().Is6() {
		return 60
	}
	return 40
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
		netns   string // of the hop that dropped them
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
		if h.netns == "" {
			h.netns = ev.deviceNetns(d.Dev)
		}
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
		fd := finding.Finding{ID: "mtu-mismatch", Severity: severity,
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
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ping -M do -s %d -c 3 %s   (a full-size packet with DF: no reply, no error)", fullSizePing(f), f.Peer.Addr())}}
		// The rule that drops the hop's reply, where this host has it.
		if l := ev.icmpDropLimit(h.netns); l != nil {
			nameLimit(&fd, l, fd.Remedy[1:]...)
		}
		out = append(out, fd)
	}
	return out
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
	for ns, d := range ev.devices {
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
			// Datagrams beyond the smaller MTU (UDP, or GSO without
			// TCP's MSS) die whole: the share of the larger end's
			// packets that the link dropped is what is lost.
			sender := d
			if o.MTU > d.MTU {
				sender = o
			}
			if sent := dropped + sender.Stats.TxPackets; sent > 0 && float64(dropped)/float64(sent) > impact {
				impact = math.Min(0.99, float64(dropped)/float64(sent))
				impactText = fmt.Sprintf("about %s: the link dropped %d of the %d packets %s sent", pct(impact), dropped, sent, sender.Name)
			}
		}
		fd := finding.Finding{ID: "mtu-mismatch", Severity: severity,
			Title:    fmt.Sprintf("the ends of a link disagree on the MTU: %s %d, %s %d", d.Name, d.MTU, o.Name, o.MTU),
			Evidence: evidence,
			Explanation: "Each end derives its MSS from its own MTU, so TCP often works across it; but a packet larger than " +
				"the receiving end's MTU (a larger advertised MSS, GSO or UDP beyond the smaller MTU) is dropped there " +
				"without an ICMP error, and the sender retransmits into the same hole.",
			Remedy: []string{nsPrefix(ns.Name) + fmt.Sprintf("ip link set %s mtu %d", d.Name, min(d.MTU, o.MTU)) +
				"   (or " + nsPrefix(ons.Name) + fmt.Sprintf("ip link set %s mtu %d: one MTU on both ends)", o.Name, max(d.MTU, o.MTU))},
			Scope: "device " + d.Name, Impact: impact, ImpactText: impactText, Confidence: confidence,
			Confirm: []string{nsPrefix(ns.Name) + fmt.Sprintf("ping -M do -s %d -c 3 ADDRESS-BEHIND-%s   (a packet of the larger MTU dies on the link)", max(d.MTU, o.MTU)-28, o.Name)}}
		// The larger end is the limit: lowering it keeps every packet
		// within what the other end takes.
		big, bigNs, small, smallNs := d, ns, o, ons
		if o.MTU > d.MTU {
			big, bigNs, small, smallNs = o, ons, d, ns
		}
		if l := ev.deviceLimit(kindMTU, bigNs.Name, big.Name); l != nil {
			nameLimit(&fd, l, "or "+nsPrefix(smallNs.Name)+fmt.Sprintf("ip link set dev %s mtu %d, and the MTU of every hop beyond it", small.Name, big.MTU))
		}
		out = append(out, fd)
	}
	return out
}

// tooBigForLink says a drop is the forwarding check of a link against its
// MTU: veth's __dev_forward_skb (is_skb_forwardable), or the kernel's reason.
func tooBigForLink(d Drop) bool {
	return d.Reason == "PKT_TOO_BIG" || strings.HasPrefix(d.Location, "__dev_forward_skb") || strings.HasPrefix(d.Location, "is_skb_forwardable")
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
		fd := smallPacketFinding(ev, evidence, fmt.Sprintf("%s (pid %d)", s.Comm, s.Pid), perCall)
		// The application's calls as the limit (rules_applimits.go).
		lim := writeSizeLimit(s, perCall)
		fd.Limit, fd.Remedy = lim, append(lim.Remedy(), fd.Remedy[2:]...)
		out = append(out, fd)
	}
	if len(ev.SockIO) > 0 {
		return out
	}
	// Without sock_io, the device counters show the same shape.
	for _, d := range ev.devices {
		pps := float64(d.Stats.TxPackets) / max(ev.Seconds, 1e-9)
		if d.Name == "lo" || pps < 50000 || d.txBytesPerPacket() > smallPacket {
			continue
		}
		evidence := []string{fmt.Sprintf("%s sent %.0f packets/s of %.0f bytes on average (device counters)", d.Name, pps, d.txBytesPerPacket())}
		out = append(out, smallPacketFinding(ev, evidence, "device "+d.Name, d.txBytesPerPacket()))
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
