package observe

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// readNfdFixture reads a ruleset nft printed in a namespace
// (testdata/nft: a loopback connection to port 5201 dropped by a rule in a
// chain a base chain jumps to, between the two readings).
func readNfdFixture(t *testing.T, name string, at time.Time) *nfdRuleset {
	t.Helper()
	js, err := os.ReadFile(filepath.Join("testdata", "nft", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join("testdata", "nft", name+".txt"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := parseNftRuleset(js, text)
	if err != nil {
		t.Fatal(err)
	}
	rs.at = at
	return rs
}

func TestNftLimitsCounterMoved(t *testing.T) {
	t0 := time.Unix(1000, 0)
	before, after := readNfdFixture(t, "before", t0), readNfdFixture(t, "after", t0.Add(2*time.Second))
	flow := doctor.Flow{Local: netip.MustParseAddrPort("127.0.0.1:40000"), Peer: netip.MustParseAddrPort("127.0.0.1:5201")}
	limits := nfdLimits("hnft-x", before, after, []doctor.Flow{flow})
	if len(limits) != 1 {
		t.Fatalf("got %d limits, want the one rule whose counter moved: %+v", len(limits), limits)
	}
	l := limits[0]
	if l.Kind != KindNftRule || l.Where.Netns != "hnft-x" {
		t.Errorf("kind %q netns %q", l.Kind, l.Where.Netns)
	}
	if want := "ip daddr 127.0.0.1 tcp dport 5201 counter numgen random mod 100 < 99 drop"; !strings.HasPrefix(l.Value, want) {
		t.Errorf("value %q, want the rule's text %q", l.Value, want)
	}
	if !strings.Contains(l.Value, `table comment "firewalld zone public"`) {
		t.Errorf("value %q lacks the table's comment", l.Value)
	}
	if want := "table inet firewalld chain filter_OUT_ZONES handle 5 (hook output via chain filter_OUTPUT, priority 0)"; l.Where.Object != want {
		t.Errorf("object %q, want %q", l.Where.Object, want)
	}
	if l.SetBy == nil || l.SetBy.Unit != "firewalld.service" {
		t.Errorf("set by %+v, want firewalld.service", l.SetBy)
	}
	if want := "ip netns exec hnft-x nft delete rule inet firewalld filter_OUT_ZONES handle 5"; len(l.Undo) != 1 || l.Undo[0].Text != want {
		t.Errorf("undo %+v, want %q", l.Undo, want)
	}
	if !strings.Contains(l.Arithmetic, "moved 3 packets in 2.0 s") || !strings.Contains(l.Arithmetic, "1 more match(es)") {
		t.Errorf("arithmetic %q", l.Arithmetic)
	}
	if !slices.Equal(l.Applies.Flows, []string{"127.0.0.1:40000 127.0.0.1:5201"}) {
		t.Errorf("applies to %v", l.Applies.Flows)
	}
}

// A drop rule without a counter is a limit only on the flows its matches
// fit: the ip-family prerouting rule on port 5202 fits an IPv4 flow to that
// port, either way round, and neither an IPv6 one nor one to another port.
func TestNftLimitsUncountedRuleFitsTheFlow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	rs := readNfdFixture(t, "after", t0)
	to5202 := doctor.Flow{Local: netip.MustParseAddrPort("10.0.0.2:5202"), Peer: netip.MustParseAddrPort("10.0.0.1:33000")}
	v6 := doctor.Flow{Local: netip.MustParseAddrPort("[fd00::1]:33000"), Peer: netip.MustParseAddrPort("[fd00::2]:5202")}
	other := doctor.Flow{Local: netip.MustParseAddrPort("10.0.0.1:33000"), Peer: netip.MustParseAddrPort("10.0.0.2:5203")}
	var got []string
	for _, l := range nfdLimits("", rs, rs, []doctor.Flow{to5202, v6, other}) {
		got = append(got, l.Where.Object+" "+strings.Join(l.Applies.Flows, ","))
		if l.SetBy != nil && strings.Contains(l.Where.Object, "ip filter") {
			t.Errorf("a table named filter was given an owner: %+v", l.SetBy)
		}
	}
	want := []string{"table ip filter chain PREROUTING handle 2 (hook prerouting, priority 0) 10.0.0.2:5202 10.0.0.1:33000"}
	if !slices.Equal(got, want) {
		t.Errorf("limits %q, want %q", got, want)
	}
}

func TestNfdMatchValues(t *testing.T) {
	p := nfdPacket{src: netip.MustParseAddrPort("10.99.3.4:1000"), dst: netip.MustParseAddrPort("10.0.0.1:53"), l4: "udp"}
	for _, c := range []struct {
		rule string
		fits bool
	}{
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":{"prefix":{"addr":"10.99.0.0","len":16}}}}]`, true},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"saddr"}},"right":{"prefix":{"addr":"10.98.0.0","len":16}}}}]`, false},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"udp","field":"dport"}},"right":{"set":[53,5353]}}}]`, true},
		{`[{"match":{"op":"!=","left":{"payload":{"protocol":"udp","field":"dport"}},"right":{"set":[53,5353]}}}]`, false},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"udp","field":"sport"}},"right":{"range":[900,1100]}}}]`, true},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"tcp","field":"dport"}},"right":53}}]`, false},
		{`[{"match":{"op":"==","left":{"meta":{"key":"l4proto"}},"right":"udp"}}]`, true},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"ip","field":"daddr"}},"right":"@allowed"}}]`, true},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"icmp","field":"type"}},"right":"destination-unreachable"}}]`, false},
		{`[{"match":{"op":"==","left":{"payload":{"protocol":"th","field":"dport"}},"right":53}}]`, true},
	} {
		js := `{"nftables":[{"chain":{"family":"inet","table":"t","name":"c","hook":"input","prio":0,"policy":"accept"}},` +
			`{"rule":{"family":"inet","table":"t","chain":"c","handle":2,"expr":` + strings.TrimSuffix(c.rule, "]") + `,{"drop":null}]}}]}`
		rs, err := parseNftRuleset([]byte(js), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs.rules) != 1 {
			t.Fatalf("%s: %d rules", c.rule, len(rs.rules))
		}
		if got := rs.rules[0].fits(p); got != c.fits {
			t.Errorf("%s: fits %v, want %v", c.rule, got, c.fits)
		}
	}
}

