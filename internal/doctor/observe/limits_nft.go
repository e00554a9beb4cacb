package observe

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
)

// KindNftRule is a netfilter rule that drops or rejects packets, and
// KindNftPolicy a base chain whose policy drops what no rule accepted
// (docs/findings.md#limits).
const (
	KindNftRule   = "nft_rule"
	KindNftPolicy = "nft_chain_policy"
)

// nfdSource says how the rules are read: nft's JSON gives their matches,
// verdicts and counters as data, its text (-a) the rule as a user writes
// it and the tables' comments, which the JSON of nft 1.0 leaves out.
// github.com/google/nftables reads the same netlink messages but renders no
// rule as text: the remedy must print the rule the user will recognise.
const nfdSource = "nft -j list ruleset and nft -a list ruleset, at the start and the end of the observation"

// nfdRuleset is one namespace's ruleset at one moment.
type nfdRuleset struct {
	at     time.Time
	chains map[nfdChainKey]*nfdChain
	rules  []*nfdRule
	// comments are the tables' comments, by "family table".
	comments map[string]string
}

type nfdChainKey struct{ family, table, chain string }

type nfdChain struct {
	nfdChainKey
	hook, dev, policy string
	prio              int
	base              bool
	// jumps are the chains its rules jump or go to.
	jumps []string
}

type nfdRule struct {
	nfdChainKey
	handle  int
	verdict string // drop, reject, accept, or "" (none, or another)
	// counted says the rule has a counter; packets is its value, and
	// matchesAfter the matches between it and the verdict (a counter
	// counts what reached it, not only what the rule dropped).
	counted      bool
	packets      uint64
	matchesAfter int
	matches      []nfdMatch
	text         string
}

// nfdMatch is one of a rule's matches on a packet's addresses, ports or
// protocol; others (numgen, meta, ct ...) cannot be judged against a flow.
type nfdMatch struct {
	op           string
	proto, field string // ip saddr, tcp dport, meta l4proto ...
	right        json.RawMessage
}

// readNftRulesets reads every watched namespace's ruleset; a namespace
// whose ruleset cannot be read becomes a note, nft missing one note.
func readNftRulesets(spaces []*watched, notes *[]string) map[string]*nfdRuleset {
	if _, err := exec.LookPath("nft"); err != nil {
		*notes = append(*notes, "nft is not installed: the netfilter rules that may drop the flows' packets are not read")
		return nil
	}
	out := map[string]*nfdRuleset{}
	for _, w := range spaces {
		if w.gone {
			continue
		}
		rs, err := readNftRuleset(w)
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: reading its nftables ruleset: %v", w.name, err))
			continue
		}
		out[w.name] = rs
	}
	return out
}

