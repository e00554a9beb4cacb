package doctor

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The cases of issue 10, each the lab evidence of the nearest scenario with
// what was measured on the faulty run put in: faults built other ways than
// the lab builds them, and noise no flow suffered.

func top(rep *Report) string {
	if f := rep.Top(finding.Warning); f != nil {
		return f.ID
	}
	return ""
}

func flowOf(ev *Evidence, sender bool) *Flow {
	for i := range ev.Flows {
		if (ev.Flows[i].BytesAcked > 0) == sender {
			return &ev.Flows[i]
		}
	}
	return nil
}

func nsNamed(ev *Evidence, suffix string) *Namespace {
	for i := range ev.Namespaces {
		if strings.HasSuffix(ev.Namespaces[i].Name, suffix) {
			return &ev.Namespaces[i]
		}
	}
	return nil
}

// Case 2: a veth link whose ends have MTU 9000 and 1500, no advertised MSS
// beyond the smaller one; the flow stalls in retransmissions (15 of 26
// segments) with drops at __dev_forward_skb2. The link is the cause, the
// drops its symptom.
func TestCaseLinkEndsWithDifferentMTUsRankAboveTheirDrops(t *testing.T) {
	ev := load(t, "lab/mtu-mismatch.json")
	s := flowOf(ev, true)
	s.SndMSS, s.Retrans, s.SegsOut = 1448, 15, 26
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.RetransSegs"], snd.Counters["Tcp.OutSegs"] = 15, 26
	rep := Diagnose(ev)
	if got := top(rep); got != "mtu-mismatch" {
		t.Fatalf("top %q, want mtu-mismatch; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "packet-loss" && f.Severity >= finding.Warning {
			t.Errorf("packet-loss stays a warning beside its cause: %v", ids(rep.Findings))
		}
	}
}

// Case 7: a router namespace between the ends. Two veths of different links
// whose indexes happen to mirror each other are not one link: a peer index
// means something only in the namespace the link's netnsid names.
func TestCaseVethPeersArePairedInTheirOwnNamespace(t *testing.T) {
	veth := func(name string, index, peer, peerNs, mtu int) Device {
		d := Device{}
		d.Name, d.Kind, d.Index, d.PeerIndex, d.PeerNetnsID, d.MTU = name, "veth", index, peer, peerNs, mtu
		return d
	}
	ev := &Evidence{Seconds: 2, CPUCount: 2, Namespaces: []Namespace{
		{Name: "a", NetnsIDs: map[string]int{"r": 0, "b": 1}, Devices: []Device{veth("a0", 2, 3, 0, 9000)}},
		{Name: "r", NetnsIDs: map[string]int{"a": 0, "b": 1}, Devices: []Device{veth("r0", 3, 2, 0, 9000), veth("r1", 2, 3, 1, 1500)}},
		{Name: "b", NetnsIDs: map[string]int{"r": 0, "a": 1}, Devices: []Device{veth("b0", 3, 2, 0, 1500)}},
	}}
	for _, f := range Diagnose(ev).Findings {
		if f.ID == "mtu-mismatch" {
			t.Errorf("mtu-mismatch paired ends of different links: %s", f.Evidence)
		}
	}
	// The same link with ends that do differ is found.
	ev.Namespaces[1].Devices[0].MTU = 1500
	found := false
	for _, f := range Diagnose(ev).Findings {
		found = found || f.ID == "mtu-mismatch" && strings.Contains(f.Title, "a0 9000, r0 1500")
	}
	if !found {
		t.Errorf("the link a0-r0 with MTUs 9000 and 1500 is not reported")
	}
}

// Case 3: a tbf at 500 Mbit/s on the sender's device, the flow at 230
// Mbit/s: TSO bursts overrun the bucket, overlimits rise, a backlog stands.
func TestCaseShaperBelowItsRateStillShapes(t *testing.T) {
	ev := load(t, "lab/rate-shaped.json")
	tx := flowOf(ev, true).SendBps()
	for _, d := range ev.devices {
		for k := range d.Qdiscs {
			if q := &d.Qdiscs[k]; q.Kind == "tbf" {
				q.RateBps = uint64(tx / 0.46 / 8)
			}
		}
	}
	rep := Diagnose(ev)
	if got := top(rep); got != "rate-shaped" {
		t.Fatalf("top %q, want rate-shaped; findings %v", got, ids(rep.Findings))
	}
	if f := rep.Top(finding.Warning); !strings.Contains(f.Remedy[0], "burst") {
		t.Errorf("the first remedy should size the bucket: %v", f.Remedy)
	}
}

