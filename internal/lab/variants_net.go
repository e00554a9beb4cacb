package lab

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

func init() { Variants = append(Variants, netVariants...) }

// netVariants build the path-side findings (loss, shaping, MTU, offloads,
// GRO) by other mechanisms than the lab's own scenarios: other netfilter
// hooks and qdiscs, the receiver's ingress, the other end, iperf3, and a
// router namespace between the ends that the doctor does not observe.
var netVariants = []*Scenario{
	{
		Name:      "packet-loss-sender-egress-hook",
		Mechanism: "an nftables netdev egress hook on the sender's veth (after routing, before the qdisc): TCP learns of the drop",
		Fault:     "nft in the sender's namespace, netdev family, egress hook of its veth: 1 % of the skbs to the lab's port dropped (control: none)",
		Expect:    "packet-loss",
		Families:  []string{"tcp_conn", "tcp_retrans", "tcp_cong", "skb_drop"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return netNft(p.Sender, "netdev", "type filter hook egress device "+p.SenderDev+" priority 0 ;",
				fmt.Sprintf("ip protocol tcp tcp dport %d numgen random mod 100 < 1 drop", Port))
		},
		Fix: func(p *Pair) error { return netNftDelete(p.Sender, "netdev") },
		// A drop on the sending host's own path is reported to TCP
		// (NET_XMIT_DROP): it enters CWR and sends the skb again later,
		// not as a retransmission.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops := f.drops("NETFILTER_DROP")
			return fmt.Sprintf("%d skb_drop [NETFILTER_DROP] (%s), %d in the control; %d retransmitted segments; throughput %s",
					drops, f.dropLocation(p.SenderDev), c.drops("NETFILTER_DROP"), netRetrans(f), change(c, f)),
				drops > 0 && c.drops("NETFILTER_DROP") == 0
		},
	},
	{
		Name: "packet-loss-u32-ipid",
		Mechanism: "a u32 classifier inside a classful qdisc on the sender's veth, matching a byte of the IP header, whose action " +
			"(mirred to a device that is down) fails: the qdisc drops the packet silently, and TCP must retransmit it",
		Fault: "an htb qdisc without classes (all traffic in its unshaped direct queue) on the sender's veth; a u32 filter redirects " +
			"TCP skbs whose IP ID's low byte is 0x5a, about 1 in 256, to an ifb device that is down (control: no filter)",
		Expect:   "packet-loss",
		Families: []string{"tcp_conn", "tcp_retrans", "tcp_cong", "skb_drop", "qdisc"},
		Load:     bulk,
		Prepare: func(p *Pair) error {
			if _, err := p.Sender.Run("ip", "link", "add", netIfb(p), "type", "ifb"); err != nil {
				return err
			}
			_, err := p.Sender.Run("tc", "qdisc", "add", "dev", p.SenderDev, "root", "handle", "1:", "htb")
			return err
		},
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "filter", "add", "dev", p.SenderDev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
				"match", "ip", "protocol", "6", "0xff", "match", "u16", "0x005a", "0x00ff", "at", "4",
				"action", "mirred", "egress", "redirect", "dev", netIfb(p))
			return err
		},
		Fix: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "filter", "del", "dev", p.SenderDev, "parent", "1:")
			return err
		},
		// The qdisc reports success to TCP for a packet its classifier
		// shot: the segments are lost as on a wire and retransmitted.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, retrans := netDropsOf(f, p.SenderDev, "ipv4/tcp"), netRetrans(f)
			return fmt.Sprintf("%d skb_drop of TCP on %s (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, p.SenderDev, f.dropLocation(p.SenderDev), netDropsOf(c, p.SenderDev, "ipv4/tcp"), retrans, netRetrans(c), change(c, f)),
				drops > 10*(netDropsOf(c, p.SenderDev, "ipv4/tcp")+1) && retrans > 10*(netRetrans(c)+1)
		},
	},
	{
		Name:      "packet-loss-router-forward",
		Mechanism: "loss in a router namespace between the ends (nftables forward chain), a host the doctor does not observe",
		Fault:     "a router namespace forwards between the ends; its forward chain drops 1 % of the segments to the lab's port (control: forwarding all)",
		Expect:    "packet-loss",
		Families:  []string{"tcp_conn", "tcp_retrans", "tcp_cong", "skb_drop"},
		Load:      bulk,
		Prepare:   netRouted(nil),
		Inject: func(p *Pair) error {
			return netNft(netRouter(p).ns, "inet", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d numgen random mod 100 < 1 drop", Port))
		},
		Fix: func(p *Pair) error { return netNftDelete(netRouter(p).ns, "inet") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			r := netRouter(p)
			drops, retrans := f.drops("NETFILTER_DROP"), netRetrans(f)
			return fmt.Sprintf("%d skb_drop [NETFILTER_DROP] in the router (%s on %s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, f.dropLocation(r.in), r.in, c.drops("NETFILTER_DROP"), retrans, netRetrans(c), change(c, f)),
				drops > 0 && c.drops("NETFILTER_DROP") == 0 && retrans > 0
		},
	},
	{
		Name: "mtu-mismatch-veth-ends-udp",
		Mechanism: "the two ends of one veth link with different MTUs, nothing else, and UDP datagrams larger than the smaller MTU " +
			"(TCP's MSS negotiation would hide the mismatch)",
		Fault: "the sender's veth at MTU 9000, the receiver's at 1500, 8000-byte UDP datagrams at 1 Gbit/s " +
			"(control: both 1500, the datagrams fragmented)",
		Expect:   "mtu-mismatch",
		Families: []string{"skb_drop", "dev_xmit"},
		// At a rate the receiver reassembles most of in the control.
		Load:     load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: 8000, RateBps: 1e9},
		Workload: netDelivered,
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("ip", "link", "set", p.SenderDev, "mtu", "9000")
			return err
		},
		Fix: func(p *Pair) error {
			_, err := p.Sender.Run("ip", "link", "set", p.SenderDev, "mtu", "1500")
			return err
		},
		// veth drops what exceeds its peer's MTU, no ICMP comes back.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, before := netDropsOf(f, p.SenderDev, "ipv4/udp"), netDropsOf(c, p.SenderDev, "ipv4/udp")
			return fmt.Sprintf("%d skb_drop of UDP on %s (%s), %d in the control; %.0f %% of the datagrams arrived, %.0f %% in the control; delivered %s",
					drops, p.SenderDev, f.dropLocation(p.SenderDev), before, netArrived(f)*100, netArrived(c)*100, change(c, f)),
				drops > 100 && before*10 < drops && netArrived(f) < 0.1 && netArrived(c) > 0.5
		},
	},
	{
		Name: "mtu-mismatch-pmtu-blackhole",
		Mechanism: "a router namespace whose link to the receiver has a smaller MTU, while its ICMP \"fragmentation needed\" is " +
			"dropped by nftables: a path-MTU black hole between ends of equal MTU",
		Fault: "the router's link to the receiver at MTU 1400 (both ends 1500, MSS 1448), the router's nftables output chain " +
			"drops ICMP fragmentation-needed (control: the ICMP passes, the sender lowers its path MTU)",
		Expect:   "mtu-mismatch",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     bulk,
		Prepare: netRouted(func(p *Pair) error {
			r := netRouter(p)
			_, err := r.ns.Run("ip", "link", "set", r.out, "mtu", "1400")
			return err
		}),
		Inject: func(p *Pair) error {
			// The control's path MTU lives in an exception of the route to the
			// receiver: replacing the route forgets it.
			if err := netRouteToReceiver(p, "del"); err != nil {
				return err
			}
			if err := netRouteToReceiver(p, "add"); err != nil {
				return err
			}
			return netNft(netRouter(p).ns, "ip", "type filter hook output priority 0 ;",
				"icmp type destination-unreachable icmp code frag-needed drop")
		},
		Fix: func(p *Pair) error { return netNftDelete(netRouter(p).ns, "ip") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			big, icmp := f.drops("PKT_TOO_BIG"), netDropsOf(f, "", "ipv4/icmp")
			return fmt.Sprintf("%d skb_drop [PKT_TOO_BIG] in the router (%d in the control), %d ICMP dropped; %d retransmitted segments; throughput %s",
					big, c.drops("PKT_TOO_BIG"), icmp, netRetrans(f), change(c, f)),
				big > 0 && icmp > 0 && f.Load.Bps < 0.1*c.Load.Bps
		},
	},
	{
		Name:      "rate-shaped-htb-filter",
		Mechanism: "an htb class reached through a u32 filter on the lab's port; other traffic goes unshaped",
		Fault:     "htb on the sender's veth, the lab's port classified by u32 into a 300mbit class, the rest unclassified (control: none)",
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "qdisc"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			for _, args := range [][]string{
				{"qdisc", "add", "dev", p.SenderDev, "root", "handle", "1:", "htb", "default", "99"},
				{"class", "add", "dev", p.SenderDev, "parent", "1:", "classid", "1:10", "htb", "rate", "300mbit", "ceil", "300mbit"},
				{"filter", "add", "dev", p.SenderDev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
					"match", "ip", "dport", fmt.Sprint(Port), "0xffff", "flowid", "1:10"},
			} {
				if _, err := p.Sender.Run("tc", args...); err != nil {
					return err
				}
			}
			return nil
		},
		Fix:     delSenderRoot,
		Verdict: netShaped(func(p *Pair) string { return p.SenderDev }, "htb", 300e6),
	},
	{
		Name: "rate-shaped-tbf-one-packet-bucket",
		Mechanism: "a shaper the flow reaches only half of: a bucket of one packet (burst 1540), so every packet waits for " +
			"the qdisc's watchdog; iperf3's traffic",
		Fault:    "tbf rate 500mbit burst 1540 on the sender's veth, iperf3 (control: none)",
		Expect:   "rate-shaped",
		Families: []string{"tcp_conn", "qdisc"},
		Load:     bulk,
		Workload: iperf3(),
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "qdisc", "add", "dev", p.SenderDev, "root", "tbf", "rate", "500mbit", "burst", "1540", "latency", "20ms")
			return err
		},
		Fix: delSenderRoot,
		// Measured 260 Mbit/s with iperf3 alone (a bucket of 3 KB: 457).
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			backlog := netBacklog(f, p.SenderDev)
			return fmt.Sprintf("tbf on %s (rate 500 Mbit/s, burst 1540): backlog up to %d bytes; throughput %s", p.SenderDev, backlog, change(c, f)),
				backlog > 0 && f.Load.Bps < 0.7*500e6 && c.Load.Bps > 1e9
		},
	},
	{
		Name:      "rate-shaped-ifb-ingress",
		Mechanism: "shaping on the receiver's ingress: an ingress qdisc redirects to an ifb device (act_mirred) that has the tbf",
		Fault:     "the receiver's veth redirects its ingress to an ifb device with tbf rate 200mbit (control: none)",
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "qdisc"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			ifb := netIfb(p)
			for _, cmd := range [][]string{
				{"ip", "link", "add", ifb, "type", "ifb"},
				{"ip", "link", "set", ifb, "up"},
				{"tc", "qdisc", "add", "dev", ifb, "root", "tbf", "rate", "200mbit", "burst", "64kb", "latency", "20ms"},
				{"tc", "qdisc", "add", "dev", p.ReceiverDev, "handle", "ffff:", "ingress"},
				{"tc", "filter", "add", "dev", p.ReceiverDev, "parent", "ffff:", "protocol", "ip", "prio", "1", "u32",
					"match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb},
			} {
				if _, err := p.Receiver.Run(cmd[0], cmd[1:]...); err != nil {
					return err
				}
			}
			return nil
		},
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("tc", "qdisc", "del", "dev", p.ReceiverDev, "ingress")
			return err
		},
		Verdict: netShaped(netIfb, "tbf", 200e6),
	},
	{
		Name:      "rate-shaped-router-tbf",
		Mechanism: "a shaper in a router namespace between the ends, on a host the doctor does not observe",
		Fault:     "a router namespace forwards between the ends; tbf rate 200mbit on its link to the receiver (control: forwarding unshaped)",
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "qdisc"},
		Load:      bulk,
		Prepare:   netRouted(nil),
		Inject: func(p *Pair) error {
			r := netRouter(p)
			_, err := r.ns.Run("tc", "qdisc", "add", "dev", r.out, "root", "tbf", "rate", "200mbit", "burst", "64kb", "latency", "20ms")
			return err
		},
		Fix:     netDelRoot(func(p *Pair) (*host.Netns, string) { r := netRouter(p); return r.ns, r.out }),
		Verdict: netShaped(func(p *Pair) string { return netRouter(p).out }, "tbf", 200e6),
	},
	{
		Name:      "offload-disabled-sg-off",
		Mechanism: "scatter-gather off, which takes TSO and GSO with it (both still requested on)",
		Fault:     "ethtool -K sg off on the sender's veth (control: on)",
		Expect:    "offload-disabled",
		Families:  []string{"tcp_conn", "dev_xmit"},
		Load:      bulk,
		Inject:    netEthtool(false, "sg", "off"),
		Fix:       netEthtool(false, "sg", "on"),
		Verdict:   netSegsVerdict(false),
	},
	{
		Name:      "offload-disabled-iperf3",
		Mechanism: "TSO and GSO off, iperf3's traffic instead of the lab's generator",
		Fault:     "ethtool -K tso off gso off on the sender's veth, iperf3 (control: on)",
		Expect:    "offload-disabled",
		Families:  []string{"tcp_conn", "dev_xmit"},
		Load:      bulk,
		Workload:  iperf3(),
		Inject:    netEthtool(false, "tso", "off", "gso", "off"),
		Fix:       netEthtool(false, "tso", "on", "gso", "on"),
		Verdict:   netSegsVerdict(false),
	},
	{
		Name: "offload-disabled-reverse-iperf3",
		Mechanism: "the other side: the data flows from the receiver's namespace (iperf3 -R, its server sends) whose veth " +
			"has TSO and GSO off",
		Fault:    "ethtool -K tso off gso off on the receiver's veth, iperf3 -R: the receiver's namespace sends (control: on)",
		Expect:   "offload-disabled",
		Families: []string{"tcp_conn", "dev_xmit"},
		Load:     bulk,
		Workload: iperf3("-R"),
		Inject:   netEthtool(true, "tso", "off", "gso", "off"),
		Fix:      netEthtool(true, "tso", "on", "gso", "on"),
		Verdict:  netSegsVerdict(true),
	},
	{
		Name: "gro-blocked-router-ipid",
		Mechanism: "plain IPv4 (no tunnel) whose IP IDs a router between the ends rewrites at random (nftables, as a " +
			"scrubbing middlebox does), DF cleared by the sender (ip_no_pmtu_disc)",
		Fault: "a router namespace forwards single segments (sender TSO off); its forward chain sets a random IP ID " +
			"on each, DF=0; the receiver's veth has GRO on (control: the IDs as sent, incrementing)",
		Expect:   "gro-blocked",
		Families: []string{"tcp_conn", "dev_recv"},
		Load:     bulk,
		Prepare: netRouted(func(p *Pair) error {
			if err := netGROPath(p); err != nil {
				return err
			}
			return sysctl(p.Sender, "net.ipv4.ip_no_pmtu_disc", "1")
		}),
		// nft writes a 16-bit field from the high half of its 32-bit
		// register (big-endian): "mod 65536" would write 0, a fixed ID
		// that GRO merges.
		Inject: func(p *Pair) error {
			return netNft(netRouter(p).ns, "ip", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d ip id set numgen random mod 4294967295", Port))
		},
		Fix:     func(p *Pair) error { return netNftDelete(netRouter(p).ns, "ip") },
		Verdict: netGROVerdict("random IP IDs"),
	},
	{
		Name: "gro-blocked-router-dscp",
		Mechanism: "no tunnel, no IP IDs: a router between the ends marks every other segment with another DSCP " +
			"(nftables), and GRO merges only packets whose TOS matches",
		Fault: "a router namespace forwards single segments (sender TSO off); its forward chain sets DSCP CS1 on every " +
			"other segment; the receiver's veth has GRO on (control: one DSCP)",
		Expect:   "gro-blocked",
		Families: []string{"tcp_conn", "dev_recv"},
		Load:     bulk,
		Prepare:  netRouted(netGROPath),
		Inject: func(p *Pair) error {
			return netNft(netRouter(p).ns, "ip", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d meta mark set numgen inc mod 2", Port),
				fmt.Sprintf("tcp dport %d meta mark 1 ip dscp set cs1", Port))
		},
		Fix:     func(p *Pair) error { return netNftDelete(netRouter(p).ns, "ip") },
		Verdict: netGROVerdict("alternating DSCP"),
	},
}

