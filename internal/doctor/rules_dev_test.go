package doctor

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The dev fixtures are the doctor's evidence of the fault runs of the lab's
// scenarios and variants named like them (skbtrace lab run NAME --doctor
// --calibrate --json, .doctor.evidence), on a 2-CPU VM shared with other
// work. Each top finding names the limit that made the fault, and its first
// remedy is that limit's undo, a command in the namespace that holds it:
// the one the lab's calibration applied, restoring the throughput.
func TestDeviceLimitsNamed(t *testing.T) {
	for _, c := range []struct {
		fixture, id, kind string
		remedy            []string // in the first remedy
		netns             string   // the suffix of the undo's namespace
	}{
		{"offload-disabled", "offload-disabled", kindSegOff, []string{"ethtool -K skbs", " tso on gso on"}, "-snd"},
		{"offload-disabled-sg-off", "offload-disabled", kindSegOff, []string{"ethtool -K skbs", " sg on tso on gso on"}, "-snd"},
		{"offload-tx-csum-off", "offload-disabled", kindSegOff, []string{"ethtool -K skbs", " tx on ", "tso on gso on"}, "-snd"},
		{"mtu-mismatch", "mtu-mismatch", kindRouteAdvmss, []string{"ip route change 10.200.0.0/24 dev skbr"}, "-rcv"},
		{"mtu-mismatch-veth-ends-udp", "mtu-mismatch", kindMTU, []string{"ip link set dev skbs", " mtu 1500"}, "-snd"},
		{"mtu-mismatch-pmtu-blackhole", "mtu-mismatch", kindNftICMPDrop, []string{"nft delete rule ip skbtrace_net c handle "}, "-rtr"},
		{"gro-blocked", "gro-blocked", kindXDP, []string{"bpftool link detach id "}, ""},
		{"gro-blocked-router-ipid", "gro-blocked", kindNftRewrite, []string{"nft delete rule ip skbtrace_net c handle "}, "-rtr"},
		{"gro-blocked-router-dscp", "gro-blocked", kindNftRewrite, []string{"nft delete rule ip skbtrace_net c handle "}, "-rtr"},
		{"gro-blocked-router-ttl", "gro-blocked", kindNftRewrite, []string{"nft delete rule ip skbtrace_net c handle "}, "-rtr"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			rep := Diagnose(load(t, "dev/"+c.fixture+".json"))
			top := rep.Top(finding.Warning)
			if top == nil || top.ID != c.id {
				t.Fatalf("top finding %v, want %s; findings %v", top, c.id, ids(rep.Findings))
			}
			if top.Limit == nil || top.Limit.Kind != c.kind {
				t.Fatalf("%q names limit %+v, want a %s", top.Title, top.Limit, c.kind)
			}
			first := top.Limit.Undo[0]
			for _, want := range c.remedy {
				if !strings.Contains(top.Remedy[0], want) {
					t.Errorf("first remedy %q, want it to hold %q", top.Remedy[0], want)
				}
			}
			if top.Remedy[0] != first.Text || first.Argv == nil || !strings.HasSuffix(first.Netns, c.netns) || c.netns == "" && first.Netns != "" {
				t.Errorf("first remedy %q is not the limit's command in a namespace ending %q: %+v", top.Remedy[0], c.netns, first)
			}
			if !strings.Contains(strings.Join(top.Evidence, "\n"), top.Limit.Describe()) {
				t.Errorf("the evidence does not name the limit: %q", top.Evidence)
			}
		})
	}
}

// The limit the rule chooses is the one that explains the fault: in
// mtu-mismatch both the receiver's advmss and the sender's MTU 9000 (above
// its peer's 1500) make the packets too big; the advmss is what advertises
// the larger MSS, and the sender's MTU is the control's too.
func TestMTUMismatchChoosesAdvmss(t *testing.T) {
	ev := load(t, "dev/mtu-mismatch.json")
	var mtu bool
	for _, l := range ev.Limits {
		mtu = mtu || l.Kind == kindMTU
	}
	if !mtu {
		t.Fatal("the fixture's sender MTU above its peer's was not read")
	}
	top := Diagnose(ev).Top(finding.Warning)
	if top == nil || top.Limit == nil || top.Limit.Kind != kindRouteAdvmss || !strings.Contains(top.Limit.Arithmetic, "above the receiving device's MTU 1500") {
		t.Fatalf("top %+v", top)
	}
}