// Case 5: the receiving application sets SO_RCVBUF to 8 KB and reads
// slowly while its namespace's tcp_rmem allows megabytes; fresh interfaces
// drop a few IPv6 multicast packets that no TCP flow suffers.
func TestCaseSmallSocketBufferOutranksTheSysctlAndMulticastDropsAreNoise(t *testing.T) {
	ev := load(t, "lab/rwnd-limited.json")
	nsNamed(ev, "-rcv").Sysctls["net.ipv4.tcp_rmem"] = "4096 131072 6291456"
	flowOf(ev, true).SndWnd = 4096
	ev.Drops = append(ev.Drops, Drop{Reason: "NOT_SPECIFIED", Location: "ip6_mc_input+0x1d6", Dev: "skbr2688-3",
		Protocol: "ipv6/udp", Count: 10, Dst: netip.MustParseAddrPort("[ff02::fb]:5353")})
	rep := Diagnose(ev)
	if got := top(rep); got != "rwnd-limited" {
		t.Fatalf("top %q, want rwnd-limited; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "packet-loss" {
			t.Errorf("multicast drops no flow suffered raised packet-loss: %v", f.Evidence)
		}
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "10 dropped packets no flow suffered") {
		t.Errorf("the unsuffered drops are not noted: %v", rep.Notes)
	}
}

// Case 6: a healthy stream whose receiver moves between CPUs: 0.25 % of
// segments retransmitted, 94 % of them proven needless by DSACK.
func TestCaseReorderingIsNotLoss(t *testing.T) {
	ev := load(t, "lab/baseline.json")
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.OutSegs"], snd.Counters["Tcp.RetransSegs"], snd.Counters["TcpExt.TCPDSACKRecvSegs"] = 3345200, 8363, 7860
	rep := Diagnose(ev)
	if got := top(rep); got != "" {
		t.Errorf("top %q, want none: retransmissions the receiver called duplicates are not loss; findings %v", got, ids(rep.Findings))
	}
	// Without the DSACKs the same retransmissions are loss.
	snd.Counters["TcpExt.TCPDSACKRecvSegs"] = 0
	if got := top(Diagnose(ev)); got != "packet-loss" {
		t.Errorf("without DSACKs: top %q, want packet-loss", got)
	}
}

// Retransmissions put at stake no more than the time the sender waited on
// its window: QEMU's vmxnet3 receiver with GRO off lost 1 % of the segments
// while its sender waited on cwnd 38 % of the time, and GRO off stays first.
func TestCaseLossHoldingTheWindowRarelyDoesNotOutrankTheOffload(t *testing.T) {
	ev := load(t, "lab/gro-off.json")
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.RetransSegs"] = snd.Counters["Tcp.OutSegs"] / 90
	rep := Diagnose(ev)
	if got := top(rep); got != "offload-disabled" {
		t.Errorf("top %q, want offload-disabled: the sender waited on its window %.0f %% of the time; findings %v",
			got, 100*ev.senders()[0].LimitShares["cwnd"], ids(rep.Findings))
	}
	var loss *finding.Finding
	for i := range rep.Findings {
		if rep.Findings[i].ID == "packet-loss" {
			loss = &rep.Findings[i]
		}
	}
	if loss == nil || loss.Severity < finding.Warning {
		t.Fatalf("1 %% of the segments retransmitted is no longer reported: %v", ids(rep.Findings))
	}
	if !strings.Contains(loss.ImpactText, "congestion window") && !strings.Contains(loss.ImpactText, "without the loss") {
		t.Errorf("the stake does not say what bounds it: %s", loss.ImpactText)
	}
	// A sender held by its window most of the time, with the CPUs mostly
	// idle (it would not be held there otherwise), loses that much to the loss.
	shares := ev.senders()[0].LimitShares
	shares["cwnd"], shares["tsq"] = 0.9, 0.07
	for i := range ev.CPUs {
		c := &ev.CPUs[i]
		c.User, c.System, c.Softirq, c.NetRx, c.NetTx = c.User/4, c.System/4, c.Softirq/4, c.NetRx/4, c.NetTx/4
		c.Idle = 1 - c.User - c.System - c.Softirq - c.IRQ - c.Steal
	}
	if got := top(Diagnose(ev)); got != "packet-loss" {
		t.Errorf("with the sender waiting on its window 90 %% of the time: top %q, want packet-loss", got)
	}
}