// netRetrans is the load sender's retransmitted segments (tcp_retrans).
func netRetrans(m *Measurement) uint64 {
	if s := m.sender(); s != nil {
		return s.RetransSegs
	}
	return 0
}

// netDropsOf counts the drops on a device ("": any) of a protocol as
// skb_drop names it ("ipv4/udp"): fresh interfaces drop a few IPv6 packets
// of their own.
func netDropsOf(m *Measurement, dev, proto string) uint64 {
	var n uint64
	for _, d := range m.Stat.Drops {
		if (dev == "" || d.Dev == dev) && d.Protocol == proto {
			n += d.Count
		}
	}
	return n
}

// netDelivered runs the lab's generator and reports what the server
// received as the throughput, not what was sent: datagrams a link drops
// are throughput lost.
func netDelivered(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	res, err := load.Run(ctx, o, nil)
	if err != nil {
		return nil, err
	}
	if res.Seconds > 0 {
		res.Bps = float64(res.Received) * float64(o.Size) * 8 / res.Seconds
		res.OpsPerSec = float64(res.Received) / res.Seconds
	}
	return res, nil
}

// netArrived is the share of the datagrams sent that the server counted.
func netArrived(m *Measurement) float64 {
	if m.Load.Ops == 0 {
		return 0
	}
	return float64(m.Load.Received) / float64(m.Load.Ops)
}