// output runs a command in the watched namespace (nft, tc) and returns
// what it printed; its error carries the command and its stderr.
func (w *watched) output(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	if w.ns != nil {
		return w.ns.Output(cmd)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return b, nil
}

func readNftRuleset(w *watched) (*nfdRuleset, error) {
	run := func(args ...string) ([]byte, error) { return w.output("nft", args...) }
	at := time.Now()
	j, err := run("-j", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	text, err := run("-a", "list", "ruleset")
	if err != nil {
		return nil, err
	}
	rs, err := parseNftRuleset(j, text)
	if err != nil {
		return nil, err
	}
	rs.at = at
	return rs, nil
}

// parseNftRuleset joins nft's JSON and its text by the rules' handles.
func parseNftRuleset(js, text []byte) (*nfdRuleset, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, fmt.Errorf("reading nft's JSON: %w", err)
	}
	texts, comments, devices := parseNftText(text)
	rs := &nfdRuleset{chains: map[nfdChainKey]*nfdChain{}, comments: comments}
	for _, obj := range doc.Nftables {
		if raw, ok := obj["chain"]; ok {
			var c struct {
				Family, Table, Name, Type, Hook, Policy, Dev string
				Prio                                         int
			}
			if err := json.Unmarshal(raw, &c); err != nil {
				return nil, fmt.Errorf("reading an nft chain: %w", err)
			}
			k := nfdChainKey{c.Family, c.Table, c.Name}
			// nft 1.0's JSON leaves a netdev chain's device out; its text has it.
			rs.chains[k] = &nfdChain{nfdChainKey: k, hook: c.Hook, dev: cmp.Or(c.Dev, devices[nfdHandleKey(k, 0)]), policy: c.Policy, prio: c.Prio, base: c.Hook != ""}
		}
		if raw, ok := obj["rule"]; ok {
			var r struct {
				Family, Table, Chain string
				Handle               int
				Expr                 []map[string]json.RawMessage
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, fmt.Errorf("reading an nft rule: %w", err)
			}
			k := nfdChainKey{r.Family, r.Table, r.Chain}
			rule := &nfdRule{nfdChainKey: k, handle: r.Handle, text: texts[nfdHandleKey(k, r.Handle)]}
			for _, e := range r.Expr {
				switch {
				case e["counter"] != nil:
					var c struct{ Packets uint64 }
					if json.Unmarshal(e["counter"], &c) == nil {
						rule.counted, rule.packets, rule.matchesAfter = true, c.Packets, 0
					}
				case e["match"] != nil:
					rule.matchesAfter++
					if m, ok := parseNftMatch(e["match"]); ok {
						rule.matches = append(rule.matches, m)
					}
				case e["accept"] != nil:
					rule.verdict = "accept"
				case e["drop"] != nil:
					rule.verdict = "drop"
				case e["reject"] != nil:
					rule.verdict = "reject"
				case e["jump"] != nil || e["goto"] != nil:
					var t struct{ Target string }
					if json.Unmarshal(cmpRaw(e["jump"], e["goto"]), &t) == nil && rs.chains[k] != nil {
						rs.chains[k].jumps = append(rs.chains[k].jumps, t.Target)
					}
				}
			}
			rs.rules = append(rs.rules, rule)
		}
	}
	return rs, nil
}

func cmpRaw(a, b json.RawMessage) json.RawMessage {
	if a != nil {
		return a
	}
	return b
}

func nfdHandleKey(k nfdChainKey, handle int) string {
	return fmt.Sprintf("%s %s %s %d", k.family, k.table, k.chain, handle)
}

var (
	nfdTableLine   = regexp.MustCompile(`^table (\S+) (\S+) \{`)
	nfdChainLine   = regexp.MustCompile(`^chain (\S+) \{`)
	nfdHandleTail  = regexp.MustCompile(`\s*# handle (\d+)$`)
	nfdCounterVals = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	nfdComment     = regexp.MustCompile(`^comment "(.*)"$`)
	nfdDevice      = regexp.MustCompile(`hook \S+ (?:device "?([^";\s]+)"?|devices = \{ ([^}]*) \})`)
)

// parseNftText reads nft -a's text: each rule as written (its counter's
// values left out: they change), by handle, the tables' comments and the
// netdev chains' devices (by handle 0).
func parseNftText(text []byte) (rules, comments, devices map[string]string) {
	rules, comments, devices = map[string]string{}, map[string]string{}, map[string]string{}
	var family, table, chain string
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := nfdTableLine.FindStringSubmatch(line); m != nil {
			family, table, chain = m[1], m[2], ""
			continue
		}
		if m := nfdChainLine.FindStringSubmatch(line); m != nil {
			chain = m[1]
			continue
		}
		if m := nfdComment.FindStringSubmatch(line); m != nil && chain == "" && table != "" {
			comments[family+" "+table] = m[1]
			continue
		}
		if m := nfdDevice.FindStringSubmatch(line); m != nil && chain != "" {
			devices[nfdHandleKey(nfdChainKey{family, table, chain}, 0)] = strings.ReplaceAll(cmp.Or(m[1], strings.TrimSpace(m[2])), " ", "")
			continue
		}
		m := nfdHandleTail.FindStringSubmatchIndex(line)
		if m == nil || chain == "" {
			continue
		}
		h, _ := strconv.Atoi(line[m[2]:m[3]])
		rules[nfdHandleKey(nfdChainKey{family, table, chain}, h)] = nfdCounterVals.ReplaceAllString(line[:m[0]], "counter")
	}
	return rules, comments, devices
}

