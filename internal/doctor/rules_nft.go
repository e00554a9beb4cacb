package doctor

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// kindNftRule is a netfilter rule that drops or rejects, as the observer
// reads it (observe/limits_nft.go).
const kindNftRule = "nft_rule"

// NftCounterMoved opens an nft_rule limit's arithmetic where the rule has a
// counter: the packets it moved during the observation and the seconds.
const NftCounterMoved = nftMovedPrefix + "%d packets in %.1f s"

const nftMovedPrefix = "its counter moved "

// nftMoved is what a rule's counter moved, and whether it has one.
func nftMoved(l *finding.Limit) (uint64, bool) {
	rest, ok := strings.CutPrefix(l.Arithmetic, nftMovedPrefix)
	var n uint64
	if !ok {
		return 0, false
	}
	if _, err := fmt.Sscanf(rest, "%d", &n); err != nil {
		return 0, false
	}
	return n, true
}

// netfilterDrop says whether netfilter dropped the packet: its reason, or,
// on kernels before 5.17 that give none, where it was freed (nf_hook_slow
// frees what a hook's verdict dropped).
func netfilterDrop(d *Drop) bool {
	return d.Reason == "NETFILTER_DROP" || nfHookSlow(d)
}

func nfHookSlow(d *Drop) bool {
	return (d.Reason == "" || d.Reason == "NO_REASON" || d.Reason == "NOT_SPECIFIED") && strings.HasPrefix(d.Location, "nf_hook_slow")
}

// unobservedNetns keys the drops counted on a device no observed namespace
// holds.
const unobservedNetns = "\x00unobserved"