// netBacklog is the largest backlog a qdisc on the device held.
func netBacklog(m *Measurement, dev string) uint32 {
	var b uint32
	for _, q := range m.Stat.Qdiscs {
		if q.Dev == dev {
			b = max(b, q.BacklogMax)
		}
	}
	return b
}

// netShaped: a qdisc on the device held a backlog and the flow stayed
// below its rate, against a control well above it.
func netShaped(dev func(*Pair) string, kind string, rate float64) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		d := dev(p)
		backlog := netBacklog(f, d)
		return fmt.Sprintf("%s on %s (rate %s): backlog up to %d bytes; throughput %s", kind, d, units.Bits(rate), backlog, change(c, f)),
			backlog > 0 && f.Load.Bps < 1.1*rate && c.Load.Bps > 2*rate
	}
}

// netDelRoot removes the root qdisc of a device, the remedy for a shaper.
func netDelRoot(where func(*Pair) (*host.Netns, string)) func(*Pair) error {
	return func(p *Pair) error {
		ns, dev := where(p)
		_, err := ns.Run("tc", "qdisc", "del", "dev", dev, "root")
		return err
	}
}

// delSenderRoot removes the qdisc a scenario put on the sender's veth.
var delSenderRoot = netDelRoot(func(p *Pair) (*host.Netns, string) { return p.Sender, p.SenderDev })

