package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// badInputs are the classes of input every reading command must refuse
// with one clear line: each maps to a path in dir.
func badInputs(t *testing.T, dir string, good []byte) map[string]string {
	t.Helper()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	random := make([]byte, 4096)
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range random {
		random[i] = byte(rng.IntN(256))
	}
	capture, err := os.ReadFile(filepath.Join("..", "analyze", "pcap", "testdata", "loss-sender.pcap.gz"))
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a-directory")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// A capture cut short as a killed tcpdump leaves it: pcap's truncated input.
	zr, err := gzip.NewReader(bytes.NewReader(capture))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	write("truncated.pcap", whole[:len(whole)/2])
	return map[string]string{
		"missing":   filepath.Join(dir, "no-such-file"),
		"empty":     write("empty", nil),
		"directory": sub,
		// Opens, then fails to read (EIO), whoever runs the test: root
		// reads any file whatever its mode.
		"unreadable": "/proc/self/mem",
		"random":     write("random", random),
		"truncated":  write("truncated", good[:len(good)/2]),
		"wrong kind": write("capture.pcap.gz", capture),
		// Said for what they are: not a trace "damaged at offset 12".
		"text":           write("notes.txt", []byte("buy milk\n")),
		"pcap capture":   write("capture.pcap", whole),
		"pcapng capture": write("capture.pcapng", []byte("\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a\x01\x00\x00\x00")),
	}
}

// eventsRead is parse's summary line of what was read.
var eventsRead = regexp.MustCompile(` events? read, `)

// errorLines are stderr's lines that report a failure: parse and export
// also print their summary of what was read.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l == "" || eventsRead.MatchString(l) || strings.HasPrefix(l, "skbtrace: warning: ") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// Every command that reads a file refuses each class of bad input with
// exit 1 and one line, never a panic, and leaves every earlier output as it
// was, a truncated input's included (--partial writes those: tested apart).
func TestConformanceBadInputs(t *testing.T) {
	dir := t.TempDir()
	good := fixture(t, binary.LittleEndian)
	goodTrace := filepath.Join(dir, "good.trace")
	if err := os.WriteFile(goodTrace, good, 0o644); err != nil {
		t.Fatal(err)
	}
	earlier := []byte("an earlier output\n")
	graphs := filepath.Join(dir, "graphs")
	if err := os.Mkdir(graphs, 0o755); err != nil {
		t.Fatal(err)
	}
	html, perfetto, flame, graphsPage := filepath.Join(dir, "out.html"), filepath.Join(dir, "out.json"), filepath.Join(dir, "flame.html"), filepath.Join(graphs, "index.html")
	commands := map[string]func(in string) []string{
		"parse":   func(in string) []string { return []string{"parse", in} },
		"stat":    func(in string) []string { return []string{"stat", in, "--html", html} },
		"export":  func(in string) []string { return []string{"export", in, "--perfetto", perfetto} },
		"pcap":    func(in string) []string { return []string{"pcap", in, "--graphs", graphs} },
		"compare": func(in string) []string { return []string{"compare", goodTrace, in, "--flame", flame} },
	}
	for class, in := range badInputs(t, dir, good) {
		for name, args := range commands {
			in := in
			if name == "pcap" && (class == "wrong kind" || class == "pcap capture" || class == "pcapng capture") {
				in = goodTrace // a trace, to the capture reader
			}
			if name == "pcap" && class == "truncated" {
				in = filepath.Join(dir, "truncated.pcap")
			}
			outputs := []string{html, perfetto, flame, graphsPage}
			for _, p := range outputs {
				if err := os.WriteFile(p, earlier, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var out, errs bytes.Buffer
			code := Main(args(in), bytes.NewReader(nil), &out, &errs)
			lines := errorLines(errs.String())
			if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "skbtrace: ") || strings.Contains(errs.String(), "panic") {
				t.Errorf("%s, %s input: exit %d, stderr %q; want exit 1 and one line", name, class, code, errs.String())
			}
			if entries, _ := os.ReadDir(graphs); len(entries) != 1 {
				t.Errorf("%s, %s input: the graphs directory holds %d entries, want only the earlier index.html", name, class, len(entries))
			}
			for _, p := range outputs {
				if b, _ := os.ReadFile(p); !bytes.Equal(b, earlier) {
					t.Errorf("%s, %s input: %s changed", name, class, filepath.Base(p))
				}
			}
		}
	}
}

// The commands that read a token file (and the agent its TLS files) refuse
// each class of bad input before they serve or observe (in a child with a deadline: one that
// accepts the input and starts serving fails the test).
func TestConformanceBadTokenFiles(t *testing.T) {
	if os.Getenv("SKBTRACE_CLI_CHILD") != "" {
		return
	}
	dir := t.TempDir()
	for class, in := range badInputs(t, dir, fixture(t, binary.LittleEndian)) {
		for _, args := range [][]string{
			{"agent", "--listen", "127.0.0.1:0", "--no-kernel-events", "--token-file", in},
			{"doctor", "-d", "1", "--peer", "http://127.0.0.1:1", "--peer-token-file", in},
		} {
			code, stderr := runChild(t, args)
			if lines := errorLines(stderr); code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "token") {
				t.Errorf("%s, %s token file: exit %d, stderr %q; want exit 1 and one line about the token", args[0], class, code, stderr)
			}
		}
		// A certificate and key the agent cannot serve with stop it at start.
		args := []string{"agent", "--listen", "127.0.0.1:0", "--no-kernel-events", "--tls-cert", in, "--tls-key", in}
		code, stderr := runChild(t, args)
		if lines := errorLines(stderr); code != 1 || len(lines) != 1 || !strings.Contains(lines[0], "TLS") {
			t.Errorf("agent, %s TLS files: exit %d, stderr %q; want exit 1 and one line about TLS", class, code, stderr)
		}
	}
}