// The same link, but the flow's losses are a firewall's: the MTU difference
// stays a note and the drops are the finding.
func TestCaseLinkMTUDoesNotTakeAnotherCausesLoss(t *testing.T) {
	ev := load(t, "lab/mtu-mismatch.json")
	s := flowOf(ev, true)
	s.SndMSS, s.Retrans, s.SegsOut = 1448, 15, 26
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.RetransSegs"], snd.Counters["Tcp.OutSegs"] = 15, 26
	for i := range ev.Drops {
		ev.Drops[i].Reason, ev.Drops[i].Location = "NETFILTER_DROP", "nf_hook_slow+0x9e"
	}
	rep := Diagnose(ev)
	if got := top(rep); got != "packet-loss" {
		t.Fatalf("top %q, want packet-loss; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "mtu-mismatch" && f.Severity >= finding.Warning {
			t.Errorf("mtu-mismatch convicted on a firewall's drops: %v", f.Evidence)
		}
	}
}

// A shaper far below bulk rates still caps a flow that reaches it.
func TestCaseSlowShaperAtItsRate(t *testing.T) {
	ev := load(t, "lab/rate-shaped.json")
	f := flowOf(ev, true)
	f.BytesAcked = uint64(48e6 / 8 * f.Seconds)
	for _, d := range ev.devices {
		for k := range d.Qdiscs {
			if q := &d.Qdiscs[k]; q.Kind == "tbf" {
				q.RateBps = 50e6 / 8
			}
		}
	}
	if got := top(Diagnose(ev)); got != "rate-shaped" {
		t.Errorf("top %q, want rate-shaped for a flow at 48 of a shaper's 50 Mbit/s", got)
	}
}

// A CI run of the lab's offload-disabled and gro-off scenarios: the sender
// waited for its window 89 % of the time, with 212 of 1.7 million segments
// retransmitted in 4 recoveries. A few losses at 10 Gbit/s cost nothing; the
// window waits for the receiver's CPU, which the missing offload loads.
func TestCaseWindowWaitsWithoutLossAreNotCwndLimited(t *testing.T) {
	for _, name := range []string{"offload-disabled", "gro-off"} {
		ev := load(t, "lab/"+name+".json")
		s := flowOf(ev, true)
		s.LimitShares = map[string]float64{"cwnd": 0.89, "tsq": 0.08, "app": 0.03}
		s.SegsOut, s.Retrans, s.TraceRetrans = 1689561, 212, 212
		s.CongStates = map[string]int{"Open": 4, "Disorder": 1, "Recovery": 3, "CWR": 1}
		rep := Diagnose(ev)
		if got := top(rep); got != "offload-disabled" {
			t.Errorf("%s: top %q, want offload-disabled; findings %v", name, got, ids(rep.Findings))
		}
		// The same waits with real loss are the window's.
		s.Retrans = 3 * s.SegsOut / 100
		if !slices.ContainsFunc(Diagnose(ev).Findings, func(f finding.Finding) bool { return f.ID == "cwnd-limited" }) {
			t.Errorf("%s: 3 %% loss and 89 %% of the time waiting for the window: no cwnd-limited", name)
		}
	}
}