func parseNftMatch(raw json.RawMessage) (nfdMatch, bool) {
	var m struct {
		Op    string
		Left  map[string]json.RawMessage
		Right json.RawMessage
	}
	if json.Unmarshal(raw, &m) != nil {
		return nfdMatch{}, false
	}
	if p := m.Left["payload"]; p != nil {
		var pl struct{ Protocol, Field string }
		if json.Unmarshal(p, &pl) != nil || pl.Protocol == "" {
			return nfdMatch{}, false
		}
		switch pl.Field {
		case "saddr", "daddr", "sport", "dport", "protocol", "nexthdr":
			return nfdMatch{op: m.Op, proto: pl.Protocol, field: pl.Field, right: m.Right}, true
		}
		// Any field of a header (icmp type, sctp vtag ...) matches only
		// packets that carry that header.
		return nfdMatch{op: m.Op, proto: pl.Protocol}, true
	}
	if p := m.Left["meta"]; p != nil {
		var mk struct{ Key string }
		if json.Unmarshal(p, &mk) == nil && (mk.Key == "l4proto" || mk.Key == "nfproto") {
			return nfdMatch{op: m.Op, proto: "meta", field: mk.Key, right: m.Right}, true
		}
	}
	return nfdMatch{}, false
}

// nfdPacket is one direction of a flow's packets.
type nfdPacket struct {
	src, dst netip.AddrPort
	l4       string
}

// nfdAnyTransport are the headers a packet of any transport has, or that
// say nothing of its transport.
var nfdAnyTransport = map[string]bool{"ip": true, "ip6": true, "th": true, "meta": true, "ether": true, "vlan": true}

// fits says whether a rule's matches on addresses, ports and protocol
// can all hold for the packet; matches it cannot judge do not exclude it.
func (r *nfdRule) fits(p nfdPacket) bool {
	v4 := p.src.Addr().Unmap().Is4()
	if r.family == "ip" && !v4 || r.family == "ip6" && v4 {
		return false
	}
	for _, m := range r.matches {
		var value any
		switch {
		case m.proto == "ip" && !v4, m.proto == "ip6" && v4:
			return false
		case !nfdAnyTransport[m.proto] && m.proto != p.l4:
			return false
		case m.field == "saddr":
			value = p.src.Addr().Unmap()
		case m.field == "daddr":
			value = p.dst.Addr().Unmap()
		case m.field == "sport":
			value = int(p.src.Port())
		case m.field == "dport":
			value = int(p.dst.Port())
		case m.field == "protocol" || m.field == "nexthdr" || m.field == "l4proto":
			value = p.l4
		case m.field == "nfproto":
			value = map[bool]string{true: "ipv4", false: "ipv6"}[v4]
		}
		in, known := nfdValueIn(value, m.right)
		if !known {
			continue
		}
		switch m.op {
		case "==", "in":
			if !in {
				return false
			}
		case "!=":
			if in {
				return false
			}
		}
	}
	return true
}