// A CPU saturated by a TSO that GSO backs and by GRO blocked behind a
// router's rewrite raises both to its stake: they then rank by their own
// cost, the blocked GRO first. (The run's CPUs were saturated: raising
// only the first cause listed ranked the TSO finding first at 48 %.)
func TestSaturatedCPURaisesEveryCause(t *testing.T) {
	rep := Diagnose(load(t, "dev/gro-blocked-router-dscp-busy.json"))
	if top := rep.Top(finding.Warning); top == nil || top.ID != "gro-blocked" {
		t.Errorf("top %v, want gro-blocked; findings %v", top, ids(rep.Findings))
	}
	var gro, tso *finding.Finding
	for i := range rep.Findings {
		f := &rep.Findings[i]
		switch {
		case f.ID == "gro-blocked":
			gro = f
		case f.ID == "offload-disabled" && strings.HasPrefix(f.Title, "TSO is off"):
			tso = f
		}
	}
	if gro == nil || tso == nil {
		t.Fatalf("findings %v", ids(rep.Findings))
	}
	if gro.Impact < tso.Impact {
		t.Errorf("gro-blocked at %.2f below the TSO finding's %.2f", gro.Impact, tso.Impact)
	}
}

// A router that rewrites every segment's DSCP alike leaves the flow
// mergeable: the rule is read, and named by nothing. (The run shared the
// host with other helpers' compilers and a QEMU guest, which the doctor
// rightly calls a saturated CPU: nothing else warns.)
func TestUniformRewriteNoWarning(t *testing.T) {
	ev := load(t, "dev/noise-router-dscp-uniform.json")
	var read bool
	for _, l := range ev.Limits {
		read = read || l.Kind == kindNftRewrite
	}
	if !read {
		t.Fatal("the router's rewrite rule was not read")
	}
	for _, f := range Diagnose(ev).Findings {
		if f.Severity >= finding.Warning && f.ID != "cpu-saturated" || f.Limit != nil && f.Limit.Kind == kindNftRewrite {
			t.Errorf("%s (%s): %s", f.ID, f.Severity, f.Title)
		}
	}
}

// Data sent from the receiver's namespace through a veth with TSO and GSO
// off reaches the other end, whose GRO is off as veth's is by default, as
// single segments: the sending end's segmentation is the cause (the
// scenario's fault), GRO off only its consequence.
func TestVethGROOffBehindPeerSegmentation(t *testing.T) {
	rep := Diagnose(load(t, "dev/offload-disabled-reverse-iperf3.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.Limit == nil || top.Limit.Kind != kindSegOff || !strings.HasSuffix(top.Limit.Where.Netns, "-rcv") {
		t.Fatalf("top %+v, want the receiver's namespace's segmentation off", top)
	}
	for _, f := range rep.Findings {
		if strings.HasPrefix(f.Title, "GRO is off") && f.Severity >= finding.Warning {
			t.Errorf("%q at %s beside its peer's segmentation off", f.Title, f.Severity)
		}
	}
}

// Datagrams beyond the smaller MTU die whole, so the share of the larger
// end's packets the link dropped is what the fault costs: the lab's
// mtu-mismatch-veth-ends-udp lost all its datagrams (its fix gained 100 %)
// where the retransmission formula, with no TCP flow, said 50 %.
func TestMTUMismatchImpactIsTheDroppedShare(t *testing.T) {
	f := findingOf(Diagnose(load(t, "dev/mtu-mismatch-veth-ends-udp.json")), "mtu-mismatch")
	if f == nil {
		t.Fatal("no mtu-mismatch finding")
	}
	if f.Impact < 0.95 || !strings.Contains(f.ImpactText, "the link dropped") {
		t.Errorf("impact %.2f %q, want the dropped share (nearly all)", f.Impact, f.ImpactText)
	}
}

// A rewrite on a forwarding hop blocks the receiver's GRO, but the hop
// handles each packet with the rule or without: merging again at the
// receiver saves its share only (the router variants gained 5-25 %, a
// receiver behind its own XDP program 36-42 %).
func TestGROBlockedBehindAHopCostsTheReceiversShare(t *testing.T) {
	for _, c := range []struct {
		fixture  string
		min, max float64
	}{
		{"gro-blocked-router-ttl", 0.15, 0.3}, {"gro-blocked-router-ipid", 0.15, 0.3}, {"gro-blocked", 0.4, 0.5},
	} {
		f := findingOf(Diagnose(load(t, "dev/"+c.fixture+".json")), "gro-blocked")
		if f == nil || f.Impact < c.min || f.Impact > c.max {
			t.Errorf("%s: %+v, want an impact in [%.2f, %.2f]", c.fixture, f, c.min, c.max)
		}
	}
}