// lossByNft names the rule that dropped the flows' packets, where the drops
// are netfilter's: in the namespace where they were counted, the drop rule
// whose counter moved most, else one without a counter whose matches fit
// an observed flow. Its deletion is the remedy.
func lossByNft(ev *Evidence, f *finding.Finding) {
	counted := map[string]uint64{} // by namespace; "" where the device is not known
	var total uint64
	var oldKernel bool
	var unobservedDevs []string
	unobservedDrops := map[string]uint64{}
	var drops []Drop
	for _, d := range ev.Drops {
		if benign(&d) || !ev.suffered(&d) || !netfilterDrop(&d) {
			continue
		}
		ns := ev.deviceNetns(d.Dev)
		if ns == "" && d.Dev != "" {
			// No rule of an observed namespace can have dropped these.
			if !slices.Contains(unobservedDevs, d.Dev) {
				unobservedDevs = append(unobservedDevs, d.Dev)
			}
			unobservedDrops[d.Dev] += d.Count
			ns = unobservedNetns
		}
		counted[ns] += d.Count
		total += d.Count
		drops = append(drops, d)
		oldKernel = oldKernel || nfHookSlow(&d)
	}
	if total < minLocatedDrops {
		return
	}
	if oldKernel {
		f.Evidence = append(f.Evidence, "this kernel gives drops no reason (they arrive in 5.17): netfilter's were known by their location, nf_hook_slow, "+
			"where a hook's drop verdict frees the packet; which hook and which of its rules are not in the drop")
	}
	type candidate struct {
		l       *finding.Limit
		moved   uint64
		counter bool
	}
	var cands []candidate
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if l.Kind != kindNftRule {
			continue
		}
		// A router's rules the observer read at the other end of a veth
		// name its devices: the drops counted on them are its.
		_, here := counted[l.Where.Netns]
		if !here && counted[""] == 0 && !slices.ContainsFunc(unobservedDevs, func(d string) bool { return slices.Contains(l.Applies.Devices, d) }) {
			continue
		}
		// A rule whose matches exclude the flows dropped others' packets,
		// whatever its counter says.
		if !ev.appliesToFlow(l) {
			continue
		}
		moved, counter := nftMoved(l)
		cands = append(cands, candidate{l, moved, counter})
	}
	if len(cands) == 0 && lossByPolicy(ev, f, counted, drops) {
		return
	}
	if len(cands) == 0 {
		var spaces []string
		for ns := range counted {
			if ns != "" && ns != unobservedNetns {
				spaces = append(spaces, ns)
			}
		}
		sort.Strings(spaces)
		where := "in the observed namespaces"
		if len(spaces) > 0 {
			where = "in netns " + strings.Join(spaces, ", ")
		}
		line := fmt.Sprintf("no nftables rule %s counted a drop or matches the flows: the rule may be iptables-legacy's (iptables -L -v -n) or a chain's drop policy", where)
		if len(unobservedDevs) > 0 {
			// A router between the ends drops on its own devices.
			line = fmt.Sprintf("the drops were counted on %s, which no observed namespace holds: the rule is in that device's namespace "+
				"(a router between the ends?); observe it too (doctor --netns) to have its rule named", strings.Join(unobservedDevs, ", "))
		}
		f.Evidence = append(f.Evidence, line)
		return
	}
	// A rule whose counter moved dropped, or met, the packets; one with no
	// counter only may have.
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].counter != cands[j].counter {
			return cands[i].counter
		}
		return cands[i].moved > cands[j].moved
	})
	l := *cands[0].l
	ns := l.Where.Netns
	in := counted[ns]
	if in == 0 {
		in = counted[""]
	}
	at := "in netns " + orNone(ns)
	var onDevs []string
	var onCount uint64
	for _, d := range unobservedDevs {
		if slices.Contains(l.Applies.Devices, d) {
			onDevs, onCount = append(onDevs, d), onCount+unobservedDrops[d]
		}
	}
	switch {
	case counted[ns] == 0 && onCount > 0:
		in, at = onCount, fmt.Sprintf("on %s, in netns %s", strings.Join(onDevs, ", "), ns)
	case counted[ns] == 0:
		// Output hooks drop before a device is chosen: no namespace to read.
		at = "on no device (an output hook's, before routing picks one)"
	}
	l.Arithmetic = strings.TrimPrefix(fmt.Sprintf("%s; skb_drop [NETFILTER_DROP] counted %d of the flows' packets %s", l.Arithmetic, in, at), "; ")
	f.Title = fmt.Sprintf("packets are dropped by the nftables rule \"%s\" (%s, netns %s)", nftRuleText(&l), l.Where.Object, orNone(ns))
	f.Evidence = append(f.Evidence, l.Describe(), "how: "+l.Arithmetic)
	for _, c := range cands[1:] {
		f.Evidence = append(f.Evidence, "also: "+c.l.Describe()+"; "+c.l.Arithmetic)
	}
	if !cands[0].counter {
		f.Evidence = append(f.Evidence, "no drop rule's counter moved in that namespace: the rule is named because its matches fit the flow; "+
			"add a counter to it to see what it drops (nft list ruleset then shows its packets)")
	}
	f.Explanation += " A netfilter rule drops the flow's packets: the rule, not the network, is the loss's cause; deleting it (or narrowing its matches) ends the loss."
	f.Remedy = append(l.Remedy(), "or keep the rule and narrow its matches: "+nsPrefix(ns)+"nft -a list chain "+nftChainOf(&l))
	f.Limit = &l
}

// kindNftPolicy is a base chain whose policy is drop.
const kindNftPolicy = "nft_chain_policy"