// nfdValueIn says whether value is what right names (a number, a name, an
// address, a prefix, a range or a set of them), and whether it could tell.
func nfdValueIn(value any, right json.RawMessage) (in, known bool) {
	var set struct{ Set []json.RawMessage }
	if json.Unmarshal(right, &set) == nil && set.Set != nil {
		for _, e := range set.Set {
			in, ok := nfdValueIn(value, e)
			if !ok {
				return false, false
			}
			if in {
				return true, true
			}
		}
		return false, true
	}
	var rng struct{ Range []json.RawMessage }
	if json.Unmarshal(right, &rng) == nil && len(rng.Range) == 2 {
		switch v := value.(type) {
		case int:
			var lo, hi int
			if json.Unmarshal(rng.Range[0], &lo) != nil || json.Unmarshal(rng.Range[1], &hi) != nil {
				return false, false
			}
			return v >= lo && v <= hi, true
		case netip.Addr:
			var lo, hi string
			if json.Unmarshal(rng.Range[0], &lo) != nil || json.Unmarshal(rng.Range[1], &hi) != nil {
				return false, false
			}
			a, e1 := netip.ParseAddr(lo)
			b, e2 := netip.ParseAddr(hi)
			if e1 != nil || e2 != nil {
				return false, false
			}
			return v.Compare(a) >= 0 && v.Compare(b) <= 0, true
		}
		return false, false
	}
	var prefix struct {
		Prefix *struct {
			Addr string
			Len  int
		}
	}
	if json.Unmarshal(right, &prefix) == nil && prefix.Prefix != nil {
		v, ok := value.(netip.Addr)
		p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", prefix.Prefix.Addr, prefix.Prefix.Len))
		if !ok || err != nil {
			return false, false
		}
		return p.Contains(v), true
	}
	switch v := value.(type) {
	case int:
		var n int
		if json.Unmarshal(right, &n) != nil {
			return false, false
		}
		return v == n, true
	case netip.Addr:
		var s string
		if json.Unmarshal(right, &s) != nil {
			return false, false
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return false, false // a named set or a variable
		}
		return v == a.Unmap(), true
	case string:
		var s string
		if json.Unmarshal(right, &s) != nil {
			return false, false
		}
		return v == s, true
	}
	return false, false
}

// hookOf is where a chain runs: its own hook, or that of a base chain that
// jumps or goes to it.
func (rs *nfdRuleset) hookOf(k nfdChainKey) *nfdChain {
	seen := map[nfdChainKey]bool{}
	var find func(k nfdChainKey) *nfdChain
	find = func(k nfdChainKey) *nfdChain {
		c := rs.chains[k]
		if c == nil || seen[k] {
			return nil
		}
		if c.base {
			return c
		}
		seen[k] = true
		for ck, from := range rs.chains {
			if ck.family == k.family && ck.table == k.table && slices.Contains(from.jumps, k.chain) {
				if b := find(ck); b != nil {
					return b
				}
			}
		}
		return nil
	}
	return find(k)
}

// nfdLimits compares a namespace's rulesets at the start and the end: a
// drop or reject rule whose counter moved, or one with no counter whose
// matches fit an observed flow, is a limit on the flows it fits.
func nfdLimits(netns string, before, after *nfdRuleset, flows []doctor.Flow) []finding.Limit {
	if after == nil {
		return nil
	}
	start := map[string]*nfdRule{}
	if before != nil {
		for _, r := range before.rules {
			start[nfdHandleKey(r.nfdChainKey, r.handle)] = r
		}
	}
	seconds := 0.0
	if before != nil {
		seconds = after.at.Sub(before.at).Seconds()
	}
	var out []finding.Limit
	for _, r := range after.rules {
		if r.verdict != "drop" && r.verdict != "reject" {
			continue
		}
		var fit []string
		for _, f := range flows {
			for _, p := range []nfdPacket{{f.Local, f.Peer, "tcp"}, {f.Peer, f.Local, "tcp"}} {
				if r.fits(p) {
					fit = append(fit, fmt.Sprintf("%s %s", f.Local, f.Peer))
					break
				}
			}
		}
		var arithmetic string
		switch {
		case r.counted && before == nil:
			// Read once: what the counter holds, not what it moved.
			if r.packets == 0 && len(fit) == 0 {
				continue
			}
			arithmetic = fmt.Sprintf("its counter reads %d packets (read once, at the end of the observation: since it was set, not during it)", r.packets)
		case r.counted:
			var moved uint64
			if b := start[nfdHandleKey(r.nfdChainKey, r.handle)]; b != nil && b.counted && b.packets <= r.packets {
				moved = r.packets - b.packets
			} else if b == nil {
				moved = r.packets // added during the observation
			}
			if moved == 0 {
				continue
			}
			arithmetic = fmt.Sprintf(doctor.NftCounterMoved, moved, seconds)
			if r.matchesAfter > 0 {
				arithmetic += fmt.Sprintf(" (it counts what reached it: %d more match(es) stand between it and the %s)", r.matchesAfter, r.verdict)
			}
		case len(fit) > 0:
			arithmetic = "the rule has no counter: what it dropped is not counted; its matches fit the flow"
		default:
			continue
		}
		out = append(out, nfdLimit(netns, after, r, fit, arithmetic))
	}
	return append(out, nfdPolicyLimits(netns, after, flows)...)
}