// netIfb names a variant's ifb device after the pair.
func netIfb(p *Pair) string { return "skbi" + p.ReceiverDev[4:] }

// netTable is the nftables table the variants add, one per family.
const netTable = "skbtrace_net"

// netNft adds a table of the family to ns with one base chain (its spec
// without braces) and the rules, each one nft command line.
func netNft(ns *host.Netns, family, chain string, rules ...string) error {
	cmds := []string{
		"add table " + family + " " + netTable,
		"add chain " + family + " " + netTable + " c { " + chain + " }",
	}
	for _, r := range rules {
		cmds = append(cmds, "add rule "+family+" "+netTable+" c "+r)
	}
	for _, c := range cmds {
		if _, err := ns.Run("nft", c); err != nil {
			return err
		}
	}
	return nil
}

// netNftDelete removes what netNft added.
func netNftDelete(ns *host.Netns, family string) error {
	_, err := ns.Run("nft", "delete table "+family+" "+netTable)
	return err
}

// netRouters holds each pair's router; Scenario functions get only the pair.
var netRouters = struct {
	sync.Mutex
	of map[*Pair]*netHop
}{of: map[*Pair]*netHop{}}

// netHop is a router namespace between the pair's ends.
type netHop struct {
	ns *host.Netns
	// in faces the sender, out the receiver.
	in, out string
}

