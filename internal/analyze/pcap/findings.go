package pcap

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Thresholds of the capture findings.
const (
	minIDPairs       = 100 // consecutive DF=0 packets before IP-ID continuity is judged
	unmergeableBad   = 0.5
	retransBad       = 0.001
	windowLimitBad   = 0.3
	minWindowPackets = 100   // data packets before the window-limited share is judged
	smallPacketRate  = 10000 // data packets per second
	smallPayload     = 256
	minFragDatagrams = 10 // fragmented data segments before a flow is judged
	fragmentedBad    = 0.1
)

func (a *Analyzer) findings(r *Report) []finding.Finding {
	var out []finding.Finding
	for _, t := range r.Tunnels {
		if t.IPID.Pairs >= minIDPairs && t.IPID.Share >= unmergeableBad {
			out = append(out, groBlocked(fmt.Sprintf("tunnel %s -> %s (VNI %d), outer header", t.Src, t.Dst, t.VNI), &t.IPID))
		}
	}
	for i := range r.Flows {
		f := &r.Flows[i]
		scope := fmt.Sprintf("%s %s -> %s", f.Proto, f.Src, f.Dst)
		if id := f.IPID; id != nil && id.Pairs >= minIDPairs && id.Share >= unmergeableBad {
			layer := "IP header"
			if f.Encap != "" {
				layer = "inner header"
			}
			out = append(out, groBlocked(scope+", "+layer, id))
		}
		if t := f.TCP; t != nil {
			out = append(out, tcpFindings(f, t, scope)...)
			if fr := f.Fragments; fr != nil && fr.Datagrams >= minFragDatagrams && fr.Share >= fragmentedBad {
				out = append(out, ipFragmented(f, fr, scope))
			}
		}
		if f.Seconds > 0 {
			rate := float64(f.DataPackets) / f.Seconds
			if f.DataPackets > 0 && rate >= smallPacketRate && f.PayloadBytes/f.DataPackets <= smallPayload {
				avg := float64(f.PayloadBytes) / float64(f.DataPackets)
				out = append(out, finding.Finding{ID: "small-packet-bound", Severity: finding.Warning,
					Title:    fmt.Sprintf("%.0f packets/s of %.0f bytes on %s", rate, avg, scope),
					Evidence: []string{fmt.Sprintf("%d data packets in %.3f s, %.0f bytes of payload each on average: %s", f.DataPackets, f.Seconds, avg, units.Bits(f.Bps))},
					Explanation: "Every packet costs a system call, the stack and the driver whatever its size: small packets " +
						"make the per-packet cost, not the link, the limit.",
					Remedy: []string{"send larger messages, or batch them (sendmmsg, UDP GSO); run skbtrace doctor on the sender to see the CPU and mitigations"},
					Scope:  scope, Impact: 1 - avg/1472, ImpactText: "most of the link, at this packet size",
					// The sizes are measured; that they, not the link, set the rate is inferred.
					Confidence: finding.Likely,
					Confirm:    []string{"skbtrace doctor on the sender during the transfer: its socket calls per second and their sizes (sock_io) and the CPU they take"}})
			}
		}
	}
	if a.ICMPTooBig > 0 {
		out = append(out, finding.Finding{ID: "mtu-mismatch", Severity: finding.Warning,
			Title:    fmt.Sprintf("the path announces a smaller MTU (%d)", a.ICMPMTU),
			Evidence: []string{fmt.Sprintf("%d ICMP \"fragmentation needed\" / \"packet too big\" messages, the last announcing MTU %d", a.ICMPTooBig, a.ICMPMTU)},
			Explanation: "A hop cannot forward packets of the size sent. Path MTU discovery recovers when these messages reach " +
				"the sender; where a firewall drops them, large packets vanish (a black hole).",
			Remedy: []string{fmt.Sprintf("ip link set DEV mtu %d on the sending side, or sysctl -w net.ipv4.tcp_mtu_probing=1", a.ICMPMTU)},
			Scope:  "path", Impact: 0.5, ImpactText: "large packets are dropped until the sender adapts",
			// The hop's own messages are in the capture.
			Confidence: finding.Strong,
			Confirm:    []string{"tracepath DESTINATION from the sender: the hop where the path MTU drops"}})
	}
	if a.opts.MTU > 0 {
		for i := range r.Flows {
			f := &r.Flows[i]
			if t := f.TCP; t != nil && t.MSS > 0 && int(t.MSS)+40 > a.opts.MTU {
				out = append(out, finding.Finding{ID: "mtu-mismatch", Severity: finding.Critical,
					Title:    fmt.Sprintf("%s announced MSS %d, more than MTU %d carries", f.Src, t.MSS, a.opts.MTU),
					Evidence: []string{fmt.Sprintf("SYN from %s: MSS %d, so packets of %d bytes; --mtu %d", f.Src, t.MSS, int(t.MSS)+40, a.opts.MTU)},
					Explanation: "The end announces segments larger than the path carries; unless ICMP reaches the sender, " +
						"full-size segments are dropped and the transfer stalls.",
					Remedy: []string{fmt.Sprintf("ip link set DEV mtu %d on %s, or clamp the MSS (iptables -t mangle -A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu)", a.opts.MTU, f.Src)},
					Scope:  "tcp " + f.Src + " -> " + f.Dst, Impact: 0.99, ImpactText: "bulk data stalls",
					// The MSS is in the capture; the MTU is what --mtu says.
					Confidence: finding.Likely,
					Confirm: []string{fmt.Sprintf("from %s: ping -M do -s %d %s passes and -s %d does not where the path carries %d bytes, not the %d the MSS needs",
						host(f.Src), a.opts.MTU-28, host(f.Dst), a.opts.MTU-27, a.opts.MTU, int(t.MSS)+40)}})
			}
		}
	}
	return out
}

