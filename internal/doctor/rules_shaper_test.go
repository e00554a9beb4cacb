package doctor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The lab's rate-shaped (tbf 200mbit on the sender's veth): the tbf is
// named, and the first remedy deletes it where it is, runnable as printed.
func TestRateShapedNamesTheTbf(t *testing.T) {
	rep := Diagnose(load(t, "sock/rate-shaped.json"))
	if got := top(rep); got != "rate-shaped" {
		t.Fatalf("top %q, want rate-shaped; findings %v", got, ids(rep.Findings))
	}
	f := findingNamed(t, rep, "rate-shaped")
	if f.Limit == nil || f.Limit.Kind != KindTBFRate || !strings.HasPrefix(f.Limit.Value, "rate 200.00 Mbit/s burst ") {
		t.Fatalf("limit %+v, want the tbf", f.Limit)
	}
	a := f.Limit.Undo[0]
	if strings.Join(a.Argv[:4], " ") != "tc qdisc del dev" || a.Argv[len(a.Argv)-1] != "root" || a.Netns == "" {
		t.Errorf("first action %+v", a)
	}
	if f.Remedy[0] != a.Text {
		t.Errorf("remedy %q", f.Remedy)
	}
}

// rate-shaped-tbf-one-packet-bucket (500mbit, burst 1540: the flow stays
// far below the rate): the tbf is deleted first, and then its bucket may be
// raised to two TSO skbs.
func TestRateShapedBucketRaisedSecond(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "sock/rate-tbf-one-packet-bucket.json")), "rate-shaped")
	if f.Limit == nil || len(f.Limit.Undo) < 2 {
		t.Fatalf("limit %+v", f.Limit)
	}
	if !strings.Contains(f.Limit.Undo[0].Text, "tc qdisc del dev") ||
		!strings.Contains(f.Limit.Undo[1].Text, "tc qdisc change dev") || !strings.Contains(f.Limit.Undo[1].Text, "tbf rate 500000000bit burst 131072 latency 20ms") {
		t.Errorf("undo %q", f.Limit.Remedy())
	}
	if !strings.Contains(f.Limit.Arithmetic, "two 64 KiB TSO skbs") {
		t.Errorf("arithmetic %q", f.Limit.Arithmetic)
	}
}

// rate-shaped-htb-filter: the class is named with the u32 filter that
// sends the lab's port to it, and the htb is deleted on its device. Its
// impact comes from what the flow would carry without it (on a veth the
// CPU bounds it: here the busiest CPU was 6 % busy at 286 Mbit/s), not the
// fixed half of before.
func TestRateShapedNamesTheHtbClassAndFilter(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "sock/rate-htb-filter.json")), "rate-shaped")
	if f.Limit == nil || f.Limit.Kind != KindHTBClassRate || !strings.Contains(f.Limit.Value, "u32 filter pref") ||
		!strings.HasSuffix(f.Limit.Where.Object, "handle 1:10") {
		t.Fatalf("limit %+v", f.Limit)
	}
	if a := f.Limit.Undo[0]; len(a.Argv) == 0 || a.Argv[len(a.Argv)-1] != "root" || a.Argv[2] != "del" {
		t.Errorf("first action %+v", a)
	}
	if f.Impact != maxShaperImpact || !strings.Contains(f.ImpactText, "without it (the flows' rate over CPU ") {
		t.Errorf("impact %.2f (%s)", f.Impact, f.ImpactText)
	}
}

// rate-shaped-ifb-ingress: the tbf sits on an ifb the receiver's ingress
// redirects to; the first remedy deletes it in the receiver's namespace,
// the second the redirect.
func TestRateShapedNamesTheIfbAndItsRedirect(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "sock/rate-ifb-ingress.json")), "rate-shaped")
	if f.Limit == nil || f.Limit.Kind != KindTBFRate || !strings.Contains(f.Limit.Value, "fed by the ingress of") || len(f.Limit.Undo) != 2 {
		t.Fatalf("limit %+v", f.Limit)
	}
	dev := f.Limit.Applies.Devices[0]
	if a := f.Limit.Undo[0]; !strings.HasSuffix(a.Text, "tc qdisc del dev "+dev+" root") || !strings.HasSuffix(a.Netns, "-rcv") {
		t.Errorf("first action %+v", a)
	}
	if a := f.Limit.Undo[1]; !strings.HasSuffix(a.Text, "tc qdisc del dev "+f.Limit.Applies.Devices[1]+" ingress") {
		t.Errorf("second action %+v", a)
	}
}

