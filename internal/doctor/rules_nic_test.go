package doctor

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func TestReceiveChecksumOffOnANIC(t *testing.T) {
	nic := func(fixed bool) func(*Evidence) *Evidence {
		return func(ev *Evidence) *Evidence {
			for _, d := range ev.devices {
				if d.Recv != nil && d.Recv.Skbs > 100000 {
					d.Kind, d.Features[featRxCsum], d.Features[featGRO] = "device", false, true
					if fixed {
						d.Fixed = []string{featRxCsum}
					}
				}
			}
			return ev
		}
	}
	has := func(fs []finding.Finding) bool {
		for _, f := range fs {
			if strings.HasPrefix(f.Title, "receive checksum offload is off") && strings.Contains(strings.Join(f.Remedy, " "), "rx on") {
				return true
			}
		}
		return false
	}
	if !has(offloadDisabled(nic(false)(load(t, "lab/gro-off.json")))) {
		t.Error("rx-checksum off on a NIC that can turn it on: no finding")
	}
	if has(offloadDisabled(nic(true)(load(t, "lab/gro-off.json")))) {
		t.Error("rx-checksum off [fixed]: a finding proposing what the device refuses")
	}
}

// Evidence gathered by doctor --json in QEMU guests whose two emulated NICs
// of one model share a hub (make nics): QEMU 7.2's e1000e sends TSO skbs as
// IP fragments; virtio-net on a hub gets no offloads from its host.
func TestNICWireEvidence(t *testing.T) {
	rep := Diagnose(load(t, "nic/e1000e-hub.json"))
	var frag *finding.Finding
	for i, f := range rep.Findings {
		if f.ID == "gro-blocked" {
			t.Errorf("e1000e: fragments blamed on IP IDs: %s", f.Title)
		}
		if f.ID == "ip-fragmented" {
			frag = &rep.Findings[i]
		}
	}
	if frag == nil || frag.Confidence != finding.Strong || !strings.Contains(frag.Title, "eth0's segmentation offload") ||
		!strings.Contains(strings.Join(frag.Remedy, "\n"), "ethtool -K eth0 tso off") {
		t.Errorf("e1000e: want ip-fragmented naming eth0's TSO, strong, with tso off: %+v; all %v", frag, ids(rep.Findings))
	}

	rep = Diagnose(load(t, "nic/virtio-hub.json"))
	var seg *finding.Finding
	for i, f := range rep.Findings {
		if f.ID == "offload-disabled" && strings.Contains(f.Title, "cannot segment") {
			seg = &rep.Findings[i]
		}
	}
	if seg == nil {
		t.Fatalf("virtio-net: no finding that eth0 cannot segment: %v", ids(rep.Findings))
	}
	remedy := strings.Join(seg.Remedy, "\n")
	if !strings.Contains(remedy, "vnet_hdr") || strings.HasPrefix(remedy, "ethtool -K") || strings.Contains(remedy, "ethtool -K eth0 tso on gso on\n") {
		t.Errorf("virtio-net: remedy is not one the device accepts:\n%s", remedy)
	}
}

