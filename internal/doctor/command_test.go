package doctor

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"testing"
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
	c, err := RunCommand(context.Background(), []string{"sh", "-c", "echo hello; exit 3"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.ExitCode != 3 || out.String() != "hello\n" || c.Iperf3 != nil {
		t.Fatalf("exit %d, output %q, iperf3 %v", c.ExitCode, out.String(), c.Iperf3)
	}
	if _, err := RunCommand(context.Background(), []string{"/nonexistent/skbtrace-test"}, &out); err == nil ||
		!strings.Contains(err.Error(), "running /nonexistent/skbtrace-test") {
		t.Fatalf("err %v", err)
	}
}