// nfdPolicyLimits are the base chains whose policy is drop, with the
// chain's rules that match the observed flows: what such a chain drops is
// what none of them accepted (a "limit rate ... accept" over its rate),
// and no counter counts it.
func nfdPolicyLimits(netns string, rs *nfdRuleset, flows []doctor.Flow) []finding.Limit {
	var out []finding.Limit
	for _, c := range rs.chains {
		if !c.base || c.policy != "drop" {
			continue
		}
		var fit, rules []string
		for _, f := range flows {
			for _, p := range []nfdPacket{{f.Local, f.Peer, "tcp"}, {f.Peer, f.Local, "tcp"}} {
				if (c.family == "ip" || c.family == "ip6") && (c.family == "ip") != p.src.Addr().Unmap().Is4() {
					continue
				}
				if !slices.Contains(fit, fmt.Sprintf("%s %s", f.Local, f.Peer)) {
					fit = append(fit, fmt.Sprintf("%s %s", f.Local, f.Peer))
				}
				for _, r := range rs.rules {
					if r.nfdChainKey == c.nfdChainKey && r.fits(p) && r.text != "" && !slices.Contains(rules, r.text) {
						rules = append(rules, r.text)
					}
				}
			}
		}
		if len(fit) == 0 {
			continue
		}
		how := "no rule of the chain matches the flows: the policy drops all their packets"
		if len(rules) > 0 {
			how = "the chain's rules that match the flows (what they do not accept, the policy drops): " + strings.Join(rules, "; ")
		}
		hook := "hook " + c.hook
		if c.dev != "" {
			hook += " device " + c.dev
		}
		comment := rs.comments[c.family+" "+c.table]
		out = append(out, finding.Limit{Kind: KindNftPolicy, Value: "policy drop",
			Where: finding.Place{Layer: finding.LayerRule, Netns: netns,
				Object: fmt.Sprintf("table %s %s chain %s (%s, priority %d)", c.family, c.table, c.chain, hook, c.prio)},
			SetBy:      nfdOwner(c.table, c.chain, comment),
			Applies:    finding.Scope{Flows: fit},
			Arithmetic: how,
			Source:     nfdSource})
	}
	slices.SortFunc(out, func(a, b finding.Limit) int { return strings.Compare(a.Where.Object, b.Where.Object) })
	return out
}

