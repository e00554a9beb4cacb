package doctor

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

func load(t *testing.T, name string) *Evidence {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev Evidence
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &ev
}

// The lab fixtures are the evidence the doctor gathered during each lab
// scenario's fault run on this project's lab (skbtrace lab run all --doctor --json).
var labExpect = map[string]string{
	"baseline":           "",
	"sndbuf-limited":     "sndbuf-limited",
	"rwnd-limited":       "rwnd-limited",
	"nagle-delay":        "nagle-delay",
	"rate-shaped":        "rate-shaped",
	"packet-loss":        "packet-loss",
	"offload-disabled":   "offload-disabled",
	"mtu-mismatch":       "mtu-mismatch",
	"cpu-saturated":      "cpu-saturated",
	"small-packet-bound": "small-packet-bound",
	"gro-off":            "offload-disabled",
	"gro-blocked":        "gro-blocked",
	"send-queue-bloat":   "send-queue-bloat",
	"qdisc-bloat":        "qdisc-bloat",
	"reader-late":        "reader-late",
}

func TestLabEvidenceRanksTheExpectedFindingFirst(t *testing.T) {
	for name, want := range labExpect {
		rep := Diagnose(load(t, "lab/"+name+".json"))
		got := ""
		if top := rep.Top(finding.Warning); top != nil {
			got = top.ID
		}
		if got != want {
			t.Errorf("%s: top finding %q, want %q; findings: %v", name, got, want, ids(rep.Findings))
		}
		if want == "" && rep.Healthy == "" {
			t.Errorf("%s: no finding, but no statement of what limited the run either", name)
		}
	}
}

func ids(fs []finding.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.ID+"/"+f.Severity.String())
	}
	return out
}

// withGROOn is the gro-off run's evidence with GRO reported on: what a
// receiver whose GRO cannot merge looks like.
func withGROOn(ev *Evidence) *Evidence {
	for _, d := range ev.devices {
		if d.Features != nil {
			d.Features[featGRO] = true
		}
	}
	return ev
}

// fragmented is the gro-off run's receiver, GRO on, with nearly every
// packet it received reassembled from IP fragments (45 to a datagram, as
// QEMU's e1000e makes them of a TSO skb).
func fragmented(ev *Evidence) *Evidence {
	withGROOn(ev)
	for ns, d := range ev.devices {
		if d.Recv != nil && d.Recv.Skbs > 100000 {
			ns.Counters["Ip.ReasmReqds"] = int64(d.Stats.RxPackets)
			ns.Counters["Ip.ReasmOKs"] = int64(d.Stats.RxPackets) / 45
		}
	}
	return ev
}

// workaroundApplied is seed 002 after its fixes: TSO off and MTU 8500.
func workaroundApplied(ev *Evidence) *Evidence {
	d := &ev.Namespaces[0].Devices[0]
	d.Features[featTSO], d.MTU = false, 8500
	return ev
}

func otherDevice(ev *Evidence) *Evidence {
	ev.Namespaces[0].Devices[0].DeviceID = "0x10d3" // an 82574L: same driver, not affected
	return ev
}

// coalesced sets the receiving NIC's rx-usecs (eth1 of the NIC fixtures):
// 3 is e1000e's default mode; 600 µs is a small part of its round trips (4 ms and more).
func coalesced(us uint32) func(*Evidence) *Evidence {
	return func(ev *Evidence) *Evidence {
		for _, d := range ev.devices {
			if d.Name == "eth1" {
				d.Coalesce = &host.Coalesce{RxUsecs: us}
			}
		}
		return ev
	}
}

