package doctor

import (
	"bytes"
	"encoding/json"
	"net/netip"
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
	for _, want := range []string{"system 63%", "softirq 36%", "439.00 Mbit/s", "no driver error or drop counter moved"} {
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
	if len(rep.Findings) != 0 || !strings.Contains(rep.Healthy, "no TCP flow moved data") {
		t.Fatalf("findings %v, healthy %q", ids(rep.Findings), rep.Healthy)
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
		if !strings.Contains(evidence, "eth0 took 98% of its 4100 interrupts on CPU 0 (/proc/interrupts, IRQ 35)") {
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
		if f.Severity < finding.Warning || !strings.Contains(strings.Join(f.Evidence, "\n"), "CPU 1 meanwhile was 30% busy") {
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
	if f := judgeBeside(0.99, 0.87, 0.15); f.Severity != finding.Warning || !strings.Contains(f.Explanation, "93% on average") {
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