// lossByPolicy names a base chain whose drop policy dropped the flows'
// packets, where no rule did: a chain of a namespace where the drops were
// counted, whose policy applies to an observed flow. No counter counts a
// policy's drops; the chain's rules that match the flow (an accept under a
// rate limit) are in its arithmetic. The remedy accepts the dropped
// packets, as the last one's addresses and port name them, ahead of the
// chain's rules.
func lossByPolicy(ev *Evidence, f *finding.Finding, counted map[string]uint64, drops []Drop) bool {
	var l *finding.Limit
	for i := range ev.Limits {
		c := &ev.Limits[i]
		if c.Kind == kindNftPolicy && counted[c.Where.Netns] > 0 && ev.appliesToFlow(c) {
			l = c
			break
		}
	}
	if l == nil {
		return false
	}
	var last *Drop
	for i := range drops {
		if d := &drops[i]; ev.deviceNetns(d.Dev) == l.Where.Netns && d.Src.IsValid() && (last == nil || d.Count > last.Count) {
			last = d
		}
	}
	lim := *l
	ns := lim.Where.Netns
	lim.Arithmetic = fmt.Sprintf("%s; skb_drop [NETFILTER_DROP] counted %d of the flows' packets in netns %s", lim.Arithmetic, counted[ns], ns)
	var family, table, chain string
	fmt.Sscanf(lim.Where.Object, "table %s %s chain %s", &family, &table, &chain)
	lim.Undo = nil
	if last != nil {
		ipKw := "ip"
		if !last.Src.Addr().Unmap().Is4() {
			ipKw = "ip6"
		}
		l4 := "tcp"
		if strings.HasSuffix(last.Protocol, "/udp") {
			l4 = "udp"
		}
		argv := []string{"nft", "insert", "rule", family, table, chain,
			ipKw, "saddr", last.Src.Addr().Unmap().String(), ipKw, "daddr", last.Dst.Addr().Unmap().String(), l4, "dport", fmt.Sprint(last.Dst.Port()), "accept"}
		if family != "inet" && family != "ip" && family != "ip6" {
			argv = nil // a netdev or bridge chain: no command is sure to fit
		}
		if argv != nil {
			cmdNs := ns
			if nsPrefix(ns) == "" {
				cmdNs = "" // the observer's own namespace: no ip netns exec
			}
			lim.Undo = append(lim.Undo, finding.Command(cmdNs, argv...))
		}
	}
	lim.Undo = append(lim.Undo, finding.Change("or accept the flow in the rule that matches it, or raise its rate: %snft -a list chain %s %s %s", nsPrefix(ns), family, table, chain))
	f.Title = fmt.Sprintf("packets are dropped by the drop policy of the nftables chain %s (netns %s): no rule accepted them", lim.Where.Object, ns)
	f.Evidence = append(f.Evidence, lim.Describe(), "how: "+lim.Arithmetic)
	f.Explanation += " A netfilter chain whose policy is drop drops what none of its rules accepted: a rule that accepts the flow under a limit leaves the rest to the policy."
	f.Remedy = lim.Remedy()
	f.Limit = &lim
	return true
}

// appliesToFlow says whether a limit names one of the observed flows.
func (ev *Evidence) appliesToFlow(l *finding.Limit) bool {
	for _, fl := range l.Applies.Flows {
		for i := range ev.Flows {
			if ev.Flows[i].Local.String()+" "+ev.Flows[i].Peer.String() == fl {
				return true
			}
		}
	}
	return false
}

// nftRuleText is the rule's text without the table comment the observer
// adds to its value.
func nftRuleText(l *finding.Limit) string {
	s, _, _ := strings.Cut(l.Value, " (table comment ")
	return s
}

// nftChainOf is "family table chain" of a rule limit's place.
func nftChainOf(l *finding.Limit) string {
	var family, table, chain string
	fmt.Sscanf(l.Where.Object, "table %s %s chain %s", &family, &table, &chain)
	return family + " " + table + " " + chain
}

// packet-loss names the rule that dropped where the drops are netfilter's,
// wrapped so that rules_loss.go stays as it is.
func init() { wrapLossWarning(lossByNft) }

// wrapLossWarning has name refine each packet-loss warning: the nftables
// rule, the qdisc's filter or queue that dropped. A finding one of them
// named keeps its limit.
func wrapLossWarning(name func(*Evidence, *finding.Finding)) {
	for i := range Rules {
		if Rules[i].ID == "packet-loss" {
			check := Rules[i].Check
			Rules[i].Check = func(ev *Evidence) []finding.Finding {
				fs := check(ev)
				for i := range fs {
					if fs[i].ID == "packet-loss" && fs[i].Severity >= finding.Warning && fs[i].Limit == nil {
						name(ev, &fs[i])
					}
				}
				return fs
			}
		}
	}
}