// The router's addresses: host routes inside the pair's subnet, so the
// ends keep theirs and reach each other through it.
var (
	netRouterIn  = netip.MustParsePrefix("10.200.0.254/32")
	netRouterOut = netip.MustParsePrefix("10.200.0.253/32")
)

func netRouter(p *Pair) *netHop {
	netRouters.Lock()
	defer netRouters.Unlock()
	return netRouters.of[p]
}

// netRouted is a Prepare that puts a router between the ends, then runs
// then (if set) on the routed pair.
func netRouted(then func(*Pair) error) func(*Pair) error {
	return func(p *Pair) error {
		if err := p.addRouter(); err != nil {
			return err
		}
		if then != nil {
			return then(p)
		}
		return nil
	}
}

// addRouter replaces the pair's veth by two, each from an end to a third
// namespace that forwards between them. The ends keep their devices'
// names and addresses, and reach each other by a host route through it.
// The namespace is deleted with the pair.
func (p *Pair) addRouter() error {
	ns, err := host.NewNetns(strings.TrimSuffix(p.Sender.Name, "-snd") + "-rtr")
	if err != nil {
		return err
	}
	r := &netHop{ns: ns, in: "skbf" + p.SenderDev[4:], out: "skbg" + p.SenderDev[4:]}
	netRouters.Lock()
	netRouters.of[p] = r
	netRouters.Unlock()
	p.undo = append(p.undo, func() error {
		netRouters.Lock()
		delete(netRouters.of, p)
		netRouters.Unlock()
		return ns.Delete()
	})
	if _, err := p.Sender.Run("ip", "link", "del", p.SenderDev); err != nil {
		return err
	}
	for _, l := range []struct {
		end       *host.Netns
		dev, peer string
		addr, via netip.Prefix
	}{
		{p.Sender, p.SenderDev, r.in, SenderAddr, netRouterIn},
		{p.Receiver, p.ReceiverDev, r.out, ReceiverAddr, netRouterOut},
	} {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.dev, Namespace: netlink.NsFd(l.end.Handle())},
			PeerName: l.peer, PeerNamespace: netlink.NsFd(ns.Handle())}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth pair %s/%s: %w", l.dev, l.peer, err)
		}
		if err := configure(l.end, l.dev, l.addr); err != nil {
			return err
		}
		if err := configure(ns, l.peer, l.via); err != nil {
			return err
		}
		if _, err := ns.Run("ip", "route", "add", l.addr.Addr().String()+"/32", "dev", l.peer); err != nil {
			return err
		}
	}
	for _, rt := range []struct {
		end      *host.Netns
		dev      string
		far, via netip.Addr
	}{
		{p.Sender, p.SenderDev, ReceiverAddr.Addr(), netRouterIn.Addr()},
		{p.Receiver, p.ReceiverDev, SenderAddr.Addr(), netRouterOut.Addr()},
	} {
		if _, err := rt.end.Run("ip", "route", "add", rt.far.String()+"/32", "via", rt.via.String(), "dev", rt.dev); err != nil {
			return err
		}
	}
	if err := sysctl(ns, "net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	if runtime.NumCPU() >= 2 {
		return p.TwoHosts()
	}
	return nil
}