func groBlocked(scope string, id *IPIDReport) finding.Finding {
	ev := []string{fmt.Sprintf("%d of %d consecutive DF=0 packets (%.0f %%) have IP IDs that neither increment nor repeat: GRO cannot merge them",
		id.Unmergeable, id.Pairs, id.Share*100)}
	if len(id.Examples) > 0 {
		jumps := ""
		for _, e := range id.Examples {
			jumps += fmt.Sprintf(" %d->%d", e[0], e[1])
		}
		ev = append(ev, "jumps:"+jumps)
	}
	ev = append(ev, fmt.Sprintf("%d incrementing, %d fixed", id.Incrementing, id.Fixed))
	return finding.Finding{ID: "gro-blocked", Severity: finding.Warning,
		Title:    fmt.Sprintf("GRO cannot merge %.0f %% of the DF=0 packets of %s", id.Share*100, scope),
		Evidence: ev,
		Explanation: "For IPv4 packets without DF, GRO merges a packet into the previous one only if its IP ID follows on " +
			"(or stays fixed). A device that takes IDs from a counter shared by several flows, or rewrites them, makes " +
			"them jump, and the receiver processes every packet alone.",
		Remedy: []string{"set DF on the encapsulating device (for VXLAN: ip link set DEV type vxlan ... df set) or make it keep per-flow IP IDs",
			"confirm on the receiver: skbtrace doctor --deep shows segments per skb at receive"},
		Scope: scope, Impact: 0.45 * id.Share, ImpactText: "receive CPU per byte several times higher",
		// The IDs are measured; that the receiver's GRO then merges nothing is inferred.
		Confidence: finding.Likely,
		Confirm:    []string{"on the receiver during the transfer: skbtrace doctor --deep, whose dev_recv shows about one segment per skb on the receiving device"}}
}

