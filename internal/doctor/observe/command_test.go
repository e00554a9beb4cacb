package observe

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseIperf3ReadsTCPAndUDPResults(t *testing.T) {
	for _, c := range []struct {
		file, proto string
		sent        float64
	}{{"testdata/iperf3-tcp.json", "TCP", 21982417695.79209}, {"testdata/iperf3-udp.json", "UDP", 9991614.91397438}} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3(b)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if r.Protocol != c.proto || math.Abs(r.SentBps-c.sent) > 1 || r.ReceivedBps == 0 {
			t.Errorf("%s: %+v", c.file, r)
		}
	}
}

func TestParseIperf3RejectsErrorsAndGarbage(t *testing.T) {
	if _, err := ParseIperf3([]byte(`{"error": "unable to connect to server: Connection refused"}`)); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("iperf3's own error not passed on: %v", err)
	}
	if _, err := ParseIperf3([]byte("Connecting to host")); err == nil {
		t.Error("text output accepted as JSON")
	}
}

func TestRunCommandReportsTheExitCodeAndOutput(t *testing.T) {
	var out bytes.Buffer
	c, err := RunCommand(context.Background(), []string{"sh", "-c", "echo hello; echo 'error - no route' >&2; echo; exit 3"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitCode != 3 || out.String() != "hello\nerror - no route\n\n" || c.Iperf3 != nil || c.LastLine != "error - no route" || !c.Failed() {
		t.Fatalf("exit %d, output %q, last line %q, iperf3 %v", c.ExitCode, out.String(), c.LastLine, c.Iperf3)
	}
	// Ended by a signal, its status is 128+N as time(1) says.
	if c, err := RunCommand(context.Background(), []string{"sh", "-c", "kill -TERM $$"}, &out, nil); err != nil || c.ExitCode != 128+15 {
		t.Fatalf("a command killed by SIGTERM: %+v, %v", c, err)
	}
	// Ended by the observation's end, it did not fail.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if c, err := RunCommand(ctx, []string{"sleep", "5"}, &out, nil); err != nil || !c.Stopped || c.Failed() {
		t.Fatalf("a command the observation ended: %+v, %v", c, err)
	}
	if _, err := RunCommand(context.Background(), []string{"/nonexistent/skbtrace-test"}, &out, nil); err == nil ||
		!strings.Contains(err.Error(), "running /nonexistent/skbtrace-test") {
		t.Fatalf("err %v", err)
	}
}

// Without -J the doctor reads what iperf3 printed for the user: its
// summary lines (the [SUM] ones with -P) and the CPU line of -V.
func TestParseIperf3TextReadsTheSummary(t *testing.T) {
	for _, c := range []struct {
		file           string
		argv           []string
		proto          string
		sent, received float64
		retrans        int64
		senderCPU      float64
	}{
		{"testdata/iperf3-tcp.txt", []string{"iperf3", "-c", "127.0.0.1"}, "TCP", 32.8e9, 32.8e9, 22, 0},
		{"testdata/iperf3-udp.txt", []string{"iperf3", "-c", "127.0.0.1", "-u", "-b", "10M"}, "UDP", 10.2e6, 10.2e6, 0, 0},
		{"testdata/iperf3-tcp-P2-V.txt", []string{"iperf3", "-c", "127.0.0.1", "-P", "2", "-V"}, "TCP", 28.9e9, 28.9e9, 9, 99},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseIperf3Text(b, c.argv)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if r.Protocol != c.proto || math.Abs(r.SentBps-c.sent) > 1 || math.Abs(r.ReceivedBps-c.received) > 1 ||
			r.Retransmits != c.retrans || r.SenderCPU != c.senderCPU {
			t.Errorf("%s: %+v", c.file, r)
		}
	}
	if _, err := ParseIperf3Text([]byte("iperf3: error - unable to connect to server: Connection refused\n"), nil); err == nil {
		t.Error("an error message read as a result")
	}
}

// The command runs as typed: its output is what the user asked for.
func TestRunCommandRunsIperf3AsTyped(t *testing.T) {
	dir := t.TempDir()
	fake := dir + "/iperf3"
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"args: $*\"\ncat "+mustAbs(t, "testdata/iperf3-tcp.txt")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c, err := RunCommand(context.Background(), []string{fake, "-c", "10.0.0.2"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "args: -c 10.0.0.2\n") || c.Iperf3 == nil || math.Abs(c.Iperf3.SentBps-32.8e9) > 1 {
		t.Errorf("output %q, result %+v: want iperf3 run without -J and its summary read", out.String(), c.Iperf3)
	}
	// Behind wrappers the summary is read too (issue 43: doctor -- ip netns
	// exec NS iperf3 -c ... lost it).
	out.Reset()
	c, err = RunCommand(context.Background(), []string{"env", "LC_ALL=C", "timeout", "-s", "INT", "30", fake, "-c", "10.0.0.2"}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Program != "iperf3" || c.Iperf3 == nil || math.Abs(c.Iperf3.SentBps-32.8e9) > 1 {
		t.Errorf("behind env and timeout: program %q, result %+v", c.Program, c.Iperf3)
	}
}

func TestRealCommandLooksThroughWrappers(t *testing.T) {
	for _, c := range []struct{ argv, want string }{
		{"ip netns exec h4-a iperf3 -c 10.0.0.2", "iperf3 -c 10.0.0.2"},
		{"ip -4 net exec h4-a iperf3 -c 10.0.0.2", "iperf3 -c 10.0.0.2"},
		{"ip netns e h4-a iperf3 -c 10.0.0.2", "iperf3 -c 10.0.0.2"},
		{"/usr/sbin/ip netns exec h4-a sudo -u nobody env A=1 -u B taskset -c 1 timeout --signal INT 10 nice -n 5 iperf3 -R -c x", "iperf3 -R -c x"},
		{"nsenter -t 42 -n --preserve-credentials iperf3 -c x", "iperf3 -c x"},
		{"nsenter --net=/run/netns/h4-a -- iperf3 -c x", "iperf3 -c x"},
		{"taskset 0x2 iperf3 -c x", "iperf3 -c x"},
		{"sudo -E iperf3 -c x", "iperf3 -c x"},
		{"ip netns list", "ip netns list"},
		{"ip neigh exec h4-a x", "ip neigh exec h4-a x"},
		{"taskset -p 1 42", "taskset -p 1 42"},
		{"env", "env"},
		{"timeout 10", "timeout 10"},
		{"iperf3 -c x", "iperf3 -c x"},
	} {
		if got := strings.Join(RealCommand(strings.Fields(c.argv)), " "); got != c.want {
			t.Errorf("%s: got %q, want %q", c.argv, got, c.want)
		}
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