// Each rule on its own, before ranking: fires on the evidence of its fault,
// stays quiet on evidence without it. An info-level rule "fires" when it
// reports at all; the others must reach warning.
func TestEveryRuleFiresAndStaysQuiet(t *testing.T) {
	type tc struct {
		fixture string
		adjust  func(*Evidence) *Evidence
		fire    bool
	}
	cases := map[string][]tc{
		"cpu-saturated":      {{"lab/cpu-saturated.json", nil, true}, {"seed/000-single-core.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/sndbuf-limited.json", nil, false}},
		"sndbuf-limited":     {{"lab/sndbuf-limited.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/rwnd-limited.json", nil, false}},
		"nagle-delay":        {{"lab/nagle-delay.json", nil, true}, {"lab/baseline.json", nil, false}},
		"rwnd-limited":       {{"lab/rwnd-limited.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/sndbuf-limited.json", nil, false}},
		"cwnd-limited":       {{"lab/packet-loss.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/offload-disabled.json", nil, false}},
		"packet-loss":        {{"lab/packet-loss.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/gro-off.json", nil, false}},
		"app-limited":        {{"lab/baseline.json", nil, true}, {"lab/sndbuf-limited.json", nil, false}},
		"offload-disabled":   {{"lab/offload-disabled.json", nil, true}, {"lab/gro-off.json", nil, true}, {"lab/baseline.json", nil, false}, {"lab/small-packet-bound.json", nil, false}},
		"known-nic-issue":    {{"seed/002-i219.json", nil, true}, {"seed/002-i219.json", workaroundApplied, false}, {"seed/002-i219.json", otherDevice, false}, {"lab/baseline.json", nil, false}},
		"mtu-mismatch":       {{"lab/mtu-mismatch.json", nil, true}, {"lab/baseline.json", nil, false}},
		"small-packet-bound": {{"lab/small-packet-bound.json", nil, true}, {"seed/003-small-udp.json", nil, true}, {"lab/baseline.json", nil, false}, {"seed/000-single-core.json", nil, false}},
		"gro-blocked":        {{"lab/gro-blocked.json", nil, true}, {"lab/gro-off.json", withGROOn, true}, {"lab/gro-off.json", nil, false}, {"lab/baseline.json", nil, false}, {"lab/gro-off.json", fragmented, false}},
		"ip-fragmented":      {{"lab/gro-off.json", fragmented, true}, {"lab/gro-off.json", withGROOn, false}, {"lab/baseline.json", nil, false}},
		"rate-shaped":        {{"lab/rate-shaped.json", nil, true}, {"lab/baseline.json", nil, false}},
		"asymmetric-path":    {{"seed/002-i219.json", nil, true}, {"lab/baseline.json", nil, false}, {"seed/000-single-core.json", nil, false}},
		"irq-coalescing":     {{"nic/e1000e-hub.json", coalesced(10000), true}, {"nic/e1000e-hub.json", coalesced(3), false}, {"nic/e1000e-hub.json", nil, false}, {"nic/e1000e-hub.json", coalesced(600), false}},
		"send-queue-bloat":   {{"lab/send-queue-bloat.json", nil, true}, {"lab/send-queue-bloat.json", autotunedQueue, false}, {"lab/send-queue-bloat.json", controlConnection, false}, {"lab/reader-late.json", nil, false}, {"lab/baseline.json", nil, false}},
		"qdisc-bloat": {{"lab/qdisc-bloat.json", nil, true}, {"lab/send-queue-bloat.json", localQdiscQueue, true}, {"lab/send-queue-bloat.json", nil, false},
			{"lab/rate-shaped.json", nil, false}, {"lab/baseline.json", nil, false}},
		"reader-late": {{"lab/reader-late.json", nil, true}, {"lab/reader-late.json", loneStall("rx_queue"), false}, {"lab/reader-late.json", controlConnection, false}, {"lab/send-queue-bloat.json", nil, false}, {"lab/baseline.json", nil, false},
			{"lab/reader-late.json", stageWait("rx_queue", 3000), false}, {"lab/reader-late.json", busyCPU, false},
			{"lab/reader-late.json", partlyBusyCPU, true}},
		"cgroup-cpu-throttled": {{"cgroup/cgroup-cpu-quota.json", nil, true}, {"cgroup/noise-cgroup-quota-unreached.json", nil, false}, {"lab/baseline.json", nil, false}},
		"rx-backlog": {{"lab/reader-late.json", busyWith(stageWait("rx_stack", 400_000)), true}, {"lab/reader-late.json", stageWait("rx_stack", 400_000), false},
			{"lab/reader-late.json", nil, false}, {"lab/baseline.json", nil, false}},
	}
	for _, r := range Rules {
		tcs := cases[r.ID]
		var fires, quiet bool
		for _, c := range tcs {
			fires, quiet = fires || c.fire, quiet || !c.fire
		}
		if !fires || !quiet {
			t.Errorf("rule %s needs a firing and a quiet case", r.ID)
		}
		for _, c := range tcs {
			ev := load(t, c.fixture)
			if c.adjust != nil {
				ev = c.adjust(ev)
			}
			fs := r.Check(ev)
			got := false
			for _, f := range fs {
				if f.ID != r.ID {
					t.Errorf("rule %s reported id %s", r.ID, f.ID)
				}
				if f.Severity >= finding.Warning || r.ID == "app-limited" {
					got = true
				}
				if len(f.Evidence) == 0 || f.Title == "" || f.Explanation == "" || f.Scope == "" {
					t.Errorf("rule %s on %s: finding without title, evidence, explanation or scope: %+v", r.ID, c.fixture, f)
				}
			}
			if got != c.fire {
				t.Errorf("rule %s on %s (adjusted %v): fired %v, want %v: %v", r.ID, c.fixture, c.adjust != nil, got, c.fire, ids(fs))
			}
		}
	}
}