func nfdLimit(netns string, rs *nfdRuleset, r *nfdRule, fit []string, arithmetic string) finding.Limit {
	hook := "regular chain, reached from no base chain"
	if c := rs.hookOf(r.nfdChainKey); c != nil {
		hook = "hook " + c.hook
		if c.dev != "" {
			hook += " device " + c.dev
		}
		if c.chain != r.chain {
			hook += " via chain " + c.chain
		}
		hook += fmt.Sprintf(", priority %d", c.prio)
	}
	value := r.text
	if value == "" {
		value = r.verdict + " (its text was not read)"
	}
	comment := rs.comments[r.family+" "+r.table]
	if comment != "" {
		value += fmt.Sprintf(" (table comment %q)", comment)
	}
	return finding.Limit{Kind: KindNftRule, Value: value,
		Where: finding.Place{Layer: finding.LayerRule, Netns: netns,
			Object: fmt.Sprintf("table %s %s chain %s handle %d (%s)", r.family, r.table, r.chain, r.handle, hook)},
		SetBy:      nfdOwner(r.table, r.chain, comment),
		Applies:    finding.Scope{Flows: fit},
		Undo:       []finding.Action{finding.Command(commandNetns(netns), "nft", "delete", "rule", r.family, r.table, r.chain, "handle", strconv.Itoa(r.handle))},
		Arithmetic: arithmetic,
		Source:     nfdSource}
}

// nfdOwners are the programs that name their tables or chains after
// themselves, and who they are: nft rules carry no PID.
var nfdOwners = []struct {
	prefix string
	owner  finding.Owner
}{
	{"firewalld", finding.Owner{Unit: "firewalld.service"}},
	{"kube-", finding.Owner{Container: "kube-proxy"}},
	{"docker", finding.Owner{Unit: "docker.service"}},
	{"libvirt", finding.Owner{Unit: "libvirtd.service"}},
	{"f2b-", finding.Owner{Unit: "fail2ban.service"}},
	{"fail2ban", finding.Owner{Unit: "fail2ban.service"}},
	{"crowdsec", finding.Owner{Unit: "crowdsec-firewall-bouncer.service"}},
	{"cilium", finding.Owner{Container: "cilium-agent"}},
	{"netavark", finding.Owner{Unit: "podman (netavark)"}},
}

// nfdOwner is who the table's name, its chain's or its comment says set
// the rule, nil where none says.
func nfdOwner(table, chain, comment string) *finding.Owner {
	for _, s := range []string{table, chain, comment} {
		s = strings.ToLower(s)
		for _, o := range nfdOwners {
			if strings.HasPrefix(s, o.prefix) || strings.Contains(s, " "+o.prefix) {
				owner := o.owner
				return &owner
			}
		}
	}
	return nil
}

// nfdWatch reads the rulesets at the start of an observation.
type nfdWatch struct {
	before map[string]*nfdRuleset
}

func startNftWatch(spaces []*watched, notes *[]string) *nfdWatch {
	return &nfdWatch{before: readNftRulesets(spaces, notes)}
}

// finish reads them again and returns the rules that dropped the flows'
// packets, or may have.
func (n *nfdWatch) finish(spaces []*watched, ev *doctor.Evidence, notes *[]string) []finding.Limit {
	if n == nil || n.before == nil {
		return nil
	}
	after := readNftRulesets(spaces, notes)
	var out []finding.Limit
	for _, w := range spaces {
		if a := after[w.name]; a != nil {
			out = append(out, nfdLimits(w.name, n.before[w.name], a, ev.Flows)...)
		}
	}
	// A router between the ends that is not observed (a named namespace at
	// the other end of an observed veth) is found only now, from the
	// devices read: its ruleset is read once, and its limits name its
	// devices, where the drops are counted.
	next, via := neighbours(spaces, ev)
	for _, w := range next {
		rs, err := readNftRuleset(w)
		var devs []string
		if err == nil {
			err = w.do(func() error {
				links, err := netlink.LinkList()
				for _, l := range links {
					devs = append(devs, l.Attrs().Name)
				}
				return err
			})
		}
		w.ns.Close()
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s (at the other end of %s): reading its nftables ruleset: %v", w.name, via[w.name], err))
			continue
		}
		for _, l := range nfdLimits(w.name, nil, rs, ev.Flows) {
			l.Applies.Devices = devs
			l.Source = "nft -j list ruleset and nft -a list ruleset, read once at the end of the observation, in the namespace at the other end of " + via[w.name]
			out = append(out, l)
		}
	}
	return out
}