func tcpFindings(f *FlowReport, t *TCPReport, scope string) []finding.Finding {
	var out []finding.Finding
	if f.DataPackets > 0 {
		ratio := float64(t.Retransmissions) / float64(f.DataPackets)
		if t.RetransmittedSegs >= 10 && ratio >= retransBad {
			where := "captured near the sender: these are segments the sender resent"
			if f.Location == LocationReceiver {
				where = "captured near the receiver: packets lost before the capture point show as out-of-order arrivals instead"
			}
			impact := math.Min(0.9, 5*math.Sqrt(ratio))
			out = append(out, finding.Finding{ID: "packet-loss", Severity: finding.Warning,
				Title: fmt.Sprintf("%.2f %% of the data packets of %s were retransmitted", ratio*100, scope),
				Evidence: []string{
					fmt.Sprintf("%d retransmitted packets (%d segments) of %d data packets, %d out of order, %d duplicate ACKs", t.Retransmissions, t.RetransmittedSegs, f.DataPackets, t.OutOfOrder, t.DupAcks),
					where,
				},
				Explanation: "Every loss is resent and halves the congestion window: with loss p, TCP reaches at most about MSS/RTT x 1.2/sqrt(p).",
				Remedy:      []string{"find where packets die: skbtrace record -e skb_drop,tcp_retrans on the hosts, or captures on both sides"},
				Scope:       scope, Impact: impact, ImpactText: fmt.Sprintf("about %.0f %%", impact*100),
				// The resends are seen; where the originals died is not.
				Confidence: finding.Likely,
				Confirm:    []string{"skbtrace record -e skb_drop,tcp_retrans -d 10 on both hosts during the transfer, then skbtrace stat: drops by reason and location beside the retransmissions"}})
		}
	}
	if f.DataPackets >= minWindowPackets && (t.WindowLimitedShare >= windowLimitBad || f.Seconds > 0 && t.ZeroWindowSeconds >= 0.1*f.Seconds) {
		out = append(out, finding.Finding{ID: "rwnd-limited", Severity: finding.Warning,
			Title: fmt.Sprintf("the receiver's window limits %s", scope),
			Evidence: []string{
				fmt.Sprintf("unacknowledged data filled the advertised window %.0f %% of the time", t.WindowLimitedShare*100),
				fmt.Sprintf("%d zero windows advertised, %.3f s in all", t.ZeroWindows, t.ZeroWindowSeconds),
			},
			Explanation: "The receiver's advertised window caps the bytes in flight: a small receive buffer or a slow reader.",
			Remedy:      []string{"raise net.ipv4.tcp_rmem's maximum on the receiver; check that the receiving application keeps up"},
			Scope:       scope, Impact: t.WindowLimitedShare, ImpactText: fmt.Sprintf("%.0f %% of the time", t.WindowLimitedShare*100),
			// The window and the data in flight are read from the capture,
			// which sees them where it was taken, not at the ends.
			Confidence: finding.Likely,
			Confirm:    []string{fmt.Sprintf("on the receiver %s: ss -tmi src %s over a few seconds (rcv_space, the receive buffer's skmem rb); skbtrace doctor there names the window's limit", host(f.Dst), f.Dst)}})
	}
	return out
}