// --partial accepts a truncated input: the outputs are written from what was
// read, the damage is one warning line and the run succeeds.
func TestPartialWritesWhatWasRead(t *testing.T) {
	dir := t.TempDir()
	good := fixture(t, binary.LittleEndian)
	badInputs(t, dir, good)
	trace, capture := filepath.Join(dir, "truncated"), filepath.Join(dir, "truncated.pcap")
	html, perfetto, graphs := filepath.Join(dir, "out.html"), filepath.Join(dir, "out.json"), filepath.Join(dir, "graphs")
	for _, args := range [][]string{
		{"parse", trace, "--partial"},
		{"stat", trace, "--html", html, "--partial"},
		{"export", trace, "--perfetto", perfetto, "--partial"},
		{"pcap", capture, "--graphs", graphs, "--partial"},
	} {
		var out, errs bytes.Buffer
		code := Main(args, bytes.NewReader(nil), &out, &errs)
		warned := strings.Contains(errs.String(), "skbtrace: warning: ") && strings.Contains(errs.String(), "accepted with --partial")
		if code != 0 || !warned || len(errorLines(errs.String())) > 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 0 and a warning of the damage", args, code, errs.String())
		}
	}
	for _, p := range []string{html, perfetto, filepath.Join(graphs, "index.html")} {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", filepath.Base(p), err)
		}
	}
	if entries, _ := os.ReadDir(graphs); len(entries) == 0 || strings.HasPrefix(entries[0].Name(), ".") {
		t.Errorf("graphs directory %v: the staging directory was left", entries)
	}
}

// malformed is a value each kind of flag refuses, by the placeholder its
// help shows; freeForm are the kinds any word is, checked only when used
// (a file opened, a name looked up), so no value is malformed at the flag.
var (
	malformed = map[string]string{
		"DURATION": "soon", "N": "x", "BYTES": "lots", "SIZE": "lots", "HZ": "fast", "PORT": "70000",
		"IP": "nowhere", "MTU": "x", "FORMAT": "pdf", "MODE": "nope", "CTX": "nowhere", "LIST": "3-1",
		"FAMILY": "nosuch", "SHARE": "2", "RATE": "fast", "EXPR": "(((", "FILTER": ":x", "PID": "x",
		"SENDER,RECEIVER": "onlyone", "ADDR": "no-port-here",
	}
	freeForm = map[string]string{
		"":           "a switch",
		"FILE":       "any path: opened when used",
		"DIR":        "any path: created when used",
		"NAME":       "any name: looked up when used",
		"NAME|INODE": "any name: looked up in the trace",
		"URL":        "any URL: fetched when used",
		"ALGORITHM":  "any name: the kernel is asked when the socket is made",
	}
)

