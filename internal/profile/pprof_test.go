package profile

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// testProfile is two CPUs for two seconds at 99 Hz: 396 samples.
func testProfile() *Profile {
	send := slices.Concat(
		[]string{"memcpy_orig", "_copy_from_iter", "ip_generic_getfrag", "__ip_append_data", "ip_make_skb",
			"udp_sendmsg"}, syscallSendto)
	return &Profile{
		Meta: Meta{
			Version: "v1.2.3", Hostname: "bench-1", Kernel: "6.8.0-45-generic", Clock: "cpu-clock", Hz: 99,
			Seconds: 2, CPUs: []int{0, 1}, Command: []string{"iperf3", "-u", "-c", "10.0.0.2"},
			Traffic: Traffic{Counted: true, TxSkbs: 90000, TxPkts: 90000, TxBytes: 130_000_000, RxSkbs: 12,
				RxPkts: 12, RxBytes: 900},
			Dropped: 3,
			Settings: &host.Settings{Kernel: "6.8.0-45-generic",
				Mitigations: []host.Mitigation{{Name: "spectre_v2", State: "Mitigation: Retpolines; IBPB: conditional"}}},
			Notes: []string{"packets counted on all devices"},
		},
		Samples: []Sample{
			{Count: 150, Pid: 4242, Tgid: 4240, CPU: 1, Comm: "iperf3", Kernel: send,
				User: []string{"__libc_sendto", "iperf_udp_send", "main"}, Context: Syscall, Phase: PhaseCopy},
			{Count: 40, Pid: 4242, Tgid: 4240, CPU: 1, Comm: "iperf3",
				Kernel: slices.Concat([]string{"nft_do_chain.isra.0", "nft_do_chain_ipv4", "nf_hook_slow"}, loopbackRx),
				User:   []string{"__libc_sendto", "iperf_udp_send", "main"}, Context: Softirq, Phase: PhaseNetfilter},
			// The same name in user space and the kernel must stay two functions.
			{Count: 6, Pid: 4242, Tgid: 4240, CPU: 0, Comm: "iperf3", User: []string{"memcpy_orig", "main"},
				Context: User, Phase: PhaseUser},
			{Count: 200, Pid: 0, CPU: 0, Comm: "swapper/0", Kernel: idleLoop, Context: Idle, Phase: PhaseIdle},
		},
	}
}

func writePprof(t *testing.T, p *Profile) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := p.WritePprof(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compare reads back what it wrote: the metadata and every sample with its
// labels and frames on the right side of the kernel/user line.
func TestPprofRoundTrip(t *testing.T) {
	in := testProfile()
	out, err := ReadPprof(bytes.NewReader(writePprof(t, in)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Meta, in.Meta) {
		t.Errorf("meta:\n got %+v\nwant %+v", out.Meta, in.Meta)
	}
	if len(out.Samples) != len(in.Samples) {
		t.Fatalf("%d samples, want %d", len(out.Samples), len(in.Samples))
	}
	for i, want := range in.Samples {
		got := out.Samples[i]
		// pprof has no empty lists: nil and empty frames are the same.
		if len(got.Kernel) == 0 && len(want.Kernel) == 0 {
			got.Kernel = want.Kernel
		}
		if len(got.User) == 0 && len(want.User) == 0 {
			got.User = want.User
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("sample %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	want := 1e9 / 99.0
	if ns := out.NsPerSample(); ns != want {
		t.Errorf("NsPerSample = %v, want %v", ns, want)
	}
}

// A profile taken by an older writer or another tool may lack the phase
// labels: reading classifies its samples from their frames.
func TestReadPprofClassifiesUnlabelled(t *testing.T) {
	kernel := &profile.Mapping{ID: 1, File: kernelMapping}
	fn := &profile.Function{ID: 1, Name: "tcp_sendmsg_locked"}
	entry := &profile.Function{ID: 2, Name: "do_syscall_64"}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}},
		Mapping:    []*profile.Mapping{kernel},
		Function:   []*profile.Function{fn, entry},
		Location: []*profile.Location{
			{ID: 1, Mapping: kernel, Line: []profile.Line{{Function: fn}}},
			{ID: 2, Mapping: kernel, Line: []profile.Line{{Function: entry}}},
		},
		Comments: []string{metaComment + `{"clock":"cpu-clock","hz":99}`},
	}
	p.Sample = []*profile.Sample{{Value: []int64{7}, Location: p.Location, NumLabel: map[string][]int64{"pid": {9}}}}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPprof(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Samples) != 1 {
		t.Fatalf("%d samples, want 1", len(got.Samples))
	}
	s := got.Samples[0]
	if s.Count != 7 || s.Context != Syscall || s.Phase != PhaseTCP || len(s.User) != 0 {
		t.Errorf("sample = %+v, want 7 tcp samples in a syscall and no user frames", s)
	}
}

// What skbtrace writes must open in the tools it is written for.
func TestPprofReadByGoTool(t *testing.T) {
	goBin := testenv.Tool(t, "go")
	file := filepath.Join(t.TempDir(), "cpu.pprof")
	if err := os.WriteFile(file, writePprof(t, testProfile()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "tool", "pprof", "-top", file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	// memcpy_orig is the kernel leaf of the busiest non-idle sample.
	if !strings.Contains(string(out), "memcpy_orig") || !strings.Contains(string(out), "pv_native_safe_halt") {
		t.Errorf("go tool pprof -top does not list the profile's functions:\n%s", out)
	}
}

func TestReadPprofTruncated(t *testing.T) {
	b := writePprof(t, testProfile())
	_, err := ReadPprof(bytes.NewReader(b[:len(b)/2]))
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("ReadPprof(half a file) = %v, want an error saying it is truncated", err)
	}
}

// compare tells a profile from another profiler apart from a damaged one.
func TestReadPprofForeign(t *testing.T) {
	fn := &profile.Function{ID: 1, Name: "main.main"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
		Function:   []*profile.Function{fn},
		Location:   []*profile.Location{loc},
		Sample:     []*profile.Sample{{Value: []int64{1, 10_000_000}, Location: []*profile.Location{loc}}},
		Comments:   []string{"a comment of another tool"},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPprof(&buf); !errors.Is(err, ErrNotSkbtrace) {
		t.Errorf("ReadPprof(a Go CPU profile) = %v, want ErrNotSkbtrace", err)
	}
}

func TestReadPprofGarbage(t *testing.T) {
	valid := writePprof(t, testProfile())
	badMeta := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}},
		Comments: []string{metaComment + "{not json"}}
	var badMetaBuf bytes.Buffer
	if err := badMeta.Write(&badMetaBuf); err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(valid)
	for i := 20; i < len(flipped); i += 7 {
		flipped[i] ^= 0x5a
	}
	for name, in := range map[string][]byte{
		"empty":            nil,
		"text":             []byte("this is not a profile\n"),
		"binary":           {0x00, 0xff, 0x13, 0x37, 0x08, 0x96, 0x01, 0x12},
		"gzip header only": {0x1f, 0x8b},
		"gzip of garbage":  append([]byte{0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0xff}, bytes.Repeat([]byte{0xab}, 64)...),
		"corrupted":        flipped,
		"bad metadata":     badMetaBuf.Bytes(),
	} {
		t.Run(name, func(t *testing.T) {
			if p, err := ReadPprof(bytes.NewReader(in)); err == nil {
				t.Errorf("ReadPprof = %d samples, want an error", len(p.Samples))
			}
		})
	}
}