// ipFragmented is TCP data that came as IP fragments. A segment larger
// than the receiver's MSS can only be a TSO/GSO packet that a device cut
// into fragments instead of segments; segments within it were fragmented
// on a path whose MTU is smaller than the ends'.
func ipFragmented(f *FlowReport, fr *FragReport, scope string) finding.Finding {
	tso := fr.SegmentLimit > 0 && fr.MaxPayload > fr.SegmentLimit
	ev := []string{fmt.Sprintf("%d of %d data segments (%.0f %%) came as IP fragments, %.1f fragments per datagram (at most %d)",
		fr.Datagrams, f.DataPackets+fr.Incomplete+fr.CutAtEnd+fr.Unterminated, fr.Share*100, fr.PerDatagram, fr.MaxPerDatagram)}
	switch fr.DF {
	case fr.Datagrams:
		ev = append(ev, fmt.Sprintf("DF set on all %d first fragments: a router never fragments such a packet (it drops it and answers "+
			"ICMP \"fragmentation needed\"), so what cut them ignored DF, as a device's segmentation offload does", fr.DF))
	case 0:
		ev = append(ev, fmt.Sprintf("DF unset on all %d first fragments: any hop may fragment them", fr.Datagrams))
	default:
		ev = append(ev, fmt.Sprintf("DF set on %d of %d first fragments", fr.DF, fr.Datagrams))
	}
	if tso {
		ev = append(ev, fmt.Sprintf("the datagrams carry %.0f bytes of TCP payload on average, at most %d: %.1f times %s. "+
			"TCP never sends a segment that large, so each is a TSO/GSO packet cut into fragments instead of segments",
			fr.AvgPayload, fr.MaxPayload, fr.AvgPayload/float64(fr.SegmentLimit), segmentLimit(fr)))
	} else if fr.SegmentLimit > 0 {
		ev = append(ev, fmt.Sprintf("the datagrams carry at most %d bytes of TCP payload, within %s: segments no larger than TCP sends, "+
			"fragmented where the path's MTU is smaller", fr.MaxPayload, segmentLimit(fr)))
	}
	if fr.Incomplete > 0 {
		noun := "datagrams"
		if fr.Incomplete == 1 {
			noun = "datagram"
		}
		ev = append(ev, fmt.Sprintf("%d %s incomplete in the capture: a fragment missing", fr.Incomplete, noun))
	}
	if fr.CutAtEnd > 0 {
		noun := "datagrams"
		if fr.CutAtEnd == 1 {
			noun = "datagram"
		}
		ev = append(ev, fmt.Sprintf("%d %s cut by the capture's end, its last fragments after it", fr.CutAtEnd, noun))
	}
	if fr.Unterminated > 0 {
		ev = append(ev, fmt.Sprintf("%d never ended: fragments from the start without a gap, each marked more-to-come, and no last one: "+
			"the fragmenting side did not end them (QEMU's vmxnet3 so cuts a TSO packet of a whole number of fragments), or their last "+
			"fragments were lost; no receiver reassembles them, so TCP sends their data again", fr.Unterminated))
	}
	title := fmt.Sprintf("%.0f %% of the data segments of %s came as IP fragments", fr.Share*100, scope)
	var remedy []string
	switch {
	case tso:
		title += ", each a TSO packet the sending device fragmented instead of segmenting"
		remedy = []string{"on the sender " + host(f.Src) + ": ethtool -K DEV tso off on the device that sends this flow (GSO then segments in software, into TCP segments GRO can merge)",
			"report it against that device's driver, or the hypervisor that emulates it (QEMU 7.2's e1000e sends TSO as IP fragments on a backend without vnet headers)"}
	case f.Encap != "":
		// The fragmented datagrams are the tunnel's outer packets.
		remedy = []string{"the " + f.Encap + " tunnel's outer packets are fragmented on its underlay: lower the tunnel device's MTU by the encapsulation's overhead " +
			"(ip link set DEV mtu N), or raise the underlay's"}
	default:
		remedy = []string{"find the hop with the smaller MTU (tracepath " + host(f.Dst) + " from the sender) and fit the ends to it: ip link set DEV mtu N, " +
			"or clamp the MSS (iptables -t mangle -A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu)"}
	}
	return finding.Finding{ID: "ip-fragmented", Severity: finding.Warning,
		Title:    title,
		Evidence: ev,
		Explanation: "GRO merges TCP segments, never IP fragments: the receiver takes every fragment through the stack alone, holds them and " +
			"reassembles each segment in software, paying per packet, and one lost fragment loses the whole segment, which TCP resends whole.",
		Remedy:     remedy,
		Scope:      scope,
		Impact:     0.45 * fr.Share,
		ImpactText: "receive CPU per byte several times higher; a lost fragment costs a whole segment",
		Confidence: finding.Likely,
		Confirm: []string{"on the receiver during the transfer: nstat -az IpReasmReqds IpReasmOKs (fragments taken, datagrams made); " +
			"skbtrace doctor on both ends names the device (ip-fragmented)"}}
}

// host is the address of a flow's ADDR:PORT end.
func host(end string) string {
	if ap, err := netip.ParseAddrPort(end); err == nil {
		return ap.Addr().String()
	}
	return end
}