// The lab's NIC faults in a guest (skbtrace lab run --wire --doctor on
// e1000e): a receiving NIC that holds packets 10 ms (nic-coalescing) and
// receive checksumming off beside the sender's TSO off (nic-rx-csum-off).
func TestNICWireFaults(t *testing.T) {
	rep := Diagnose(load(t, "nic/e1000e-coalescing.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "irq-coalescing" || !strings.Contains(top.Title, "eth1") ||
		!strings.Contains(strings.Join(top.Remedy, "\n"), "ethtool -C eth1 rx-usecs 3") {
		t.Errorf("coalescing: want irq-coalescing on eth1 first, with e1000e's dynamic mode: %+v; all %v", top, ids(rep.Findings))
	}
	// The same under a CI guest's load, both CPUs 91 % busy: 61 transactions/s
	// of 100 bytes are the applications' rate, not a CPU-bound link's.
	busy := load(t, "nic/e1000e-coalescing.json")
	for i := range busy.CPUs {
		busy.CPUs[i] = CPUUse{CPU: busy.CPUs[i].CPU, User: 0.2, System: 0.6, Softirq: 0.11, Idle: 0.09}
	}
	if f := cpuSaturated(busy); len(f) > 0 {
		t.Errorf("request/response beside busy CPUs: want no cpu-saturated, got %s: %v", f[0].Title, f[0].Evidence)
	}
	if top := Diagnose(busy).Top(finding.Warning); top == nil || top.ID != "irq-coalescing" {
		t.Errorf("request/response beside busy CPUs: want irq-coalescing first, got %+v", top)
	}
	// A flow whose peer is not observed and which received more than it
	// sent may be a CPU-bound receiver: still judged against the link.
	oneEnd := load(t, "nic/e1000e-coalescing.json")
	oneEnd.CPUs = busy.CPUs
	oneEnd.Flows = oneEnd.Flows[:1]
	if f := cpuSaturated(oneEnd); len(f) == 0 {
		t.Errorf("a receiving flow without its peer beside busy CPUs: want cpu-saturated against the link")
	}
	// Both explain the saturated CPUs and are raised to their stake; the
	// checksums, costlier on their own than TSO with GSO on, rank first.
	rep = Diagnose(load(t, "nic/e1000e-rx-csum-off.json"))
	var titles []string
	for _, f := range rep.Findings {
		if f.ID == "offload-disabled" && f.Severity >= finding.Warning {
			titles = append(titles, f.Title)
		}
	}
	if len(titles) != 2 || !strings.Contains(titles[0], "receive checksum offload is off on eth1") ||
		!strings.Contains(titles[1], "TSO is off on eth0 (GSO segments in software)") {
		t.Errorf("rx-csum off: want eth1's checksums, then eth0's TSO with GSO on, at warning: %q", titles)
	}
}

// A NIC's interrupts on a saturated CPU while another idles: the placement
// is the cause, ranked as such even beside a finding it would otherwise be
// a symptom of.
func TestMisplacedInterruptsKeepCPUSaturatedACause(t *testing.T) {
	for _, speed := range []int{10000, 0} { // 0: virtio-net has none
		misplacedInterrupts(t, speed)
	}
}

func misplacedInterrupts(t *testing.T, speed int) {
	ev := fragmented(load(t, "lab/gro-off.json"))
	ev.CPUs = []CPUUse{{CPU: 0, System: 0.5, Softirq: 0.45, Idle: 0.05}, {CPU: 1, User: 0.2, Idle: 0.7}}
	for _, d := range ev.devices {
		if d.Recv != nil && d.Recv.Skbs > 100000 {
			d.Kind, d.SpeedMbps, d.Driver = "device", speed, "e1000e"
			d.IRQs, d.Interrupts = []int{35}, []uint64{9000, 10}
		}
	}
	rep := Diagnose(ev)
	for _, f := range rep.Findings {
		if f.ID != "cpu-saturated" || f.Scope != "cpu 0" {
			continue
		}
		if f.Severity < finding.Warning || !strings.Contains(strings.Join(f.Evidence, "\n"), "CPU 1 meanwhile was 30 % busy") {
			t.Errorf("misplaced interrupts: %s %v", f.Severity, f.Evidence)
		}
		if !strings.Contains(f.Remedy[0], "/proc/irq/35/smp_affinity_list") {
			t.Errorf("the remedy does not start with moving the interrupts: %v", f.Remedy)
		}
		return
	}
	t.Errorf("link speed %d: no cpu-saturated finding for CPU 0: %v", speed, ids(rep.Findings))
}

// Receive checksums off on a NIC whose interrupts land on a saturated CPU:
// a warning whatever NET_RX share that CPU's sampled softirq events show
// (an e1000e guest's 25 % beside /proc/stat's 61 % softirq flipped it at the
// old 30 % bar); with the same CPU half idle, information only. Beside a
// saturated CPU 0 (an e1000 wire under TCG: 87 % and 99 %) the host has no
// idle time for the receive work anywhere: a warning again.
func TestReceiveOffloadJudgedOnTheCPUTakingTheInterrupts(t *testing.T) {
	judgeBeside := func(other, busy, netRx float64) *finding.Finding {
		ev := load(t, "nic/e1000e-rx-csum-off.json")
		ev.CPUs = []CPUUse{{CPU: 0, User: 0.1, System: other - 0.1, Idle: 1 - other},
			{CPU: 1, System: busy - netRx, Softirq: netRx, NetRx: netRx, Idle: 1 - busy}}
		for _, d := range ev.devices {
			if d.Name == "eth1" {
				d.Interrupts = []uint64{40, 2000}
			}
		}
		for _, f := range offloadDisabled(ev) {
			if strings.HasPrefix(f.Title, "receive checksum offload is off on eth1") {
				return &f
			}
		}
		t.Fatalf("busy %.2f, NET_RX %.2f: no finding on eth1's checksums", busy, netRx)
		return nil
	}
	judge := func(busy, netRx float64) *finding.Finding { return judgeBeside(0.4, busy, netRx) }
	if f := judge(0.96, 0.25); f.Severity != finding.Warning || !strings.Contains(f.Explanation, "CPU 1, which takes eth1's interrupts") {
		t.Errorf("saturated interrupt CPU: want a warning naming CPU 1, got %s: %s", f.Severity, f.Explanation)
	}
	if f := judge(0.55, 0.35); f.Severity != finding.Warning {
		t.Errorf("half busy, a third receive work: want a warning, got %s", f.Severity)
	}
	if f := judge(0.7, 0.2); f.Severity != finding.Info || !strings.Contains(f.Explanation, "did not set the rate") {
		t.Errorf("CPU with time to spare: want info, got %s: %s", f.Severity, f.Explanation)
	}
	if f := judgeBeside(0.99, 0.87, 0.15); f.Severity != finding.Warning || !strings.Contains(f.Explanation, "93 % on average") {
		t.Errorf("both CPUs near saturated: want a warning naming the host's 93%%, got %s: %s", f.Severity, f.Explanation)
	}
	if f := judgeBeside(0.7, 0.87, 0.15); f.Severity != finding.Info {
		t.Errorf("the other CPU with time to spare: want info, got %s: %s", f.Severity, f.Explanation)
	}
}

// QEMU's e1000 (make nics, 6.12) counts thousands of frames in
// rx_missed_errors and rx_no_buffer_count in runs whose TCP flows lose
// nothing; vmxnet3 frees every completed transmission as a drop.
func TestNICCountersTheFlowsDidNotSuffer(t *testing.T) {
	missed := func(n uint64, retrans int64, flows bool) *Evidence {
		ev := load(t, "nic/e1000e-hub.json")
		for i := range ev.Namespaces {
			ns := &ev.Namespaces[i]
			ns.Counters["Tcp.RetransSegs"] = 0
			if ns.Name == "snd" {
				ns.Counters["Tcp.RetransSegs"] = retrans
			}
			for j := range ns.Devices {
				if d := &ns.Devices[j]; d.Name == "eth1" {
					d.ErrorStats["rx_missed_errors"], d.ErrorStats["rx_no_buffer_count"] = n, n
				}
			}
		}
		if !flows {
			ev.Flows = nil
		}
		return ev
	}
	lossOf := func(ev *Evidence) *finding.Finding {
		for _, f := range packetLoss(ev) {
			return &f
		}
		return nil
	}
	// The paced baseline on e1000: 7,791 missed, one retransmission.
	if f := lossOf(missed(7791, 1, true)); f == nil || f.Severity != finding.Info || !strings.Contains(f.Title, "not theirs") {
		t.Errorf("misses the flows did not retransmit: want packet-loss at info, got %+v", f)
	}
	// A real overflow: the flows sent most of the misses again.
	if f := lossOf(missed(7791, 6000, true)); f == nil || f.Severity != finding.Warning || !strings.Contains(f.Title, "ring overflows") {
		t.Errorf("misses the flows retransmitted: want packet-loss at warning naming the ring, got %+v", f)
	}
	// e1000's bulk runs: real retransmissions (34), far fewer than the
	// misses (14,450): loss, but not the ring's.
	if f := lossOf(missed(14450, 34, true)); f == nil || f.Severity != finding.Warning || strings.Contains(f.Title, "ring") ||
		strings.Contains(strings.Join(f.Remedy, "\n"), "ethtool -G") {
		t.Errorf("34 retransmissions beside 14,450 misses: want packet-loss at warning, not the ring's, got %+v", f)
	}
	// Few misses, few retransmissions, below the rule's bars together.
	if f := lossOf(missed(300, 5, true)); f == nil || f.Severity != finding.Warning {
		t.Errorf("300 misses, 5 retransmissions: want packet-loss at warning, got %+v", f)
	}
	// No TCP flow to show it: datagrams lost in the ring are simply gone.
	if f := lossOf(missed(7791, 0, false)); f == nil || f.Severity != finding.Warning {
		t.Errorf("misses without TCP flows: want packet-loss at warning, got %+v", f)
	}

	ev := load(t, "nic/e1000e-hub.json")
	ev.Drops = append(ev.Drops, Drop{Reason: "NOT_SPECIFIED", Location: "vmxnet3_tq_tx_complete.isra.0+0x17f", Dev: "eth0",
		Protocol: "ipv4/tcp", Count: 5000, Src: netip.MustParseAddrPort("10.200.0.1:48924"), Dst: netip.MustParseAddrPort("10.200.0.2:5201")})
	if f := lossOf(ev); f != nil {
		t.Errorf("vmxnet3's frees of sent skbs: want no packet-loss, got %+v", f)
	}
	ev.Drops[len(ev.Drops)-1].Location = "ip_rcv_core+0x1a0"
	if f := lossOf(ev); f == nil || f.Severity != finding.Warning {
		t.Errorf("5000 unexplained drops of the flow: want packet-loss at warning, got %+v", f)
	}
}

// e1000 in QEMU with receive checksums off (nic-rx-csum-off): both CPUs
// saturated, most of it in system time (the checksum summed in the copy to
// the reader), the sender held by its window behind the receiver's ring.
// The queue is the receiver's, not a hop's: the offload comes first.
func TestSaturatedReceiverInSystemTimeIsNoPathHop(t *testing.T) {
	ev := load(t, "nic/e1000e-rx-csum-off.json")
	ev.CPUs[0].User, ev.CPUs[0].System, ev.CPUs[0].Softirq, ev.CPUs[0].NetRx, ev.CPUs[0].Idle = 0.11, 0.68, 0.18, 0.08, 0.03
	ev.CPUs[1].User, ev.CPUs[1].System, ev.CPUs[1].Softirq, ev.CPUs[1].NetRx, ev.CPUs[1].Idle = 0.18, 0.52, 0.23, 0.23, 0.08
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.Netns == "skbtrace-195-1-snd" {
			f.RTTus, f.MinRTTus = 11313, 876
			f.LimitShares = map[string]float64{"cwnd": 0.53, "app": 0.2, "tsq": 0.2, "ok": 0.07}
		}
	}
	rep := Diagnose(ev)
	for _, f := range rep.Findings {
		if f.ID == "rate-shaped" && f.Severity >= finding.Warning {
			t.Errorf("a saturated receiver's queue blamed on a hop: %s", f.Title)
		}
	}
	if top := rep.Top(finding.Warning); top == nil || top.ID != "offload-disabled" {
		t.Errorf("want offload-disabled first, got %+v; all %v", top, ids(rep.Findings))
	}
	// The same queue with the receiver's CPUs idle half the time is a hop's.
	for i := range ev.CPUs {
		ev.CPUs[i].Idle, ev.CPUs[i].System = 0.5, 0.1
	}
	rep = Diagnose(ev)
	if top := rep.Top(finding.Warning); top == nil || top.ID != "rate-shaped" {
		t.Errorf("idle receiver CPUs: want rate-shaped first, got %+v; all %v", top, ids(rep.Findings))
	}
}

// vmxnet3 under QEMU: LRO on (its default), so the driver hands packets past
// GRO, and the device merged none: one segment per skb with GRO on.
func TestLROOnThatMergesNothingIsNamedWithTheSwitchThatFixesIt(t *testing.T) {
	lro := func(fixed bool) *finding.Finding {
		ev := withGROOn(load(t, "lab/gro-off.json"))
		for _, d := range ev.devices {
			if d.Features != nil {
				d.Features[featLRO] = true
				if fixed {
					d.Fixed = append(d.Fixed, featLRO)
				}
			}
		}
		for _, f := range groBlocked(ev) {
			return &f
		}
		return nil
	}
	f := lro(false)
	if f == nil || !strings.Contains(f.Title, "LRO") || !strings.Contains(strings.Join(f.Remedy, "\n"), "lro off") ||
		strings.Contains(strings.Join(f.Remedy, "\n"), "df set") {
		t.Errorf("LRO on, merging nothing: want gro-blocked naming LRO with lro off, got %+v", f)
	}
	if f := lro(true); f == nil || strings.Contains(strings.Join(f.Remedy, "\n"), "ethtool -K") {
		t.Errorf("LRO [fixed] on: want no ethtool -K remedy, got %+v", f)
	}
}

// vmxnet3 with GRO off under TCG (the lab's nic-gro-off): both CPUs 87-90 %
// busy with receive work, and the round trip grows in the receiver's ring and
// backlog. Whichever side of 90 % the CPUs land from run to run (CI read
// under 90 % once: the queue passed for a hop's and ranked above GRO off),
// GRO off ranks first and the queue is not called a hop's.
func TestVmxnet3GROOffQueueIsTheReceiversWhereverTheCPUsLand(t *testing.T) {
	for _, idle := range []float64{0.05, 0.1, 0.13, 0.16, 0.2} {
		ev := load(t, "nic/vmxnet3-gro-off.json")
		for i := range ev.CPUs {
			ev.CPUs[i].Idle = idle
		}
		rep := Diagnose(ev)
		if got := top(rep); got != "offload-disabled" {
			t.Errorf("CPUs %.0f %% busy: top %q, want offload-disabled; findings %v", (1-idle)*100, got, ids(rep.Findings))
		}
		for _, f := range rep.Findings {
			if f.ID == "rate-shaped" && f.Severity >= finding.Warning {
				t.Errorf("CPUs %.0f %% busy: the receiver's queue passes for a hop's: %v", (1-idle)*100, f.Evidence)
			}
		}
	}
}

// The receiver's own queue is judged from this host's CPUs only where the
// receiver runs on this host: a receiver a peer's agent observed is not on
// them, and a busy sender's CPUs do not make its queue the receiver's.
func TestARemoteReceiversQueueIsNotJudgedByLocalCPUs(t *testing.T) {
	ev := load(t, "nic/vmxnet3-gro-off.json")
	sender := flowOf(ev, true)
	if receiverSaturated(ev, sender) == nil {
		t.Fatal("the local receiver's busy CPU does not hold the queue: the test shows nothing")
	}
	ev.peerFlow(sender).Netns = "rcv-host/skbtrace-rcv"
	if c := receiverSaturated(ev, sender); c != nil {
		t.Errorf("a peer's receiver judged by this host's CPU %d", c.CPU)
	}
}

// A receive ring that overflowed says the receive path fell behind its CPU
// whatever the CPUs' shares read: on an e1000 wire under TCG with GRO off
// (the lab's nic-gro-off) CI read the CPUs under 90 % busy once, GRO off
// passed for costing CPU only and the reader's 9.9 ms wait ranked first.
func TestARingThatOverflowedMakesReceiveWorkTheLimit(t *testing.T) {
	ev := load(t, "nic/vmxnet3-gro-off.json")
	for i := range ev.CPUs {
		ev.CPUs[i].Idle, ev.CPUs[i].NetRx, ev.CPUs[i].Softirq = 0.12, 0.2, 0.2
	}
	groOff := func(rep *Report) *finding.Finding {
		for i, f := range rep.Findings {
			if f.ID == "offload-disabled" && strings.HasPrefix(f.Title, "GRO is off") {
				return &rep.Findings[i]
			}
		}
		return nil
	}
	if f := groOff(Diagnose(ev)); f == nil || f.Severity >= finding.Warning {
		t.Fatalf("CPUs 88 %% busy, a fifth of it receive work: GRO off %+v, want info (the test shows nothing otherwise)", f)
	}
	receiver := flowOf(ev, false)
	ev.DeviceNamed(receiver.Netns, receiver.Dev).ErrorStats = map[string]uint64{"rx_missed_errors": 5341}
	if f := groOff(Diagnose(ev)); f == nil || f.Severity < finding.Warning || !strings.Contains(f.Explanation, "receive ring overflowed") {
		t.Errorf("the ring overflowed: GRO off %+v, want a warning saying so", f)
	}
}

// A reader whose device's ring overflowed waits for the CPU the receive
// path took, not for its own code.
func TestAReaderBehindAnOverflowingRingIsNotTheLimit(t *testing.T) {
	ev := load(t, "lab/reader-late.json")
	late := func() *finding.Finding { return findingOf(Diagnose(ev), "reader-late") }
	if f := late(); f == nil || f.Severity < finding.Warning {
		t.Fatalf("reader-late %+v, want a warning before the ring overflows", f)
	}
	receiver := flowOf(ev, false)
	ev.DeviceNamed(receiver.Netns, receiver.Dev).ErrorStats = map[string]uint64{"rx_missed_errors": 5341}
	if f := late(); f == nil || f.Severity >= finding.Warning || !strings.Contains(strings.Join(f.Evidence, "\n"), "receive ring overflowed") {
		t.Errorf("reader-late %+v, want info naming the ring", f)
	}
}
