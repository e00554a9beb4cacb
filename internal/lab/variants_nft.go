package lab

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/host"
)

func init() {
	Variants = append(Variants, nftVariants...)
	Noise = append(Noise, nftNoise...)
}

// nftFirewallTable is named as firewalld names its table, so that the
// doctor's owner of the rule (the table's name) is exercised.
const nftFirewallTable = "firewalld"

// nftVariants drop by a netfilter rule of a firewall's shape: another
// family, hook and chain than the lab's packet-loss, a counter that counts
// the drops, and a rule in a regular chain a base chain jumps to.
var nftVariants = []*Scenario{
	{
		Name: "packet-loss-nft-firewall-prerouting",
		Mechanism: "a firewall-shaped nftables ruleset in the receiver's namespace (ip family, table firewalld, a prerouting base chain " +
			"jumping to a zone chain) whose rule drops 2 % of the segments to the lab's port, its counter after the random match counting each drop",
		Fault:    "table ip firewalld in the receiver's namespace, chain filter_PRE_public (from filter_PREROUTING, hook prerouting): tcp dport PORT numgen random mod 100 < 2 counter drop (control: none)",
		Expect:   "packet-loss",
		Families: []string{"tcp_conn", "tcp_retrans", "tcp_cong", "skb_drop"},
		Load:     bulk,
		Inject: func(p *Pair) error {
			return nftScript(p.Receiver, fmt.Sprintf(`table ip %s {
	comment "firewalld zone public (skbtrace lab)"
	chain filter_PREROUTING {
		type filter hook prerouting priority -140; policy accept;
		jump filter_PRE_public
	}
	chain filter_PRE_public {
		tcp dport %d numgen random mod 100 < 2 counter drop
	}
}
`, nftFirewallTable, Port))
		},
		// The scenario's own fix; the doctor's deletes the rule by handle.
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("nft", "delete", "table", "ip", nftFirewallTable)
			return err
		},
		// The recording samples retransmissions in the doctor's default
		// mode: the drops and the throughput they cost are the signal (2 %
		// loss costs a veth stream most of its rate).
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops := f.drops("NETFILTER_DROP")
			return fmt.Sprintf("%d skb_drop [NETFILTER_DROP] in the receiver (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, f.dropLocation(p.ReceiverDev), c.drops("NETFILTER_DROP"), netRetrans(f), netRetrans(c), change(c, f)),
				drops > 0 && c.drops("NETFILTER_DROP") == 0 && f.Load.Bps < 0.7*c.Load.Bps
		},
	},
}

// nftNoise is their healthy control: rules that count and accept the flow,
// and a drop rule for another port that never matches it.
var nftNoise = []*Scenario{
	{
		Name: "noise-nft-counting-rules",
		Mechanism: "a ruleset on the receiver's input whose counters count the stream (accept rules) beside a drop rule, " +
			"with a counter, for a port the stream does not use",
		Fault:    "table inet skbtrace_count in the receiver's namespace, hook input: tcp dport OTHER counter drop, tcp dport PORT counter accept, counter accept (control: none)",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     bulk,
		Inject: func(p *Pair) error {
			return nftScript(p.Receiver, fmt.Sprintf(`table inet skbtrace_count {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport %d counter drop
		tcp dport %d counter accept
		counter accept
	}
}
`, Port+1, Port))
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			counted := nftCounted(p.Receiver, "inet", "skbtrace_count", fmt.Sprintf("tcp dport %d counter", Port))
			return fmt.Sprintf("the accept rule counted %d packets of the stream; %d skb_drop [NETFILTER_DROP]", counted, f.drops("NETFILTER_DROP")),
				counted > 0 && f.drops("NETFILTER_DROP") == 0
		}),
	},
}

// nftScript loads a ruleset into ns in one nft transaction.
func nftScript(ns *host.Netns, script string) error {
	cmd := "nft -f - <<'EOF'\n" + script + "EOF\n"
	if _, err := ns.Run("sh", "-c", cmd); err != nil {
		return fmt.Errorf("loading an nft ruleset: %w", err)
	}
	return nil
}

var nftPackets = regexp.MustCompile(`counter packets (\d+)`)

// nftCounted is the packets of the first rule in a table that starts with
// prefix; 0 where it cannot be read.
func nftCounted(ns *host.Netns, family, table, prefix string) uint64 {
	out, err := ns.Run("nft", "list", "table", family, table)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, prefix) {
			if m := nftPackets.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				return n
			}
		}
	}
	return 0
}