// nft 1.0's JSON leaves a netdev chain's device out: the place names it
// from the text, one device or several.
func TestNftLimitsNetdevChainDevice(t *testing.T) {
	rs := readNfdFixture(t, "netdev", time.Unix(1000, 0))
	flow := doctor.Flow{Local: netip.MustParseAddrPort("10.0.0.1:33000"), Peer: netip.MustParseAddrPort("10.0.0.2:5201")}
	var got []string
	for _, l := range nfdLimits("", rs, rs, []doctor.Flow{flow}) {
		got = append(got, l.Where.Object)
	}
	want := []string{
		"table netdev t chain c handle 2 (hook egress device hnftv0, priority 0)",
		"table netdev t chain i handle 4 (hook ingress device hnftv0,hnftv1, priority 0)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("places %q, want %q", got, want)
	}
}

// A base chain whose policy is drop is a limit on the flows of its family,
// with the chain's rules that match them: the rate-limited accept, not the
// ICMP or port-22 ones. The ip6 table's chain does not hold an IPv4 flow,
// nor does a chain whose policy accepts.
func TestNftPolicyDropLimit(t *testing.T) {
	rs := readNfdFixture(t, "policy", time.Unix(1000, 0))
	flow := doctor.Flow{Local: netip.MustParseAddrPort("10.251.0.1:53938"), Peer: netip.MustParseAddrPort("10.251.0.2:5201")}
	limits := nfdLimits("hnft-r", rs, rs, []doctor.Flow{flow})
	if len(limits) != 1 {
		t.Fatalf("got %d limits, want the inet input chain's policy: %+v", len(limits), limits)
	}
	l := limits[0]
	if l.Kind != KindNftPolicy || l.Value != "policy drop" || l.Where.Object != "table inet hnft_fw chain input (hook input, priority 0)" {
		t.Errorf("limit %s %q at %q", l.Kind, l.Value, l.Where.Object)
	}
	if !strings.Contains(l.Arithmetic, "tcp dport 5201 limit rate 8000/second burst 200 packets accept") ||
		strings.Contains(l.Arithmetic, "icmp") || strings.Contains(l.Arithmetic, "dport 22") {
		t.Errorf("arithmetic %q, want the rate-limited accept alone among the port rules", l.Arithmetic)
	}
	if !slices.Equal(l.Applies.Flows, []string{"10.251.0.1:53938 10.251.0.2:5201"}) {
		t.Errorf("applies to %v", l.Applies.Flows)
	}
}

// A ruleset read once (a router's, found at the end) says what a counter
// holds, not what it moved: the 9999 rule's zero is left out.
func TestNftLimitsReadOnce(t *testing.T) {
	after := readNfdFixture(t, "after", time.Unix(1000, 0))
	flow := doctor.Flow{Local: netip.MustParseAddrPort("10.9.9.1:40000"), Peer: netip.MustParseAddrPort("10.9.9.2:5300")}
	var got []string
	for _, l := range nfdLimits("r", nil, after, []doctor.Flow{flow}) {
		got = append(got, l.Where.Object+": "+l.Arithmetic)
	}
	want := []string{"table inet firewalld chain filter_OUT_ZONES handle 5 (hook output via chain filter_OUTPUT, priority 0): " +
		"its counter reads 3 packets (read once, at the end of the observation: since it was set, not during it)"}
	if !slices.Equal(got, want) {
		t.Errorf("limits %q, want %q", got, want)
	}
}
