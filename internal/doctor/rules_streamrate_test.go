package doctor

import (
	"math"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func findingOf(rep *Report, id string) *finding.Finding {
	for i := range rep.Findings {
		if rep.Findings[i].ID == id {
			return &rep.Findings[i]
		}
	}
	return nil
}

// copyRateFor is the copy rate at which a stream over veth carries bps.
func copyRateFor(bps float64) float64 { return bps * streamCopyCost / 8 }

// On a virtual device the rate without a shaper is what a stream carries
// on this host (its copy rate over streamCopyCost), not the shaped
// stream's rate over its CPU's busy share: the lab's rate-shaped gained
// 99 % where the busy share said 57 %.
func TestShaperImpactFromTheStreamRate(t *testing.T) {
	ev := load(t, "lab/rate-shaped.json")
	before := findingOf(Diagnose(ev), "rate-shaped")
	ev.CopyRate = copyRateFor(32e9)
	f := findingOf(Diagnose(ev), "rate-shaped")
	if f == nil || before == nil {
		t.Fatal("no rate-shaped finding")
	}
	if f.Impact != maxShaperImpact || !strings.Contains(f.ImpactText, "a stream's rate over veth on this host") {
		t.Errorf("impact %.2f %q, want %.2f from the stream's rate (without it: %.2f)", f.Impact, f.ImpactText, maxShaperImpact, before.Impact)
	}
}

// A window's impact is at most what the flow would gain without it: the
// sender of the lab's rwnd-limited waited 96 % of its time, a stream here
// carries 3 times its rate (more than its CPU's busy share, 49 %, allows).
func TestWindowImpactBoundedByTheStreamRate(t *testing.T) {
	ev := load(t, "lab/rwnd-limited.json")
	tx := ev.senders()[0].SendBps()
	ev.CopyRate = copyRateFor(3 * tx)
	f := findingOf(Diagnose(ev), "rwnd-limited")
	if f == nil {
		t.Fatal("no rwnd-limited finding")
	}
	if want := 1 - 1/3.0; math.Abs(f.Impact-want) > 0.02 || !strings.Contains(f.ImpactText, "by the waits") || !strings.Contains(f.ImpactText, "a stream's rate") {
		t.Errorf("impact %.2f %q, want %.2f", f.Impact, f.ImpactText, want)
	}
}

// A cause ranks by its consequences' stake, but its impact stays its own
// estimate: the lab's loss-tiny-queue, whose drops cost what the CPU left
// (17-25 % gained), while the window they cut held the sender 85 % of the
// time.
func TestConsequencesRankButDoNotRaiseTheImpact(t *testing.T) {
	rep := Diagnose(load(t, "qdrop/loss-tiny-queue.json"))
	f := rep.Top(finding.Warning)
	if f == nil || f.ID != "packet-loss" {
		t.Fatalf("top %v, want packet-loss", ids(rep.Findings))
	}
	if !strings.Contains(f.ImpactText, "ranked by the") || f.Impact > 0.3 {
		t.Errorf("impact %.2f %q: want its own estimate, ranked by its consequences", f.Impact, f.ImpactText)
	}
}

// A NIC without a link speed (virtio-net) is no virtual device: its
// offloads keep the estimates made from its own costs, not a veth stream's
// rate (which put the virtio sender's TSO, off and fixed, above the GRO off
// that was the NIC lane's fault).
func TestStreamRateIsNotANICs(t *testing.T) {
	ev := load(t, "nic/virtio-hub.json")
	before := Diagnose(ev)
	ev.CopyRate = copyRateFor(32e9)
	after := Diagnose(ev)
	for i, f := range after.Findings {
		if f.ID == "offload-disabled" && f.Impact != before.Findings[i].Impact {
			t.Errorf("%s: impact %.2f with the stream's rate, %.2f without", f.Title, f.Impact, before.Findings[i].Impact)
		}
		if strings.Contains(f.ImpactText, "a stream's rate over veth") {
			t.Errorf("%s: a NIC's finding estimated from a veth stream: %s", f.Title, f.ImpactText)
		}
	}
}

// A lossy stream over veth costs more per byte than a clean one, so the
// rate without the loss is a stream's on this host, not the lossy run's
// rate over its CPU's busy share: the lab's packet-loss gained 70 % where
// the busy share said 49 %. Behind a shaper's class the stream keeps its
// costs: loss-tiny-queue's drops sit under an htb at 20 Gbit/s that held
// the stream to 12, and their removal gained 17-25 %.
func TestLossImpactFromTheStreamRateWithoutAShaper(t *testing.T) {
	ev := load(t, "nft/packet-loss.json")
	tx := 0.0
	for _, f := range ev.senders() {
		tx += f.SendBps()
	}
	ev.CopyRate = copyRateFor(3 * tx)
	f := findingOf(Diagnose(ev), "packet-loss")
	if f == nil {
		t.Fatal("no packet-loss finding")
	}
	if want := 1 - 1/3.0; math.Abs(f.Impact-want) > 0.02 || !strings.Contains(f.ImpactText, "a stream's rate") {
		t.Errorf("impact %.2f %q, want %.2f from the stream's rate", f.Impact, f.ImpactText, want)
	}

	ev = load(t, "qdrop/loss-tiny-queue.json")
	ev.CopyRate = copyRateFor(32e9)
	f = findingOf(Diagnose(ev), "packet-loss")
	if f == nil || f.Impact > 0.3 || strings.Contains(f.ImpactText, "a stream's rate") {
		t.Errorf("behind an htb class: %+v, want the CPU's estimate (at most 30 %%)", f)
	}
}
