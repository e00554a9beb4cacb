package compare

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/profile"
)

var update = flag.Bool("update", false, "rewrite the derived fixtures in testdata/")

func loadFile(t *testing.T, path string) *Run {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Load(path, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seed003After derives seed 003's bad run from a real profile of 64-byte
// UDP: the same CPU-bound workload on a kernel whose syscall entry carries
// more mitigation work. In the same CPU time a fifth fewer packets get
// through, so every busy sample keeps four fifths of its count, and the
// freed fifth is spent in the entry path of the syscalls (mostly
// entry_SYSCALL_64 itself, some in a retpoline thunk); the mitigations in
// force differ.
func seed003After(before *profile.Profile) *profile.Profile {
	after := &profile.Profile{Meta: before.Meta}
	type task struct {
		comm      string
		pid, tgid uint32
		cpu       int
	}
	weight := map[task]uint64{} // each task's syscall samples
	var order []task
	var carry float64 // error diffusion keeps the kept total at four fifths
	var moved, syscalls uint64
	for _, s := range before.Samples {
		if s.Context == profile.Idle {
			after.Samples = append(after.Samples, s)
			continue
		}
		carry += float64(s.Count) * 4 / 5
		kept := s
		kept.Count = uint64(carry)
		carry -= float64(kept.Count)
		if kept.Count > 0 {
			after.Samples = append(after.Samples, kept)
		}
		moved += s.Count - kept.Count
		if s.Context == profile.Syscall {
			k := task{s.Comm, s.Pid, s.Tgid, s.CPU}
			if _, seen := weight[k]; !seen {
				order = append(order, k)
			}
			weight[k] += s.Count
			syscalls += s.Count
		}
	}
	carry = 0
	for _, k := range order {
		carry += float64(moved) * float64(weight[k]) / float64(syscalls)
		n := uint64(carry)
		carry -= float64(n)
		base := profile.Sample{Comm: k.comm, Pid: k.pid, Tgid: k.tgid, CPU: k.cpu, Context: profile.Syscall}
		entry, thunk := base, base
		entry.Kernel, entry.Phase, entry.Count = []string{"entry_SYSCALL_64"}, profile.PhaseSyscall, n*7/10
		thunk.Kernel = []string{"__x86_indirect_thunk_rax", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"}
		thunk.Phase, thunk.Count = profile.PhaseMitigations, n-entry.Count
		for _, s := range []profile.Sample{entry, thunk} {
			if s.Count > 0 {
				after.Samples = append(after.Samples, s)
			}
		}
	}
	t := &after.Meta.Traffic
	t.TxSkbs, t.TxPkts, t.TxBytes = t.TxSkbs*4/5, t.TxPkts*4/5, t.TxBytes*4/5
	t.RxSkbs, t.RxPkts, t.RxBytes = t.RxSkbs*4/5, t.RxPkts*4/5, t.RxBytes*4/5
	set := *before.Meta.Settings
	set.Mitigations = []host.Mitigation{
		{Name: "retbleed", State: "Mitigation: untrained return thunk; SMT disabled"},
		{Name: "spectre_v1", State: "Mitigation: usercopy/swapgs barriers and __user pointer sanitization"},
		{Name: "spectre_v2", State: "Mitigation: IBRS; IBPB: conditional; STIBP: disabled; RSB filling"},
	}
	after.Meta.Settings = &set
	return after
}

func TestSeed003NamesSyscallEntryAndMitigations(t *testing.T) {
	before := filepath.Join("testdata", "seed003-before.pb.gz")
	afterPath := filepath.Join("testdata", "seed003-after.pb.gz")
	if *update {
		f, err := os.Open(before)
		if err != nil {
			t.Fatal(err)
		}
		p, err := profile.ReadPprof(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := seed003After(p).WritePprof(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(afterPath, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Compare(loadFile(t, before), loadFile(t, afterPath))
	if err != nil {
		t.Fatal(err)
	}
	if r.Unit != "packet" {
		t.Errorf("64-byte datagrams were costed per %s, not per packet", r.Unit)
	}
	if top := r.Phases[0]; top.Phase != profile.PhaseSyscall || top.B <= top.A || top.Share < 0.5 {
		t.Errorf("syscall entry is not the phase that grew, with most of the change: %+v", r.Phases[:3])
	}
	for _, want := range []string{"CPU per packet +", "in syscall entry/exit", "mitigations differ: retbleed; spectre_v2"} {
		if !strings.Contains(r.Headline, want) {
			t.Errorf("headline lacks %q: %s", want, r.Headline)
		}
	}
	if len(r.Findings) != 1 || r.Findings[0].Severity.String() != "warning" || !strings.Contains(strings.Join(r.Findings[0].Remedy, "\n"), "sendmmsg") {
		t.Errorf("want one warning whose remedy batches syscalls, got %+v", r.Findings)
	}
	if f := r.Findings[0]; f.Confidence == "" || len(f.Confirm) == 0 {
		t.Errorf("the regression does not say how sure it is and what confirms it: confidence %q, confirm %q", f.Confidence, f.Confirm)
	}
}

func TestNetfilterChainIsThePhaseThatGrew(t *testing.T) {
	r, err := Compare(loadFile(t, "testdata/nft-good.pb.gz"), loadFile(t, "testdata/nft-bad.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Phases[0].Phase != profile.PhaseNetfilter || r.Phases[0].A != 0 {
		t.Errorf("netfilter should grow from nothing: %+v", r.Phases[0])
	}
	if !strings.Contains(r.Headline, "ns in netfilter") || !strings.Contains(r.Findings[0].Remedy[0], "nft list ruleset") {
		t.Errorf("headline %q, remedy %q", r.Headline, r.Findings[0].Remedy)
	}
}

func TestSameRunShowsNoChange(t *testing.T) {
	a := loadFile(t, "testdata/nft-good.pb.gz")
	r, err := Compare(a, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Settings) != 0 || len(r.Findings) != 0 {
		t.Errorf("a run against itself: settings %v, findings %v", r.Settings, r.Findings)
	}
	for _, m := range r.Metrics {
		if m.Change != 0 {
			t.Errorf("%s changed %v against itself", m.Name, m.Change)
		}
	}
}

func TestBadInputIsRefusedWithOneLine(t *testing.T) {
	good, err := os.ReadFile("testdata/nft-good.pb.gz")
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{
		"empty":     nil,
		"text":      []byte("root:x:0:0:root:/root:/bin/bash\n"),
		"truncated": good[:len(good)/2],
		"pcap":      {0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0},
		"json":      []byte(`{"findings": []}`),
		"notrace":   []byte("SKBTRACEgarbage"),
	} {
		_, err := Load(name, bytes.NewReader(in), nil)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: want a one-line error, got %v", name, err)
		}
	}
}

func TestUnlikeRunsAreNotCompared(t *testing.T) {
	prof := loadFile(t, "testdata/nft-good.pb.gz")
	rep := &Run{Kind: KindReport, Name: "r.json", Seconds: 1}
	if _, err := Compare(prof, rep); err == nil || !strings.Contains(err.Error(), "two of a kind") {
		t.Errorf("a profile against a report: %v", err)
	}
	other := *prof
	other.Workload = []string{"nginx"}
	if _, err := Compare(prof, &other); !errors.Is(err, ErrDifferentWorkloads) {
		t.Errorf("different workloads: %v", err)
	}
}

func TestTracesCompare(t *testing.T) {
	for _, order := range []string{"le", "be"} {
		a := loadFile(t, filepath.Join("..", "..", "cli", "testdata", "fixture-"+order+".trace"))
		if a.Kind != KindTrace || !a.HasTraffic && a.TCPBytes == 0 && len(a.Limits) == 0 {
			t.Fatalf("%s: the trace measured nothing: %+v", order, a)
		}
		r, err := Compare(a, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Findings) != 0 {
			t.Errorf("a trace against itself: %v", r.Findings)
		}
	}
}

func TestSettingsPairLabNamesAndGroupOffloads(t *testing.T) {
	dev := func(name string, tso bool) host.DeviceSettings {
		return host.DeviceSettings{Name: name, Kind: "veth", MTU: 1500,
			Features: map[string]bool{"tx-tcp-segmentation": tso, "tx-generic-segmentation": tso, "rx-gro": false}}
	}
	a := &host.Settings{Kernel: "6.1.0", Namespaces: []host.NetnsSettings{
		{Name: "host", Sysctls: map[string]string{"net.core.rmem_max": "212992"}},
		{Name: "skbtrace-100-1-snd", Devices: []host.DeviceSettings{dev("skbs100-1", true)}},
	}}
	b := &host.Settings{Kernel: "6.12.0", Namespaces: []host.NetnsSettings{
		{Name: "host", Sysctls: map[string]string{"net.core.rmem_max": "4194304"}},
		{Name: "skbtrace-200-7-snd", Devices: []host.DeviceSettings{dev("skbs200-7", false)}},
	}}
	changes := DiffSettings(a, b)
	kinds := map[string]int{}
	for _, c := range changes {
		kinds[c.Kind]++
	}
	if kinds["kernel"] != 1 || kinds["sysctl"] != 1 || kinds["offload"] != 2 {
		t.Fatalf("changes %+v", changes)
	}
	r := &Result{A: &Run{}, B: &Run{}, Settings: changes}
	if got, want := r.settingsText(), "offloads differ: skbs200-7 tx-generic-segmentation, tx-tcp-segmentation on → off; sysctls differ: net.core.rmem_max"; got != want {
		t.Errorf("settings text\n got %s\nwant %s", got, want)
	}
}

func TestChangeFromNothing(t *testing.T) {
	if c := change(0, 5); !math.IsInf(c, 1) || pct(c) != "from none" {
		t.Errorf("change(0, 5) = %v (%s)", c, pct(c))
	}
	if change(0, 0) != 0 || change(2, 1) != -0.5 {
		t.Error("change is (b-a)/a")
	}
}

// Of a trace, the send limits are the senders': a receiver's socket, all
// app, is not averaged in.
func TestTraceLimitsAreTheSenders(t *testing.T) {
	local, peer := netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:5201")
	run := func(sock uint64, l, p netip.AddrPort, r event.SendlimReason, begin, end int64) *event.Event {
		return &event.Event{Type: event.TypeTCPSendlim, Time: end, Begin: begin, Sendlim: event.TCPSendlim{
			Socket: event.Socket{Sock: sock, Local: l, Peer: p}, Reason: r, Begin: begin, Cnt: 1}}
	}
	st := analyze.NewStat()
	st.Add(run(0xa, local, peer, event.SendlimSndbuf, 0, 960_000_000))
	st.Add(run(0xa, local, peer, event.SendlimApp, 960_000_000, 1_000_000_000))
	st.Add(run(0xb, peer, local, event.SendlimApp, 0, 1_000_000_000))
	r := FromTrace("t", st, analyze.NewSummary())
	if got := r.Limits["sndbuf"]; math.Abs(got-0.96) > 0.001 {
		t.Errorf("sndbuf share %.3f, want the sender's 0.96: %v", got, r.Limits)
	}
}

// iperf3Run is what testdata/record-iperf3.sh measured beside a recording.
type iperf3Run struct {
	RecordWall  float64 `json:"record_wall_s"`
	CommandWall float64 `json:"command_wall_s"`
	SentBps     float64 `json:"iperf3_sent_bps"`
	ReceivedBps float64 `json:"iperf3_received_bps"`
}

// A trace's duration is the recording's, not its sampled windows' (0.1 s
// of a 2.2 s recording), and its TCP goodput is iperf3's: two fresh
// default-family recordings of 2 s loopback iperf3 streams at 400 and
// 800 Mbit/s (testdata/record-iperf3.sh).
func TestTraceRatesAreTheRecordingsAndIperf3s(t *testing.T) {
	var runs [2]*Run
	for i, name := range []string{"iperf3-400m", "iperf3-800m"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var want iperf3Run
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		r := loadFile(t, filepath.Join("testdata", name+".trace"))
		runs[i] = r
		// The recording holds the command and runs a little longer (it
		// attaches before it and drains after): within the record
		// process's own wall time.
		if r.Seconds < want.CommandWall || r.Seconds > want.RecordWall {
			t.Errorf("%s: %.2f s, want between the command's %.2f s and the record's %.2f s", name, r.Seconds, want.CommandWall, want.RecordWall)
		}
		if got := r.Goodput(); math.Abs(got/want.ReceivedBps-1) > 0.03 {
			t.Errorf("%s: TCP goodput %.4g bit/s, iperf3 received %.4g", name, got, want.ReceivedBps)
		}
		if r.TrafficShare != 0.05 {
			t.Errorf("%s: device counters sampled %v of each interval, want the default 0.05", name, r.TrafficShare)
		}
	}
	res, err := Compare(runs[0], runs[1])
	if err != nil {
		t.Fatal(err)
	}
	g, ok := res.Metric("TCP goodput")
	if !ok || math.Abs(g.Change-1) > 0.05 {
		t.Errorf("goodput change %+v, want +100 %%", g)
	}
	if !strings.HasPrefix(res.Headline, "TCP goodput +") || strings.Contains(res.Headline, "throughput") {
		t.Errorf("headline %q: want the counted goodput, not the sampled windows' estimate", res.Headline)
	}
	if len(res.Findings) != 0 && res.Findings[0].Severity == finding.Warning {
		t.Errorf("doubled goodput warned of a regression: %s", res.Findings[0].Title)
	}
	if tp, _ := res.Metric("throughput"); !tp.Sampled {
		t.Errorf("throughput from sampled device counters not marked sampled: %+v", tp)
	}
}
