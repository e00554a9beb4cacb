package doctor

import (
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The nft fixtures are the doctor's evidence of fault runs of the lab's
// packet-loss scenario, its variant packet-loss-nft-firewall-prerouting and
// the healthy noise-nft-counting-rules (internal/lab/variants_nft.go;
// skbtrace lab run NAME --doctor --calibrate --json), on a 2-CPU VM shared
// with other work.

func nftTop(t *testing.T, ev *Evidence) *finding.Finding {
	t.Helper()
	top := Diagnose(ev).Top(finding.Warning)
	if top == nil || top.ID != "packet-loss" {
		t.Fatalf("top finding %v, want packet-loss", top)
	}
	return top
}

// The lab's packet-loss: a rule without a counter in the receiver's input
// hook; the drops were counted there and the rule's matches fit the flow.
func TestNftRuleWithoutCounterNamed(t *testing.T) {
	top := nftTop(t, load(t, "nft/packet-loss.json"))
	l := top.Limit
	if l == nil || l.Kind != kindNftRule {
		t.Fatalf("packet-loss names no rule: %q, limit %+v", top.Title, l)
	}
	const ns = "skbtrace-27738-1-rcv"
	if want := "ip netns exec " + ns + " nft delete rule inet skbtrace_lab in handle 2"; top.Remedy[0] != want || l.Undo[0].Netns != ns {
		t.Errorf("first remedy %q (netns %q), want %q", top.Remedy[0], l.Undo[0].Netns, want)
	}
	if !strings.Contains(top.Title, `"tcp dport 5201 numgen random mod 1000 < 10 drop"`) || !strings.Contains(top.Title, "hook input") {
		t.Errorf("title %q names neither the rule nor its hook", top.Title)
	}
	if !slices.Contains(top.Evidence, l.Describe()) {
		t.Errorf("evidence lacks the rule's description: %q", top.Evidence)
	}
	if !strings.Contains(l.Arithmetic, "counted 342 of the flows' packets in netns "+ns) || !strings.Contains(l.Arithmetic, "no counter") {
		t.Errorf("arithmetic %q", l.Arithmetic)
	}
	if l.SetBy != nil {
		t.Errorf("a table named skbtrace_lab was given an owner: %+v", l.SetBy)
	}
}

// A firewall's rule with a counter, in a chain its prerouting chain jumps
// to: the counter's move and the table's owner are in the evidence.
func TestNftCountedRuleNamedWithOwner(t *testing.T) {
	top := nftTop(t, load(t, "nft/packet-loss-nft-firewall-prerouting.json"))
	l := top.Limit
	if l == nil || l.Kind != kindNftRule {
		t.Fatalf("packet-loss names no rule: %q", top.Title)
	}
	if l.SetBy == nil || l.SetBy.Unit != "firewalld.service" {
		t.Errorf("set by %+v, want firewalld.service", l.SetBy)
	}
	if want := "nft delete rule ip firewalld filter_PRE_public handle 4"; !strings.HasSuffix(top.Remedy[0], want) {
		t.Errorf("first remedy %q, want ... %s", top.Remedy[0], want)
	}
	if !strings.HasPrefix(l.Arithmetic, "its counter moved 563 packets") || !strings.Contains(l.Arithmetic, "counted 562") {
		t.Errorf("arithmetic %q", l.Arithmetic)
	}
	if !strings.Contains(l.Where.Object, "hook prerouting via chain filter_PREROUTING") {
		t.Errorf("place %q", l.Where.Object)
	}
	for _, e := range top.Evidence {
		if strings.Contains(e, "no drop rule's counter moved") {
			t.Errorf("evidence says no counter moved: %q", e)
		}
	}
}

// Of several rules, the one whose counter moved most is named, a counted
// one before one without a counter; each other is in the evidence. One
// whose matches fit no flow (port 22's) dropped others' packets, however
// much its counter moved.
func TestNftRuleThatMovedMostNamed(t *testing.T) {
	ev := load(t, "nft/packet-loss-nft-firewall-prerouting.json")
	i := slices.IndexFunc(ev.Limits, func(l finding.Limit) bool { return l.Kind == kindNftRule })
	counted := ev.Limits[i]
	more := counted
	more.Value, more.Where.Object = "tcp dport 5201 counter drop", strings.Replace(counted.Where.Object, "handle 4", "handle 9", 1)
	more.Arithmetic = strings.Replace(counted.Arithmetic, "moved 563", "moved 900", 1)
	less := counted
	less.Value, less.Where.Object = "tcp dport 5201 counter reject", strings.Replace(counted.Where.Object, "handle 4", "handle 7", 1)
	less.Arithmetic = strings.Replace(counted.Arithmetic, "moved 563", "moved 5", 1)
	uncounted := counted
	uncounted.Value, uncounted.Arithmetic = "tcp dport 5201 drop", "the rule has no counter"
	other := counted
	other.Value, other.Where.Object = "tcp dport 22 counter drop", strings.Replace(counted.Where.Object, "handle 4", "handle 11", 1)
	other.Arithmetic, other.Applies.Flows = strings.Replace(counted.Arithmetic, "moved 563", "moved 5000", 1), nil
	ev.Limits = append(ev.Limits, less, uncounted, more, other)
	top := nftTop(t, ev)
	if top.Limit == nil || top.Limit.Value != more.Value {
		t.Fatalf("named %+v, want the rule that moved 900", top.Limit)
	}
	for _, l := range []finding.Limit{counted, less, uncounted} {
		if !slices.ContainsFunc(top.Evidence, func(e string) bool { return strings.HasPrefix(e, "also: "+l.Describe()) }) {
			t.Errorf("evidence lacks %q", l.Value)
		}
	}
	if slices.ContainsFunc(top.Evidence, func(e string) bool { return strings.Contains(e, other.Value) }) {
		t.Errorf("a rule whose matches fit no flow is named in the evidence: %q", top.Evidence)
	}
}

// Before 5.17 a drop has no reason: netfilter's are known by nf_hook_slow,
// the rule is still named and the evidence says what the kernel lacks.
func TestNftRuleNamedWithoutDropReasons(t *testing.T) {
	ev := load(t, "nft/packet-loss.json")
	for i := range ev.Drops {
		if ev.Drops[i].Reason == "NETFILTER_DROP" {
			ev.Drops[i].Reason, ev.Drops[i].Location = "NO_REASON", "nf_hook_slow+0x9e"
		}
	}
	top := nftTop(t, ev)
	if top.Limit == nil || top.Limit.Kind != kindNftRule {
		t.Fatalf("packet-loss names no rule without drop reasons: %q", top.Title)
	}
	if !slices.ContainsFunc(top.Evidence, func(e string) bool { return strings.Contains(e, "5.17") && strings.Contains(e, "nf_hook_slow") }) {
		t.Errorf("evidence does not say the kernel gives no reasons: %q", top.Evidence)
	}
}

// A rule in another namespace than the one where the drops were counted,
// or none at all, is not named: the evidence says no rule was found.
func TestNftRuleElsewhereNotNamed(t *testing.T) {
	for name, edit := range map[string]func(*finding.Limit){
		"other namespace": func(l *finding.Limit) { l.Where.Netns = "skbtrace-27738-1-snd" },
		"no limit":        func(l *finding.Limit) { l.Kind = "something_else" },
	} {
		ev := load(t, "nft/packet-loss.json")
		for i := range ev.Limits {
			if ev.Limits[i].Kind == kindNftRule {
				edit(&ev.Limits[i])
			}
		}
		top := nftTop(t, ev)
		if top.Limit != nil {
			t.Errorf("%s: named %+v", name, top.Limit)
		}
		if !slices.ContainsFunc(top.Evidence, func(e string) bool { return strings.HasPrefix(e, "no nftables rule in netns skbtrace-27738-1-rcv") }) {
			t.Errorf("%s: evidence does not say no rule was found: %q", name, top.Evidence)
		}
	}
}

// Drops on a device no observed namespace holds (a router's between the
// ends) name no rule: the evidence says where they were counted.
func TestNftDropsOnUnobservedDevice(t *testing.T) {
	ev := load(t, "nft/packet-loss.json")
	for i := range ev.Drops {
		if ev.Drops[i].Reason == "NETFILTER_DROP" {
			ev.Drops[i].Dev = "skbf27738-1"
		}
	}
	top := nftTop(t, ev)
	if top.Limit != nil {
		t.Errorf("named %+v for drops in a namespace the doctor does not observe", top.Limit)
	}
	if !slices.ContainsFunc(top.Evidence, func(e string) bool {
		return strings.HasPrefix(e, "the drops were counted on skbf27738-1, which no observed namespace holds")
	}) {
		t.Errorf("evidence does not say where the drops were counted: %q", top.Evidence)
	}
}

// Counting rules that accept, beside a drop rule for another port whose
// counter never moved: no limit, no warning.
func TestNftCountingRulesQuiet(t *testing.T) {
	ev := load(t, "nft/noise-nft-counting-rules.json")
	for _, l := range ev.Limits {
		if l.Kind == kindNftRule {
			t.Errorf("the observer read a limit from rules that dropped nothing: %+v", l)
		}
	}
	for _, f := range Diagnose(ev).Findings {
		if f.Severity >= finding.Warning {
			t.Errorf("warning on counting rules: %s: %s", f.ID, f.Title)
		}
	}
}

// A firewall whose input policy drops what its rate-limited accept lets
// over (the doctor watching iperf3 between two namespaces, hnft-s and
// hnft-r, the receiver's chain: policy drop, tcp dport 5201 limit rate
// 8000/second accept; the host busy with other work, which ranks a
// saturated CPU first): packet-loss names the chain's policy, no rule, and
// its remedy accepts the dropped packets ahead of the limit. Applied as
// printed it took the stream from 1.09 to 2.62 Gbit/s on that busy host.
func TestNftPolicyDropNamed(t *testing.T) {
	ev := load(t, "nft/policy-drop-rate-limit.json")
	var loss *finding.Finding
	for _, f := range Diagnose(ev).Findings {
		if f.ID == "packet-loss" {
			loss = &f
		}
	}
	if loss == nil || loss.Severity < finding.Warning {
		t.Fatalf("no packet-loss warning: %+v", loss)
	}
	l := loss.Limit
	if l == nil || l.Kind != kindNftPolicy {
		t.Fatalf("packet-loss names no chain policy: %q, limit %+v", loss.Title, l)
	}
	if want := "ip netns exec hnft-r nft insert rule inet hnft_fw input ip saddr 10.251.0.1 ip daddr 10.251.0.2 tcp dport 5201 accept"; loss.Remedy[0] != want || l.Undo[0].Netns != "hnft-r" {
		t.Errorf("first remedy %q (netns %q), want %q", loss.Remedy[0], l.Undo[0].Netns, want)
	}
	if !strings.Contains(l.Arithmetic, "limit rate 8000/second") || !strings.Contains(l.Arithmetic, "counted 94 of the flows' packets in netns hnft-r") {
		t.Errorf("arithmetic %q", l.Arithmetic)
	}
}

// The router between the ends is not observed, but the observer read its
// ruleset at the other end of the sender's veth: the drops counted on the
// router's device are its forward chain's rule, deleted there. (The
// fixture's source line is the observer's as it now reads, rewritten from
// the run's, which said the router's ruleset was read twice; it was read
// once, at the end.)
func TestNftRouterRuleNamed(t *testing.T) {
	top := nftTop(t, load(t, "nft/packet-loss-router-forward.json"))
	l := top.Limit
	if l == nil || l.Kind != kindNftRule || l.Where.Netns != "skbtrace-27891-1-rtr" {
		t.Fatalf("packet-loss names no router rule: %q, limit %+v", top.Title, l)
	}
	if want := "ip netns exec skbtrace-27891-1-rtr nft delete rule inet skbtrace_net c handle 2"; top.Remedy[0] != want {
		t.Errorf("first remedy %q, want %q", top.Remedy[0], want)
	}
	if !strings.Contains(l.Arithmetic, "counted 287 of the flows' packets on skbf27891-1, in netns skbtrace-27891-1-rtr") {
		t.Errorf("arithmetic %q", l.Arithmetic)
	}
}