// The lab's qdisc-bloat (a router's tbf of 200 Mbit/s with an 8 MB queue,
// observed): the tbf's queue limit is named, and the first remedy changes
// it in the router's namespace to 5 ms at its rate, keeping rate and bucket.
func TestQdiscBloatNamesTheTbfLimit(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "sock/qdisc-bloat.json")), "qdisc-bloat")
	if f.Limit == nil || f.Limit.Kind != KindTBFLimit || !strings.HasPrefix(f.Limit.Value, "limit ") {
		t.Fatalf("limit %+v", f.Limit)
	}
	a := f.Limit.Undo[0]
	if !strings.Contains(a.Text, "tc qdisc change dev ") || !strings.HasSuffix(a.Text, "tbf rate 200000000bit burst 65525 limit 125000") || a.Netns == "" {
		t.Errorf("first action %+v", a)
	}
}

// rate-shaped-router-tbf: the tbf sits on a router between the ends that
// the doctor does not observe. The observer reads the namespace at the
// other end of the sender's veth, and the queue beyond this host is put to
// the one shaper there, deleted in the router's namespace. With a second
// shaper there, neither is named: both are listed.
func TestRateShapedNamesTheUnobservedRoutersTbf(t *testing.T) {
	ev := load(t, "sock/rate-router-tbf.json")
	f := findingNamed(t, Diagnose(ev), "rate-shaped")
	if f.Limit == nil || f.Limit.Kind != KindTBFRate || !strings.HasSuffix(f.Limit.Where.Netns, "-rtr") {
		t.Fatalf("limit %+v", f.Limit)
	}
	if a := f.Limit.Undo[0]; a.Netns != f.Limit.Where.Netns || strings.Join(a.Argv[:3], " ") != "tc qdisc del" || f.Remedy[0] != a.Text {
		t.Errorf("first action %+v, remedy %q", a, f.Remedy)
	}
	var second *Evidence
	if err := json.Unmarshal(mustJSON(t, ev), &second); err != nil {
		t.Fatal(err)
	}
	for _, l := range ev.Limits {
		if l.Kind == KindTBFRate && strings.HasSuffix(l.Where.Netns, "-rtr") {
			other := l
			other.Where.Object = ShaperObject("skbtwo", "1:")
			second.Limits = append(second.Limits, other)
		}
	}
	g := findingNamed(t, Diagnose(second), "rate-shaped")
	if g.Limit != nil || !strings.Contains(strings.Join(g.Evidence, "\n"), "one of several") {
		t.Errorf("two shapers on the router: limit %+v, evidence %q", g.Limit, g.Evidence)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A sender capped by its own socket's SO_MAX_PACING_RATE (the lab's
// rate-so-max-pacing-rate, 1 Gbit/s over veth): rate-shaped names the
// option, set by the application, and dropping it is the remedy. A socket
// with the same cap that its pacing did not hold (its rate half the cap,
// held elsewhere) is not called paced.
func TestPacingCapNamed(t *testing.T) {
	ev := load(t, "sock/rate-so-max-pacing-rate.json")
	f := findingNamed(t, Diagnose(ev), "rate-shaped")
	if f.Limit == nil || f.Limit.Kind != kindMaxPacingRate || f.Limit.SetBy == nil || f.Severity < finding.Warning {
		t.Fatalf("%q: limit %+v, want so_max_pacing_rate set by the sender", f.Title, f.Limit)
	}
	if !strings.Contains(f.Remedy[0], "drop its setsockopt(SO_MAX_PACING_RATE, 125000000)") {
		t.Errorf("first remedy %q, want the application's option dropped", f.Remedy[0])
	}
	for i := range ev.Flows {
		ev.Flows[i].LimitShares = map[string]float64{"app": 1}
	}
	for _, g := range Diagnose(ev).Findings {
		if g.Limit != nil && g.Limit.Kind == kindMaxPacingRate {
			t.Errorf("a sender its pacing did not hold is called paced: %q", g.Title)
		}
	}
}