func TestSeedSingleCoreIsCPUSaturatedAndRPSCannotHelp(t *testing.T) {
	rep := Diagnose(load(t, "seed/000-single-core.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "cpu-saturated" {
		t.Fatalf("top finding %v, want cpu-saturated; all: %v", top, ids(rep.Findings))
	}
	if !strings.Contains(top.Explanation, "RPS") || !strings.Contains(top.Explanation, "one CPU") {
		t.Errorf("explanation does not say RPS cannot help on one core: %s", top.Explanation)
	}
	text := strings.Join(top.Evidence, "\n")
	for _, want := range []string{"system 63 %", "softirq 36 %", "439.00 Mbit/s", "no driver error or drop counter moved"} {
		if !strings.Contains(text, want) {
			t.Errorf("evidence lacks %q:\n%s", want, text)
		}
	}
}

func TestSeedI219IsAKnownNICIssueWithBothWorkarounds(t *testing.T) {
	rep := Diagnose(load(t, "seed/002-i219.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "known-nic-issue" {
		t.Fatalf("top finding %v, want known-nic-issue; all: %v", top, ids(rep.Findings))
	}
	var remedies []string
	for _, f := range rep.Findings {
		if f.ID == "known-nic-issue" {
			remedies = append(remedies, f.Remedy...)
		}
		if f.ID == "asymmetric-path" && f.Severity != finding.Info {
			t.Errorf("the asymmetry is the known issue's symptom, yet ranked %s", f.Severity)
		}
	}
	all := strings.Join(remedies, "\n")
	for _, want := range []string{"ethtool -K enp0s31f6 tso off gso off", "ip link set enp0s31f6 mtu 8500"} {
		if !strings.Contains(all, want) {
			t.Errorf("remedies lack %q:\n%s", want, all)
		}
	}
}

func TestSeedSmallUDPIsSmallPacketBoundNamingTheMitigations(t *testing.T) {
	rep := Diagnose(load(t, "seed/003-small-udp.json"))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "small-packet-bound" {
		t.Fatalf("top finding %v, want small-packet-bound; all: %v", top, ids(rep.Findings))
	}
	text := strings.Join(top.Evidence, "\n")
	for _, want := range []string{"280000 send calls/s of 64 bytes", "meltdown (PTI)", "spectre_v2 (IBRS (kernel))"} {
		if !strings.Contains(text, want) {
			t.Errorf("evidence lacks %q:\n%s", want, text)
		}
	}
}

func TestRemediesComputeValues(t *testing.T) {
	rep := Diagnose(load(t, "lab/sndbuf-limited.json"))
	top := rep.Top(finding.Warning)
	// The fixture's sender had tcp_wmem max 16384: four times that is below
	// Linux's 4 MiB default maximum, which the remedy proposes instead.
	if top == nil || !strings.Contains(top.Remedy[0], `net.ipv4.tcp_wmem="4096 8192 4194304"`) {
		t.Fatalf("remedy %v", top)
	}
	if !strings.HasPrefix(top.Remedy[0], "ip netns exec skbtrace-") {
		t.Errorf("remedy does not run in the sender's namespace: %s", top.Remedy[0])
	}
}

func TestEmptyEvidenceSaysThereWasNothingToJudge(t *testing.T) {
	rep := Diagnose(&Evidence{Seconds: 1})
	if len(rep.Findings) != 0 || rep.Healthy != "" || !strings.Contains(rep.NoTraffic, "no flow moved data") {
		t.Fatalf("findings %v, healthy %q, no traffic %q", ids(rep.Findings), rep.Healthy, rep.NoTraffic)
	}
}

func TestReportJSONHasTheDocumentedFields(t *testing.T) {
	var buf bytes.Buffer
	if err := Diagnose(load(t, "lab/packet-loss.json")).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Findings []map[string]any `json:"findings"`
		Evidence map[string]any   `json:"evidence"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Findings) == 0 || doc.Evidence == nil {
		t.Fatalf("no findings or evidence: %s", buf.String())
	}
	for _, key := range []string{"id", "severity", "title", "evidence", "explanation", "remedy", "scope", "impact", "impact_text"} {
		if _, ok := doc.Findings[0][key]; !ok {
			t.Errorf("finding lacks %q", key)
		}
	}
	if doc.Findings[0]["severity"] != "warning" {
		t.Errorf("severity %v, want the name", doc.Findings[0]["severity"])
	}
}

func TestTextReportPutsFindingsFirstWithEvidenceIndented(t *testing.T) {
	var buf bytes.Buffer
	if err := Diagnose(load(t, "lab/rate-shaped.json")).WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.HasPrefix(out, "1. [warning] rate-shaped: ") || !strings.Contains(out, "\n     - tbf ") || !strings.Contains(out, "   fix:\n") {
		t.Fatalf("unexpected layout:\n%s", out)
	}
}

func TestKnownIssueTableIsWellFormed(t *testing.T) {
	if len(KnownIssues) < 2 {
		t.Fatalf("%d known issues, want at least seed 002's two", len(KnownIssues))
	}
	for _, k := range KnownIssues {
		if k.ID == "" || k.Driver == "" || len(k.Devices) == 0 || len(k.Workaround) == 0 || k.Source == "" {
			t.Errorf("incomplete entry %+v", k)
		}
	}
}

func TestKernelVersionOrdersReleases(t *testing.T) {
	for _, c := range []struct{ a, b string }{{"4.14.200", "4.15"}, {"4.15.0-55-generic", "4.16"}, {"4.9", "4.15"}, {"5.4", "6.18.0"}} {
		if kernelVersion(c.a) >= kernelVersion(c.b) {
			t.Errorf("%s not before %s", c.a, c.b)
		}
	}
	if kernelVersion("4.15.0-55-generic") < kernelVersion("4.15") {
		t.Error("4.15.0-55 before 4.15")
	}
}

// withoutPerPacketEvents is a fixture as the default doctor (no --deep)
// would have gathered it: no dev_xmit, dev_recv, softirq or sock_io.
func withoutPerPacketEvents(ev *Evidence) *Evidence {
	for _, d := range ev.devices {
		d.Xmit, d.Recv = nil, nil
	}
	for i := range ev.CPUs {
		ev.CPUs[i].NetRx, ev.CPUs[i].NetTx = 0, 0
	}
	ev.SockIO = nil
	return ev
}

func TestWithoutPerPacketEventsTheFaultsAreStillFound(t *testing.T) {
	for name, want := range labExpect {
		if name == "gro-blocked" {
			// GRO that is on but does not merge shows only in dev_recv (or a capture).
			continue
		}
		rep := Diagnose(withoutPerPacketEvents(load(t, "lab/"+name+".json")))
		got := ""
		if top := rep.Top(finding.Warning); top != nil {
			got = top.ID
		}
		if got != want {
			t.Errorf("%s without per-packet events: top finding %q, want %q; findings: %v", name, got, want, ids(rep.Findings))
		}
	}
}

func TestFragmentsAreNotBlamedOnIPIDs(t *testing.T) {
	rep := Diagnose(fragmented(load(t, "lab/gro-off.json")))
	top := rep.Top(finding.Warning)
	if top == nil || top.ID != "ip-fragmented" {
		t.Fatalf("top finding %v, want ip-fragmented; all: %v", top, ids(rep.Findings))
	}
	text := strings.Join(top.Evidence, "\n")
	if !strings.Contains(text, "Ip.ReasmReqds") || !strings.Contains(text, "45.0 fragments per datagram") {
		t.Errorf("evidence lacks the reassembly counters:\n%s", text)
	}
}

// lockedSegmentation is the offload-disabled run's sender as a virtio NIC
// whose host gives it no offloads: TSO, scatter-gather and checksumming off
// [fixed], GSO requested but held off.
func lockedSegmentation(ev *Evidence) *Evidence {
	for _, d := range ev.devices {
		if d.Features == nil || d.Features[featTSO] {
			continue
		}
		d.Driver, d.Kind = "virtio_net", "device"
		d.Features[featSG], d.Features[featTxCsum] = false, false
		d.Fixed, d.Held = []string{featTSO, featSG, featTxCsum}, []string{featGSO}
	}
	return ev
}

func TestOffloadRemedyIsOneTheDeviceAccepts(t *testing.T) {
	for _, c := range []struct {
		name    string
		adjust  func(*Evidence) *Evidence
		want    string
		mustNot string
		inTitle string
	}{
		{"switchable", func(ev *Evidence) *Evidence { return ev }, "tso on gso on", "", "segmentation offload is off"},
		{"fixed", lockedSegmentation, "vnet_hdr", "", "cannot segment"},
		{"needs sg", func(ev *Evidence) *Evidence {
			lockedSegmentation(ev)
			for _, d := range ev.devices {
				if d.Fixed != nil {
					d.Fixed, d.Held = nil, []string{featTSO, featGSO}
				}
			}
			return ev
		}, "tx on sg on tso on gso on", "vnet_hdr", "cannot segment"},
	} {
		var got *finding.Finding
		fs := offloadDisabled(c.adjust(load(t, "lab/offload-disabled.json")))
		for i := range fs {
			if fs[i].Severity >= finding.Warning && !strings.HasPrefix(fs[i].Title, "GRO") {
				got = &fs[i]
			}
		}
		if got == nil {
			t.Errorf("%s: no offload-disabled warning: %v", c.name, ids(fs))
			continue
		}
		all := strings.Join(got.Remedy, "\n")
		if !strings.Contains(all, c.want) || c.mustNot != "" && strings.Contains(all, c.mustNot) {
			t.Errorf("%s: remedy should have %q and not %q:\n%s", c.name, c.want, c.mustNot, all)
		}
		if !strings.Contains(got.Title, c.inTitle) {
			t.Errorf("%s: title %q lacks %q", c.name, got.Title, c.inTitle)
		}
	}
}

func TestSpreadingReceiveWorkOffersOnlyQueuesTheDriverHas(t *testing.T) {
	for _, c := range []struct {
		max, used uint32
		want      string
		mustNot   string
	}{
		{0, 0, "one receive queue: steer its receive processing to other CPUs with RPS", "ethtool -L"},
		{1, 1, "one receive queue", "ethtool -L"},
		{4, 1, "ethtool -L eth0 combined 4 (1 of 4 queues in use)", "RPS"},
	} {
		ev := load(t, "seed/000-single-core.json")
		ev.CPUCount = 2 // RPS is no remedy on one CPU
		d := &ev.Namespaces[0].Devices[1]
		d.MaxChannels, d.CombinedChannels = c.max, c.used
		d.IRQs, d.Interrupts = []int{35}, []uint64{4000, 100}
		var remedy, evidence string
		for _, f := range cpuSaturated(ev) {
			remedy += strings.Join(f.Remedy, "\n")
			evidence += strings.Join(f.Evidence, "\n")
		}
		if !strings.Contains(evidence, "eth0 took 98 % of its 4100 interrupts on CPU 0 (/proc/interrupts, IRQ 35)") {
			t.Errorf("evidence lacks where the NIC's interrupts went:\n%s", evidence)
		}
		if c.max <= c.used && !strings.Contains(remedy, "/proc/irq/35/smp_affinity_list") {
			t.Errorf("remedy does not name the NIC's interrupt:\n%s", remedy)
		}
		if !strings.Contains(remedy, c.want) || strings.Contains(remedy, c.mustNot) {
			t.Errorf("max %d used %d: remedy should have %q and not %q:\n%s", c.max, c.used, c.want, c.mustNot, remedy)
		}
	}
}

// A receiving device that takes frames above its MTU (virtio-net's
// mergeable buffers) loses nothing: the mismatch is latent, not a black hole.
func TestMTUMismatchNothingLostIsLatent(t *testing.T) {
	ev := load(t, "lab/mtu-mismatch.json")
	for i := range ev.Flows {
		ev.Flows[i].Retrans, ev.Flows[i].TraceRetrans = 0, 0
		ev.Flows[i].BytesAcked = max(ev.Flows[i].BytesAcked, 100<<20)
	}
	fs := mtuMismatch(ev)
	if len(fs) == 0 {
		t.Fatal("no mtu-mismatch finding")
	}
	if fs[0].Severity != finding.Warning || !strings.Contains(fs[0].Title, "which took them") {
		t.Errorf("got %s %q, want a latent warning", fs[0].Severity, fs[0].Title)
	}
	if fs := mtuMismatch(load(t, "lab/mtu-mismatch.json")); len(fs) == 0 || fs[0].Severity != finding.Critical {
		t.Errorf("the lab's black hole is no longer critical: %v", ids(fs))
	}
}

// stageWait sets every flow's timing of stage to a wait of us: its median,
// p75, mean and wait weighted by time.
func stageWait(stage string, us uint64) func(*Evidence) *Evidence {
	return func(ev *Evidence) *Evidence {
		for i := range ev.Flows {
			if st := ev.Flows[i].Stage(stage); st != nil {
				st.P50Us, st.P75Us, st.MeanUs, st.TimeWeightedUs = us, us, float64(us), float64(us)
				st.P99Us = max(st.P99Us, us)
			}
		}
		return ev
	}
}

// autotunedQueue keeps send-queue-bloat's wait with the most unsent bytes
// an autotuned buffer holds (tcp_wmem's default 4 MiB): the lossy stream of
// packet-loss in the kernel matrix, 864 Mbit/s with a p99 wait of 49 ms.
func autotunedQueue(ev *Evidence) *Evidence {
	for i := range ev.Flows {
		if ev.Flows[i].MaxNotSent > 0 {
			ev.Flows[i].MaxNotSent = 3_900_000
		}
	}
	return ev
}

// controlConnection leaves every flow the bytes of iperf3's control
// connection: 226 bytes in 3 s, whose messages its server reads when it
// gets to them.
func controlConnection(ev *Evidence) *Evidence {
	for i := range ev.Flows {
		f := &ev.Flows[i]
		f.BytesAcked, f.BytesReceived = min(f.BytesAcked, 226), min(f.BytesReceived, 226)
	}
	return ev
}

// localQdiscQueue swaps the send queue's and the qdisc's timings: the local
// qdisc holds the bytes (many flows, or traffic TSQ does not hold back).
func localQdiscQueue(ev *Evidence) *Evidence {
	for i := range ev.Flows {
		f := &ev.Flows[i]
		if sq, qd := f.Stage("send_queue"), f.Stage("qdisc"); sq != nil && qd != nil {
			*sq, *qd = *qd, *sq
			sq.Stage, qd.Stage = "send_queue", "qdisc"
		}
	}
	return ev
}

// busyCPU makes the first CPU 99 % busy in system time and softirq: a
// reader there waits for the CPU (offload-disabled-sg-off, --deep, read
// 8.9 ms so).
func busyCPU(ev *Evidence) *Evidence {
	ev.CPUs[0].System, ev.CPUs[0].Softirq, ev.CPUs[0].User, ev.CPUs[0].Idle = 0.64, 0.35, 0, 0.01
	return ev
}

// partlyBusyCPU leaves CPU 0 with time to spare, 72 % busy, as the parallel
// tests beside CI's lab run left it: a reader there is late by itself.
func partlyBusyCPU(ev *Evidence) *Evidence {
	ev.CPUs[0].System, ev.CPUs[0].Softirq, ev.CPUs[0].User, ev.CPUs[0].Idle = 0.16, 0.17, 0.39, 0.28
	return ev
}

// busyWith applies adjust, then busyCPU.
func busyWith(adjust func(*Evidence) *Evidence) func(*Evidence) *Evidence {
	return func(ev *Evidence) *Evidence { return busyCPU(adjust(ev)) }
}

// loneStall gives stage one stalled byte among many short ones: a wait
// weighted by time of 178 ms, a p75 of 40 us (packet-loss-router-forward's
// reader in CI).
func loneStall(stage string) func(*Evidence) *Evidence {
	return func(ev *Evidence) *Evidence {
		for i := range ev.Flows {
			if st := ev.Flows[i].Stage(stage); st != nil {
				st.P50Us, st.P75Us, st.P99Us, st.MeanUs, st.TimeWeightedUs = 20, 40, 120, 400, 178_000
			}
		}
		return ev
	}
}
