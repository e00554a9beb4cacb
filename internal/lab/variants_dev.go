package lab

import (
	"fmt"
	"strings"
)

func init() {
	Variants = append(Variants, devVariants...)
	Noise = append(Noise, devNoise...)
}

// devVariants build device-side faults whose cause the doctor names by
// its provenance: here an nftables rule in a router namespace the doctor
// does not observe, found at the other end of the receiver's veth.
var devVariants = []*Scenario{
	{
		Name: "gro-blocked-router-ttl",
		Mechanism: "no tunnel, no IP IDs, no DSCP: a router between the ends gives every other segment another TTL " +
			"(nftables), and GRO merges only packets whose TTL matches",
		Fault: "a router namespace forwards single segments (sender TSO off); its forward chain marks every other " +
			"segment and sets TTL 33 on the marked; the receiver's veth has GRO on (control: the same chain marking, one TTL)",
		Expect:   "gro-blocked",
		Families: []string{"tcp_conn", "dev_recv"},
		Load:     bulk,
		// The marking rule, whose cost the forwarding CPU pays per packet,
		// is in both runs: the rewrite is the fault, and deleting it, as
		// the doctor prints, leaves the control (without the chain in the
		// control, the remedy restored 76-79 %).
		Prepare: netRouted(func(p *Pair) error {
			if err := netGROPath(p); err != nil {
				return err
			}
			return netNft(netRouter(p).ns, "ip", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d meta mark set numgen inc mod 2", Port))
		}),
		Inject: func(p *Pair) error {
			_, err := netRouter(p).ns.Run("nft", fmt.Sprintf("add rule ip %s c tcp dport %d meta mark 1 ip ttl set 33", netTable, Port))
			return err
		},
		Fix: func(p *Pair) error {
			if err := netNftDelete(netRouter(p).ns, "ip"); err != nil {
				return err
			}
			return netNft(netRouter(p).ns, "ip", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d meta mark set numgen inc mod 2", Port))
		},
		Verdict: netGROVerdict("alternating TTL"),
	},
}

// devNoise are the healthy controls of devVariants.
var devNoise = []*Scenario{
	{
		Name: "noise-router-dscp-uniform",
		Mechanism: "a router namespace between the ends whose forward chain rewrites the DSCP of every segment alike: " +
			"a header rewrite on the path that keeps every packet of the flow mergeable",
		Fault:    "a router namespace forwards the stream; its forward chain sets DSCP CS1 on every segment of the lab's port",
		Families: []string{"tcp_conn", "dev_recv"},
		Load:     bulk,
		Prepare:  netRouted(nil),
		Inject: func(p *Pair) error {
			return netNft(netRouter(p).ns, "ip", "type filter hook forward priority 0 ;",
				fmt.Sprintf("tcp dport %d counter ip dscp set cs1", Port))
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			out, err := netRouter(p).ns.Run("nft", "list", "table", "ip", netTable)
			// The rule's counter moved: the stream passed the rewrite.
			passed := err == nil && strings.Contains(out, "dscp set cs1") && !strings.Contains(out, "counter packets 0 ")
			return fmt.Sprintf("the router's rule rewrote the stream's DSCP: %v", passed), passed
		}),
	},
}