// netRouteToReceiver adds or deletes the sender's host route to the
// receiver through the router.
func netRouteToReceiver(p *Pair, op string) error {
	_, err := p.Sender.Run("ip", "route", op, ReceiverAddr.Addr().String()+"/32", "via", netRouterIn.Addr().String(), "dev", p.SenderDev)
	return err
}

// netEthtool sets features on the sender's veth, or the receiver's.
func netEthtool(receiver bool, features ...string) func(*Pair) error {
	return func(p *Pair) error {
		ns, dev := p.Sender, p.SenderDev
		if receiver {
			ns, dev = p.Receiver, p.ReceiverDev
		}
		_, err := ns.Run("ethtool", append([]string{"-K", dev}, features...)...)
		return err
	}
}

// netSegsVerdict: the data's sending veth (the sender's, or the
// receiver's) transmits one segment per skb, against many in the control.
func netSegsVerdict(receiver bool) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		dev := p.SenderDev
		if receiver {
			dev = p.ReceiverDev
		}
		on, off := c.device(dev).Xmit.SegsPerSkb(), f.device(dev).Xmit.SegsPerSkb()
		return fmt.Sprintf("dev_xmit on %s: %.1f segments per skb, against %.1f in the control; throughput %s", dev, off, on, change(c, f)),
			on > 4 && off < 1.1
	}
}

// netGROPath has segments reach the receiver's GRO one by one through the
// router: the sender segments (TSO off, GSO on), the router forwards each
// (its veths' GRO is off), and the router's veth to the receiver has TSO
// off, without which veth does not hand packets to the peer's GRO.
func netGROPath(p *Pair) error {
	r := netRouter(p)
	for _, c := range []struct {
		ns       *host.Netns
		dev      string
		features []string
	}{
		{p.Sender, p.SenderDev, []string{"tso", "off"}},
		{r.ns, r.out, []string{"tso", "off"}},
		{p.Receiver, p.ReceiverDev, []string{"gro", "on"}},
	} {
		if _, err := c.ns.Run("ethtool", append([]string{"-K", c.dev}, c.features...)...); err != nil {
			return err
		}
	}
	return nil
}

// netGROVerdict: the receiver's veth, GRO on, merged segments in the
// control and none with the fault.
func netGROVerdict(what string) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		on, off := c.device(p.ReceiverDev).Recv.SegsPerSkb(), f.device(p.ReceiverDev).Recv.SegsPerSkb()
		return fmt.Sprintf("dev_recv on %s (GRO on): %.1f segments per skb with %s, against %.1f; throughput %s",
			p.ReceiverDev, off, what, on, change(c, f)), on > 1.5 && off < 1.2
	}
}
