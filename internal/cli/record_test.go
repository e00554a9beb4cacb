package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/host"
)

// record --cpu 7 on a 2-CPU host recorded nothing and exited 0.
func TestRecordRefusesCPUsThatAreNotOnline(t *testing.T) {
	online, err := host.OnlineCPUs()
	if err != nil {
		t.Skip(err)
	}
	beyond := slices.Max(online) + 1
	var out, errs bytes.Buffer
	code := Main([]string{"record", "-d", "1", "--cpu", fmt.Sprintf("0,%d", beyond), "-o", filepath.Join(t.TempDir(), "x.trace")}, nil, &out, &errs)
	want := fmt.Sprintf("CPU %d is not online (online: %s)", beyond, cpuRanges(online))
	if code != 2 || !strings.Contains(errs.String(), want) {
		t.Errorf("record --cpu 0,%d: exit %d, %q; want exit 2 saying %q", beyond, code, errs.String(), want)
	}
	if err := onlineCPUs([]int{3, 9, 2, 8, 9}, []int{0, 1}); err == nil || err.Error() != "CPUs 2-3,8-9 are not online (online: 0-1)" {
		t.Errorf("onlineCPUs: %v", err)
	}
	if err := onlineCPUs([]int{0, 1}, []int{0, 1, 2}); err != nil {
		t.Errorf("online CPUs refused: %v", err)
	}
}

// --ring and --ring-size were easy to mix up: the new names work, the old
// ones still do, saying they are deprecated.
func TestRecordBufferFlagsAndTheirOldNames(t *testing.T) {
	for _, c := range []struct {
		args []string
		says []string
	}{
		{[]string{"--kernel-buffer", "1000"}, []string{"--kernel-buffer 1000 is not a power of two"}},
		{[]string{"--ring-size", "1000"}, []string{"--ring-size 1000 is not a power of two"}},
		{[]string{"--trigger", "rto", "--flight-memory", "10K"}, []string{"--flight-memory 10K is below 1M"}},
		{[]string{"--trigger", "rto", "--ring", "10K"}, []string{"--ring 10K is below 1M"}},
		{[]string{"--ring", "10M"}, []string{"--ring goes with --trigger"}},
	} {
		var out, errs bytes.Buffer
		code := Main(append([]string{"record", "-o", filepath.Join(t.TempDir(), "x.trace")}, c.args...), nil, &out, &errs)
		if code != 2 || out.Len() > 0 {
			t.Errorf("record %v: exit %d, want 2, and %q on standard output: %s", c.args, code, out.String(), errs.String())
		}
		for _, s := range c.says {
			if !strings.Contains(errs.String(), s) {
				t.Errorf("record %v does not say %q: %s", c.args, s, errs.String())
			}
		}
	}
}

func TestRecordOldFlagNamesSetTheNewOnes(t *testing.T) {
	var r recordFlags
	fs := pflag.NewFlagSet("record", pflag.ContinueOnError)
	r.bind(fs)
	if err := fs.Parse([]string{"--ring-size", "16M", "--ring", "128M"}); err != nil {
		t.Fatal(err)
	}
	if r.ringSize != "16M" || r.ring != "128M" {
		t.Errorf("--ring-size 16M --ring 128M gave kernel buffer %s, flight memory %s", r.ringSize, r.ring)
	}
	if given(fs, "kernel-buffer") != "--ring-size" || given(fs, "flight-memory") != "--ring" {
		t.Errorf("errors would not name the flags as given")
	}
	for old := range renamedFlags {
		if !fs.Lookup(old).Hidden {
			t.Errorf("--%s is shown in --help", old)
		}
	}
}

// A command that cannot run is refused before anything is recorded: the
// earlier trace stays, and no empty one is written.
func TestRecordRefusesACommandThatCannotRunBeforeWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.trace")
	if err := os.WriteFile(path, []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"record", "live"} {
		var out, errs bytes.Buffer
		args := []string{cmd, "--", "/nonexistent/h1-no-such-command"}
		if cmd == "record" {
			args = append([]string{cmd, "-o", path}, args[1:]...)
		}
		if cmd == "live" {
			args = []string{cmd, "--", "h1-no-such-command"}
		}
		code := Main(args, nil, &out, &errs)
		want := "skbtrace: cannot run /nonexistent/h1-no-such-command: no such file or directory\n"
		if cmd == "live" {
			want = "skbtrace: cannot run h1-no-such-command: not found in $PATH\n"
		}
		if code != 1 || errs.String() != want {
			t.Errorf("%s -- a missing command: exit %d, %q", cmd, code, errs.String())
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "earlier" {
		t.Errorf("the earlier trace was overwritten: %q", b)
	}
}

// record says what it wrote, and where.
func TestRecordTotalsNameTheOutput(t *testing.T) {
	var b bytes.Buffer
	printTotals(&b, collect.Totals{Events: map[string]uint64{"tcp_conn": 2}, Bytes: 4096, Duration: 5 * time.Second}, "run.trace")
	if want := "skbtrace: recorded 2 events in 5.0 s, 4.0 KiB to run.trace (tcp_conn 2); lost 0\n"; b.String() != want {
		t.Errorf("totals %q, want %q", b.String(), want)
	}
}

// A recording that cannot attach leaves an earlier trace of its name as it
// was: the file is created at the header, once the programs are attached.
func TestATraceFileIsCreatedAtItsFirstWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.trace")
	if err := os.WriteFile(path, []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &createOnWrite{path: path}
	if err := f.check(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "earlier" {
		t.Errorf("a run that wrote nothing replaced the earlier trace: %q", b)
	}
	if _, err := f.Write([]byte("header")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "header" {
		t.Errorf("the trace holds %q, want what was written", b)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing", "run.trace"), t.TempDir()} {
		if err := (&createOnWrite{path: bad}).check(); err == nil || !strings.HasPrefix(err.Error(), "creating trace file") {
			t.Errorf("%s: %v, want a refusal saying what was being created", bad, err)
		}
	}
}