// Every flag of every command, given a malformed value of its kind, is a
// usage error: exit 2, one line and the command's help hint, before the
// command does anything (each runs in a child with a deadline: a command
// that starts working instead fails the test). A flag of a kind neither
// table knows fails the test, so a new flag gets its case.
func TestConformanceMalformedFlags(t *testing.T) {
	if os.Getenv("SKBTRACE_CLI_CHILD") != "" {
		return
	}
	root := newRoot(&env{stdin: bytes.NewReader(nil), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	// Positional arguments a command needs before it reads its flags.
	operands := map[string][]string{"pcap": {"-"}, "compare": {"a", "b"}, "load client": {"10.0.0.2:5201"}}
	for name, uses := range flagUses(root) {
		for _, u := range uses {
			bad, ok := malformed[u.takes]
			if !ok {
				if _, free := freeForm[u.takes]; !free {
					t.Errorf("%s --%s takes %q, which neither malformed nor freeForm knows", u.command, name, u.takes)
				}
				continue
			}
			args := append(strings.Fields(u.command), operands[u.command]...)
			args = append(args, "--"+name, bad)
			code, stderr := runChild(t, args)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			hint := "run 'skbtrace " + u.command
			if code != 2 || len(lines) != 2 || !strings.HasPrefix(lines[0], "skbtrace: ") || !strings.HasPrefix(lines[1], hint) {
				t.Errorf("%v: exit %d, stderr %q; want exit 2, one line and %q...", args, code, stderr, hint)
			}
		}
	}
}

// runChild runs Main with args in a child process (this test binary) with
// a deadline, so that a command that does not refuse its flags cannot hang
// or change the machine for long.
func runChild(t *testing.T, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestChildMain$")
	enc, _ := json.Marshal(args)
	cmd.Env = append(os.Environ(), "SKBTRACE_CLI_CHILD="+string(enc))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return -1, "still running after 20 s: " + stderr.String()
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestChildMain is runChild's child: Main with the arguments it was given.
func TestChildMain(t *testing.T) {
	env := os.Getenv("SKBTRACE_CLI_CHILD")
	if env == "" {
		t.Skip("runs only as TestConformanceMalformedFlags's child")
	}
	var args []string
	if err := json.Unmarshal([]byte(env), &args); err != nil {
		t.Fatal(err)
	}
	os.Exit(Main(args, bytes.NewReader(nil), io.Discard, os.Stderr))
}

// Every command a user runs shows examples in its help.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.Example == "" && c.Name() != "help" && c.Name() != "completion" && c.HasParent() {
			t.Errorf("%s has no examples", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{stdin: bytes.NewReader(nil), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}))
}

// Every flag's help names what it takes as users write it (DURATION, SIZE,
// ADDR, FILE ...), never a Go type, and shows no stray backquote.
func TestFlagPlaceholdersAreWords(t *testing.T) {
	goTypes := map[string]bool{"string": true, "int": true, "uint": true, "uint16": true, "uint32": true, "int64": true,
		"float": true, "float64": true, "duration": true, "strings": true, "stringSlice": true, "stringArray": true}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, usage := pflag.UnquoteUsage(f)
			if goTypes[name] || strings.Contains(usage, "`") {
				t.Errorf("%s --%s: placeholder %q, usage %q", c.CommandPath(), f.Name, name, usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&env{stdin: bytes.NewReader(nil), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}))
}

// One vocabulary: a flag name has one shorthand and takes one kind of
// value in every command, a shorthand names one flag, and docs/cli.md
// lists them all as the commands define them.
func TestFlagVocabulary(t *testing.T) {
	root := newRoot(&env{stdin: bytes.NewReader(nil), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	uses := flagUses(root)
	shorthands := map[string]string{}
	for name, us := range uses {
		for _, u := range us {
			if u.shorthand != us[0].shorthand || u.takes != us[0].takes {
				t.Errorf("--%s: -%s %s in %s, -%s %s in %s", name, us[0].shorthand, us[0].takes, us[0].command, u.shorthand, u.takes, u.command)
			}
			if u.shorthand == "" {
				continue
			}
			if other, ok := shorthands[u.shorthand]; ok && other != name {
				t.Errorf("-%s is --%s and --%s", u.shorthand, other, name)
			}
			shorthands[u.shorthand] = name
		}
	}
	doc := filepath.Join("..", "..", "docs", "cli.md")
	want := flagVocabulary(root)
	if *update {
		if err := os.WriteFile(doc, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(doc); string(got) != want {
		t.Errorf("docs/cli.md is not the command tree's flags: go test ./internal/cli -run TestFlagVocabulary -update")
	}
}

// One JSON vocabulary: the outputs name a thing one way (parse's, from the
// seed's line format): min_rtt_us, inflight, netns as the inode beside
// netns_name, snake_case top-level keys. Each output's keys are walked for
// the other spellings that once appeared.
func TestJSONVocabulary(t *testing.T) {
	banned := map[string]string{"rtt_min_us": "min_rtt_us", "in_flight": "inflight", "A": "a", "B": "b", "Kind": "kind"}
	for name, docs := range jsonOutputs(t) {
		for _, doc := range docs {
			var v any
			if err := json.Unmarshal(doc, &v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			walkJSON(v, func(key string, val any) {
				if want, ok := banned[key]; ok {
					t.Errorf("%s: key %q, which the other outputs call %q", name, key, want)
				}
				if _, isNumber := val.(float64); key == "netns" && !isNumber {
					t.Errorf("%s: netns %v is not the inode (the name is netns_name)", name, val)
				}
			})
		}
	}
}

func walkJSON(v any, fn func(key string, val any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			fn(k, val)
			walkJSON(val, fn)
		}
	case []any:
		for _, e := range x {
			walkJSON(e, fn)
		}
	}
}