// Every finding says how sure it is and what to run to confirm it.
func TestEveryFindingSaysHowSureItIsAndHowToConfirmIt(t *testing.T) {
	files, err := filepath.Glob("testdata/*/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		rep := Diagnose(load(t, strings.TrimPrefix(file, "testdata/")))
		for _, f := range rep.Findings {
			seen[f.ID] = true
			switch f.Confidence {
			case finding.Strong, finding.Likely, finding.Possible:
			default:
				t.Errorf("%s: %s has confidence %q", file, f.ID, f.Confidence)
			}
			if len(f.Confirm) == 0 {
				t.Errorf("%s: %s says nothing to confirm it", file, f.ID)
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("the fixtures raised only %d finding ids: %v", len(seen), seen)
	}
}

// Case 4: VXLAN whose outer IP IDs block GRO, judged in default mode: the
// receive backlog overflows (the symptom, drops of the tunnel's UDP) and
// the per-packet families are sampled. gro-blocked, the cause, ranks first.
func TestCaseBlockedGROOutranksTheBacklogDropsItCauses(t *testing.T) {
	ev := load(t, "lab/gro-blocked.json")
	ev.Notes = append(ev.Notes, "segments per skb, softirq time and socket calls (dev_xmit, dev_recv, softirq, sock_io) were recorded 5 % of each second")
	ev.Drops = append(ev.Drops, Drop{Reason: "CPU_BACKLOG", Location: "enqueue_to_backlog+0x1c4", Dev: "skbr2688-12", Protocol: "ipv4/udp",
		Count: 5210, Src: netip.MustParseAddrPort("10.200.0.1:40000"), Dst: netip.MustParseAddrPort("10.200.0.2:4789")})
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.RetransSegs"] = snd.Counters["Tcp.OutSegs"] / 50 // 2 %: more at stake than gro-blocked's own estimate
	rep := Diagnose(ev)
	if got := top(rep); got != "gro-blocked" {
		t.Fatalf("top %q, want gro-blocked; findings %v", got, ids(rep.Findings))
	}
	var cause, symptom *finding.Finding
	for i, f := range rep.Findings {
		switch f.ID {
		case "packet-loss":
			symptom = &rep.Findings[i]
		case "gro-blocked":
			cause = &rep.Findings[i]
		}
	}
	if symptom == nil || symptom.Severity >= finding.Warning {
		t.Fatalf("packet-loss should stay, as info beside the gro-blocked that explains it: %v", ids(rep.Findings))
	}
	if cause.Impact < symptom.Impact {
		t.Errorf("gro-blocked's impact %.2f is below that of the packet-loss it explains (%.2f)", cause.Impact, symptom.Impact)
	}
}

// Case 1: a stream of 100-byte writes with Nagle on. Nagle holds each tail
// for a fast path's round trip (57 µs on average here) while full segments
// go out, and coalesces the writes: it costs nothing (TCP_NODELAY was
// slower). The small writes are the cost; GRO, off on the receiving veth
// by default, set nothing, its receiving CPU idle.
func TestCaseSmallWritesBehindAFullPipeAreNotNagleDelay(t *testing.T) {
	rep := Diagnose(load(t, "lab/variant-nagle-small-writes.json"))
	if got := top(rep); got != "small-packet-bound" {
		t.Fatalf("top %q, want small-packet-bound; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.Severity >= finding.Warning && (f.ID == "nagle-delay" || f.ID == "offload-disabled") {
			t.Errorf("%s is a warning: %v", f.ID, f.Evidence)
		}
	}
	// Request/response, where each hold waits for the delayed ACK (43 ms).
	rep = Diagnose(load(t, "lab/nagle-delay-measured.json"))
	if got := top(rep); got != "nagle-delay" {
		t.Fatalf("request/response: top %q, want nagle-delay; findings %v", got, ids(rep.Findings))
	}
}

// A 4-packet queue under a rate far above the flow: 120 of the sender's own
// skbs dropped by its qdisc, each a window cut (153 CWR), the flow at 10 of
// 24 Gbit/s, no retransmission and a drop ratio under 0.1 %. The cuts
// convict the drops; the shaper's rate, far above the flow, does not.
func TestCaseLocalQdiscDropsCountByTheWindowCuts(t *testing.T) {
	rep := Diagnose(load(t, "lab/variant-loss-tiny-queue.json"))
	if got := top(rep); got != "packet-loss" {
		t.Fatalf("top %q, want packet-loss; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "rate-shaped" {
			t.Errorf("rate-shaped for an htb at 20 Gbit/s that a 10 Gbit/s flow never reached: %v", f.Evidence)
		}
	}
}
