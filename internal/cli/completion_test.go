package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// complete runs the hidden __complete command the shells' scripts call and
// returns its completions and its directive line (":4").
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(append([]string{"__complete"}, args...), nil, &stdout, &stderr); code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestCompleteValues: flags complete their values, not only their names.
func TestCompleteValues(t *testing.T) {
	devs, netns := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(devs, "lo"), filepath.Join(devs, "veth0"), filepath.Join(netns, "h5-blue")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	oldDev, oldNetns := netDevDir, netnsDir
	netDevDir, netnsDir = devs, netns
	t.Cleanup(func() { netDevDir, netnsDir = oldDev, oldNetns })

	for _, tc := range []struct {
		args      []string
		want      []string // among the completions
		not       []string // not among them
		directive string
	}{
		{[]string{"record", "-e", "tcp_"}, []string{"tcp_conn", "tcp_rtt", "tcp_stage"}, []string{"dev_xmit"}, ":6"},
		{[]string{"live", "--events", "tcp_conn,tcp_r"}, []string{"tcp_conn,tcp_rtt", "tcp_conn,tcp_retrans"}, []string{"tcp_conn,tcp_conn"}, ":6"},
		{[]string{"record", "-e", "a"}, []string{"all"}, nil, ":6"},
		{[]string{"doctor", "--format", ""}, []string{"text", "json", "html"}, []string{"pprof"}, ":4"},
		{[]string{"profile", "--format", ""}, []string{"pprof", "folded", "html"}, []string{"text"}, ":4"},
		{[]string{"lab", "run", "sndbuf-"}, []string{"sndbuf-limited"}, []string{"baseline"}, ":4"},
		{[]string{"lab", "run", "ma"}, []string{"matrix"}, nil, ":4"},
		{[]string{"record", "--filter-dev", ""}, []string{"lo", "veth0"}, nil, ":4"},
		{[]string{"lab", "run", "--wire", "veth0,"}, []string{"veth0,lo"}, []string{"veth0,veth0"}, ":6"},
		{[]string{"doctor", "--netns", ""}, []string{"h5-blue"}, nil, ":6"},
		{[]string{"load", "server", "--netns", ""}, []string{"h5-blue"}, nil, ":4"},
		{[]string{"stat", "--filter-netns", ""}, []string{"host", "h5-blue"}, nil, ":4"},
		{[]string{"record", "--context", "s"}, []string{"syscall", "softirq"}, []string{"hardirq"}, ":6"},
		{[]string{"record", "--trigger", ""}, []string{"rto", "drop", "drop:", "srtt>", "zero-window", "reset", "sendlim:"}, nil, ":6"},
		{[]string{"record", "--trigger", "z"}, []string{"zero-window"}, []string{"rto"}, ":4"},
		{[]string{"parse", ""}, []string{"trace"}, nil, ":8"},
		{[]string{"stat", "-i", ""}, []string{"trace"}, nil, ":8"},
		{[]string{"pcap", ""}, []string{"pcap", "pcapng"}, nil, ":8"},
		{[]string{"pcap", "-i", ""}, []string{"pcap", "pcapng"}, nil, ":8"},
		{[]string{"record", "-o", ""}, []string{"trace"}, nil, ":8"},
		{[]string{"stat", "x.trace", "--html", ""}, []string{"html"}, nil, ":8"},
		{[]string{"lab", "run", "--trace-dir", ""}, nil, nil, ":16"},
		{[]string{"record", "-d", ""}, nil, nil, ":4"},
	} {
		got, directive := complete(t, tc.args...)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("__complete %q: %q lacks %s", tc.args, got, w)
			}
		}
		for _, n := range tc.not {
			if slices.Contains(got, n) {
				t.Errorf("__complete %q: %q offers %s", tc.args, got, n)
			}
		}
		if directive != tc.directive {
			t.Errorf("__complete %q: directive %s, want %s", tc.args, directive, tc.directive)
		}
	}
}

// TestBashWithoutBashCompletion: the bash script completes, and says
// nothing on standard error, where the bash-completion package is not
// installed (its functions are not defined). A stub stands for skbtrace
// __complete: what is tested is the script's side.
func TestBashWithoutBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	dir := t.TempDir()
	gendocs(t, "--completions", dir)
	stub := filepath.Join(dir, "skbtrace-stub")
	if err := os.WriteFile(stub, []byte(`#!/bin/sh
case "$*" in
"__complete rec") printf 'record\n:4\n' ;;
"__complete parse ") printf 'trace\n:8\n' ;;
*) printf ':0\n' ;;
esac
`), 0o755); err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(dir, "files")
	if err := os.Mkdir(files, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.trace", "b.pcap"} {
		if err := os.WriteFile(filepath.Join(files, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What bash does on Tab: COMP_* set, the registered function called.
	// compopt works only inside a real completion; the script asks for it
	// as a builtin, so a function of that name keeps it quiet here.
	script := `source "$1"
compopt() { :; }
tab() {
	COMP_LINE=$1 COMP_POINT=${#1}
	read -r -a COMP_WORDS <<<"$COMP_LINE"
	[[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	__start_skbtrace "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
	echo "${COMPREPLY[*]}"
}
tab "$2 rec"
tab "$2 parse "
`
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script, "bash", filepath.Join(dir, "skbtrace.bash"), stub)
	cmd.Dir = files
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash: %v: %s", err, stderr.String())
	}
	if got := stdout.String(); got != "record\na.trace\n" {
		t.Errorf("without bash-completion, Tab after 'skbtrace rec' and 'skbtrace parse ' gave %q, want record, then a.trace alone", got)
	}
	if stderr.Len() > 0 {
		t.Errorf("without bash-completion the script complains: %s", stderr.String())
	}
}
