package cli

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The page and the JSON document both on standard output would mix: stat
// refuses it as a usage error and writes nothing, as the README says.
func TestStatRefusesTwoOutputsOnStdout(t *testing.T) {
	in := filepath.Join(t.TempDir(), "run.trace")
	if err := os.WriteFile(in, fixture(t, binary.LittleEndian), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	code := Main([]string{"stat", in, "--html", "-", "--json"}, bytes.NewReader(nil), &out, &errs)
	if code != 2 || out.Len() != 0 || !strings.Contains(errs.String(), "--html, --json all go to standard output") {
		t.Errorf("exit %d, %d bytes out, stderr %q; want exit 2, nothing written and the two flags named", code, out.Len(), errs.String())
	}
}

// copyTestdata copies testdata's files into dir, gunzipping those that end
// in .gz, and returns the paths by name (less .gz).
func copyTestdata(t *testing.T, dir string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
			name = strings.TrimSuffix(name, ".gz")
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = p
	}
	return out
}

// Files of different recordings are refused by name, not merged into one
// recording; a rotation's files (record --max-size 1M around a 4 s loopback
// iperf3) still read as one. run-a and run-b are two recordings of
// `record -e tcp_conn -- iperf3 -c 127.0.0.1 -t 1`.
func TestTraceFilesOfDifferentRecordingsAreRefused(t *testing.T) {
	dir := t.TempDir()
	p := copyTestdata(t, dir, "run-a.trace", "run-b.trace", "rotated.trace.000.gz", "rotated.trace.001.gz")
	copyA := filepath.Join(dir, "run-a-copy.trace")
	b, _ := os.ReadFile(p["run-a.trace"])
	if err := os.WriteFile(copyA, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rot0, rot1 := p["rotated.trace.000"], p["rotated.trace.001"]
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stat", filepath.Join(dir, "run-*.trace")}, "run-a-copy.trace and " + p["run-a.trace"] + " both begin the same recording (a copy?)"},
		{[]string{"stat", p["run-a.trace"], p["run-b.trace"]}, p["run-a.trace"] + " and " + p["run-b.trace"] + " are files of different recordings (begun "},
		{[]string{"parse", p["run-b.trace"], rot1}, "are files of different recordings"},
		{[]string{"export", p["run-a.trace"], p["run-b.trace"], "--perfetto", filepath.Join(dir, "x.json")}, "are files of different recordings"},
		{[]string{"stat", rot1, rot0}, rot0 + " does not follow " + rot1},
		{[]string{"stat", rot0, rot1, rot1}, rot1 + " does not follow " + rot1},
	} {
		var out, errs bytes.Buffer
		code := Main(c.args, bytes.NewReader(nil), &out, &errs)
		if code != 1 || out.Len() != 0 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%v: exit %d, %d bytes out, stderr %q; want exit 1 and %q", c.args, code, out.Len(), errs.String(), c.want)
		}
	}
	// The rotation: its two files by pattern, every event once.
	var whole, errs bytes.Buffer
	if code := Main([]string{"stat", filepath.Join(dir, "rotated.trace.*"), "--json"}, nil, &whole, &errs); code != 0 {
		t.Fatalf("stat of the rotation: exit %d: %s", code, errs.String())
	}
	var st struct{ Events uint64 }
	if err := json.Unmarshal(whole.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, f := range []string{rot0, rot1} {
		var out bytes.Buffer
		if code := Main([]string{"stat", f, "--json"}, nil, &out, &errs); code != 0 {
			t.Fatalf("stat %s: exit %d: %s", f, code, errs.String())
		}
		var one struct{ Events uint64 }
		if err := json.Unmarshal(out.Bytes(), &one); err != nil {
			t.Fatal(err)
		}
		sum += one.Events
	}
	if st.Events == 0 || st.Events != sum {
		t.Errorf("the rotation read as %d events, its files alone %d", st.Events, sum)
	}
}

// An input that is not a trace is named for what it is, by every command
// that reads traces.
func TestNotATraceSaysWhatItIs(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	capture, err := os.ReadFile(filepath.Join("..", "analyze", "pcap", "testdata", "loss-sender.pcap.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	pcap, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		write("notes.txt", []byte("buy milk\n")): `notes.txt is text (it starts "buy milk"), not a skbtrace trace`,
		write("capture.pcap", pcap):              "capture.pcap is a pcap capture, not a skbtrace trace: use skbtrace pcap",
		write("capture.pcap.gz", capture):        "capture.pcap.gz is a gzip-compressed pcap capture, not a skbtrace trace: use skbtrace pcap",
		write("capture.pcapng", []byte("\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a")): "capture.pcapng is a pcapng capture, not a skbtrace trace: use skbtrace pcap",
		write("empty.trace", nil): "empty.trace is empty, not a skbtrace trace",
	}
	for in, want := range cases {
		for _, args := range [][]string{{"stat", in}, {"parse", in}, {"export", in, "--perfetto", filepath.Join(dir, "x.json")}} {
			var out, errs bytes.Buffer
			code := Main(args, bytes.NewReader(nil), &out, &errs)
			if code != 1 || errs.String() != "skbtrace: "+filepath.Join(dir, want)+"\n" {
				t.Errorf("%v: exit %d, stderr %q; want exit 1 and %q", args, code, errs.String(), want)
			}
		}
	}
	// Standard input is named so.
	var errs bytes.Buffer
	if code := Main([]string{"stat", "-"}, strings.NewReader("hello\n"), io.Discard, &errs); code != 1 || !strings.Contains(errs.String(), `standard input is text (it starts "hello")`) {
		t.Errorf("stat of text on standard input: exit %d, %q", code, errs.String())
	}
}
