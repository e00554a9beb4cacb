package doctor

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// The prog fixtures are the doctor's evidence of the fault runs of
// internal/lab/variants_prog.go (skbtrace lab run NAME --doctor --json),
// on a 2-CPU VM shared with other work.

// An XDP program dropping 1 % of the frames on the receiver's veth: the
// loss and both offload findings name it, and its detachment is the fix.
func TestXDPProgramNamedAsCause(t *testing.T) {
	ev := load(t, "prog/xdp-drop-veth.json")
	rep := Diagnose(ev)
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "packet-loss" {
		t.Fatalf("top finding %v, want packet-loss", top)
	}
	if top.Limit == nil || top.Limit.Kind != kindXDP || !strings.Contains(top.Title, "XDP path") {
		t.Fatalf("packet-loss names no XDP program: %q, limit %+v", top.Title, top.Limit)
	}
	if want := "ip link set dev skbr14262-1 xdpdrv off"; !strings.HasSuffix(top.Remedy[0], want) || top.Limit.Undo[0].Netns == "" {
		t.Errorf("first remedy %q (netns %q), want ... %s in the receiver's namespace", top.Remedy[0], top.Limit.Undo[0].Netns, want)
	}
	var tso, gro bool
	for _, f := range rep.Findings {
		if f.ID != "offload-disabled" {
			continue
		}
		if f.Limit == nil || f.Limit.Kind != kindXDP {
			t.Errorf("offload finding %q names no program", f.Title)
			continue
		}
		tso = tso || strings.Contains(f.Title, "cannot segment") && strings.Contains(f.Title, "on its peer")
		gro = gro || strings.Contains(f.Title, "GRO is off") && strings.HasSuffix(f.Remedy[0], "xdpdrv off")
		for _, r := range f.Remedy {
			if strings.Contains(r, "refuses it") {
				t.Errorf("remedy blames the driver: %q", r)
			}
		}
	}
	if !tso || !gro {
		t.Errorf("TSO finding on the sender's veth %v, GRO finding on the receiver's %v: want both naming the program", tso, gro)
	}
}

// An XDP_PASS program where only ACKs arrive costs nothing: nothing at
// warning names it (the host's other work may still warn of a busy CPU).
func TestXDPPassProgramNoWarning(t *testing.T) {
	ev := load(t, "prog/noise-xdp-pass-veth.json")
	if ev.xdpOn("skbtrace-14262-2-snd", "skbs14262-2") == nil {
		t.Fatal("the fixture's XDP program was not read")
	}
	for _, f := range Diagnose(ev).Findings {
		if f.Severity < finding.Warning {
			continue
		}
		if f.ID == "packet-loss" || f.ID == "offload-disabled" || f.Limit != nil && f.Limit.Kind == kindXDP {
			t.Errorf("warning about a program that passes every frame: %s: %s", f.ID, f.Title)
		}
	}
}

// An RPS mask steering the receiver's veth onto CPU 0, which the sender
// and a busy loop keep busy. As measured, the host's other work kept CPU 1
// busy too: no CPU had time to spare, so no mask change could help and
// none is named. Had CPU 1 been 40 % busy, the mask is the limit and the
// prescription moves the work there.
func TestRPSMaskNamedWhereACPUIsSpare(t *testing.T) {
	ev := load(t, "prog/rps-mask-busy-cpu.json")
	for _, f := range Diagnose(ev).Findings {
		if f.Limit != nil && f.Limit.Kind == kindRPS {
			t.Fatalf("mask named with no CPU to spare: %s: %s", f.ID, f.Title)
		}
	}
	// CPU 1 spare, CPU 0 filled by user-space work (the run's compilers
	// beside it, 40 % user against 16 % softirq): the work on the CPU, not
	// the mask, is the cause (cpu-receiver-app-work lost 60 % more when a
	// mask remedy steered its receive work onto the sender's CPU).
	spare := func(cpu0 *CPUUse) *Evidence {
		ev := load(t, "prog/rps-mask-busy-cpu.json")
		for i := range ev.CPUs {
			switch ev.CPUs[i].CPU {
			case 0:
				if cpu0 != nil {
					ev.CPUs[i] = *cpu0
				}
			case 1:
				ev.CPUs[i] = CPUUse{CPU: 1, User: 0.3, System: 0.1, Idle: 0.6}
			}
		}
		return ev
	}
	for _, f := range Diagnose(spare(nil)).Findings {
		if f.Limit != nil && f.Limit.Kind == kindRPS {
			t.Fatalf("mask named for a CPU that user-space work fills: %s: %s", f.ID, f.Title)
		}
	}
	// CPU 0 filled by the receive work the mask steers there.
	rep := Diagnose(spare(&CPUUse{CPU: 0, User: 0.15, System: 0.3, Softirq: 0.55}))
	var named *finding.Finding
	for i := range rep.Findings {
		if f := &rep.Findings[i]; f.ID == "cpu-saturated" && f.Scope == "cpu 0" {
			named = f
		}
	}
	if named == nil || named.Severity < finding.Warning || named.Limit == nil || named.Limit.Kind != kindRPS {
		t.Fatalf("cpu 0's finding names no RPS mask: %+v", named)
	}
	if !strings.Contains(named.Limit.Where.Object, "skbr14262-3") {
		t.Errorf("mask of %q, want the receiver's veth", named.Limit.Where.Object)
	}
	want := "ip netns exec skbtrace-14262-3-rcv sh -c 'echo 2 > /sys/class/net/skbr14262-3/queues/rx-0/rps_cpus'"
	if named.Remedy[0] != want {
		t.Errorf("first remedy %q, want %q", named.Remedy[0], want)
	}
	if !strings.Contains(named.Limit.Arithmetic, "CPU 1 40 % busy") || !strings.HasSuffix(named.Limit.Arithmetic, "mask 2") {
		t.Errorf("arithmetic %q", named.Limit.Arithmetic)
	}
}

// Where each kernel frees a frame an XDP program dropped: 6.x's
// veth_xdp_rcv_skb, 5.10's veth_poll (it inlines the former), generic XDP;
// veth_poll and veth_xmit only with a native program on the veth.
func TestXDPDropSitesOfEachKernel(t *testing.T) {
	for _, c := range []struct {
		location string
		native   bool
		want     bool
	}{
		{"veth_xdp_rcv_skb+0x1b4", true, true},
		{"veth_poll+0x44a", true, true},
		{"veth_poll+0x44a", false, false},
		{"veth_xmit+0x9c", true, true},
		{"do_xdp_generic+0x2d3", false, true},
		{"tcp_v4_rcv+0x120", true, false},
	} {
		if got := xdpDropSite(c.location, c.native); got != c.want {
			t.Errorf("xdpDropSite(%q, native %v) = %v, want %v", c.location, c.native, got, c.want)
		}
	}
}

// A tc BPF classifier dropping 1 % of the packets on the receiver's veth
// ingress (the lab's tc-bpf-drop): the loss names the program with its
// hook, and deleting its filter is the fix (restored 104 %). Without a
// reason (5.10: NO_REASON, at __netif_receive_skb_core+0xe65 in its guest)
// the drop is named by where the hook runs.
func TestTCProgramNamedAsCause(t *testing.T) {
	for _, reason := range []string{"TC_INGRESS", "NOT_SPECIFIED", "NO_REASON"} {
		ev := load(t, "prog/tc-bpf-drop.json")
		for i := range ev.Drops {
			if ev.Drops[i].Reason == "TC_INGRESS" {
				ev.Drops[i].Reason = reason
			}
		}
		top := Diagnose(ev).Top(finding.Warning)
		if top == nil || top.ID != "packet-loss" {
			t.Fatalf("%s: top finding %v, want packet-loss", reason, top)
		}
		if top.Limit == nil || top.Limit.Kind != kindTC || !strings.Contains(top.Title, "tc BPF program") {
			t.Fatalf("%s: packet-loss names no tc program: %q, limit %+v", reason, top.Title, top.Limit)
		}
		if want := " tc filter del dev skbr27438-1 ingress pref 1"; !strings.HasSuffix(top.Remedy[0], want) || top.Limit.Undo[0].Netns == "" {
			t.Errorf("%s: first remedy %q, want ...%s in the receiver's namespace", reason, top.Remedy[0], want)
		}
	}
	// A drop in another hook is not the ingress program's.
	ev := load(t, "prog/tc-bpf-drop.json")
	for i := range ev.Drops {
		if ev.Drops[i].Reason == "TC_INGRESS" {
			ev.Drops[i].Reason = "TC_EGRESS"
		}
	}
	if top := Diagnose(ev).Top(finding.Warning); top != nil && top.Limit != nil && top.Limit.Kind == kindTC {
		t.Errorf("an egress drop blamed on the ingress program: %q", top.Title)
	}
}

// A tc program's random drops on a device that receives TSO as IP
// fragments (QEMU's e1000e, control and fault alike) with its CPUs busy:
// the fragments cost receive CPU, but the program's drops are not their
// consequence, so the loss, traced to the program, ranks first.
func TestProgramDropsAreNoConsequenceOfFragments(t *testing.T) {
	ev := load(t, "prog/tc-bpf-drop.json")
	for ns, d := range ev.devices {
		if d.Stats.RxPackets > 50000 {
			ns.Counters["Ip.ReasmReqds"] = int64(d.Stats.RxPackets)
			ns.Counters["Ip.ReasmOKs"] = int64(d.Stats.RxPackets) / 45
		}
	}
	for i := range ev.CPUs {
		c := &ev.CPUs[i]
		c.User, c.System, c.Softirq, c.IRQ, c.Steal, c.Idle = 0.2, 0.3, 0.45, 0, 0, 0.05
	}
	rep := Diagnose(ev)
	var fragments *finding.Finding
	for i := range rep.Findings {
		if rep.Findings[i].ID == "ip-fragmented" {
			fragments = &rep.Findings[i]
		}
	}
	if fragments == nil || fragments.Severity < finding.Warning {
		t.Fatalf("the fixture made no ip-fragmented warning: %v", fragments)
	}
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "packet-loss" || top.Limit == nil || top.Limit.Kind != kindTC {
		t.Fatalf("top finding %v, want packet-loss naming the tc program; all: %v", top, ids(rep.Findings))
	}
}

// The lab's gro-blocked (2026-11-29): an XDP program on the receiving veth
// scrambles the outer IP IDs, GRO merges nothing, and the program's ring
// overflows (veth_xmit). The loss names the program, and so does the
// blocked GRO: the loss is the blocked GRO's consequence, not a drop of
// its own, and the GRO ranks first.
func TestLossByTheProgramThatBlocksGROIsItsConsequence(t *testing.T) {
	rep := Diagnose(load(t, "prog/gro-blocked-xdp-ipid.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "gro-blocked" || top.Limit == nil || top.Limit.Kind != kindXDP {
		t.Fatalf("top finding %v, want gro-blocked naming the XDP program; all: %v", top, ids(rep.Findings))
	}
	loss := findingNamed(t, rep, "packet-loss")
	if loss.Severity != finding.Info || !strings.Contains(loss.Explanation, "consequence of gro-blocked") {
		t.Errorf("packet-loss %s: %q", loss.Severity, loss.Explanation)
	}
}
