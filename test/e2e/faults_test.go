package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

func TestWithoutPrivilegesOneClearLine(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN") // to drop to nobody
	if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "record", "-d", "1", "-o", os.DevNull)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 1 {
		t.Fatalf("record as nobody: %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "CAP_BPF") || !strings.Contains(lines[0], "root") {
		t.Fatalf("stderr %q, want one line naming root and CAP_BPF", stderr.String())
	}
}

// churn opens and closes n loopback connections from parallel goroutines, as fast as it can.
func churn(t *testing.T, ln net.Listener, n int) {
	t.Helper()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/8; i++ {
				if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
					c.Close()
				}
			}
		}()
	}
	wg.Wait()
}

var (
	missingRe = regexp.MustCompile(`(\d+) sequence numbers? missing`)
	recLostRe = regexp.MustCompile(`lost (\d+) \(tcp_conn (\d+)`)
)

func TestFullRingBufferIsCountedAsLoss(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	port := freePort(t)
	rec := startRecord(t, "-e", "tcp_conn", "--ring-size", "4096", "--filter-port", strconv.Itoa(port))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	churn(t, ln, 4000)
	rec.stop(t, syscall.SIGINT)
	m := recLostRe.FindStringSubmatch(rec.stderr.String())
	if m == nil {
		t.Fatalf("record's totals do not report lost tcp_conn events: %s", rec.stderr)
	}
	lost, _ := strconv.Atoi(m[1])
	if lost == 0 {
		t.Fatalf("a 4 KiB ring under %d connections lost nothing; the test cannot tell loss from no loss", 4000)
	}
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	if !strings.Contains(summary, fmt.Sprintf("lost %d", lost)) {
		t.Fatalf("record lost %d, parse reports %q", lost, summary)
	}
	desc, err := exec.Command(binary, "events").Output()
	if err != nil {
		t.Fatal(err)
	}
	m2 := missingRe.FindStringSubmatch(summary)
	if strings.Contains(string(desc), "ring-buffer order") {
		// Numbered in ring order: a lost event leaves no gap, the loss records say it all.
		if m2 != nil {
			t.Fatalf("ring-order numbering left a gap: %s", summary)
		}
	} else {
		if m2 == nil {
			t.Fatalf("parse summary shows no sequence gap: %s", summary)
		}
		if missing, _ := strconv.Atoi(m2[1]); missing != lost {
			t.Fatalf("record lost %d, parse reports %q: the loss records and the sequence gaps must agree", lost, summary)
		}
	}
	t.Logf("%d events kept, %d lost, all accounted for", len(events), lost)
}

// pipeline runs a shell pipeline of skbtrace commands while one connection
// is made to port, and returns its standard output.
func pipeline(t *testing.T, script string, port int) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = append(os.Environ(), "SKBTRACE="+binary)
	var out, errs syncBuffer
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait closes the pipes: both are read to their end before it.
	outRead, errRead := make(chan struct{}), make(chan struct{})
	go func() { collectLines(stdout, &out); close(outRead) }()
	ready := make(chan struct{})
	go func() { collectLinesSignal(stderr, &errs, "skbtrace: recording", ready); close(errRead) }()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("the pipeline did not start recording: %s", errs.String())
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	connectAndClose(t, ln, func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) })
	ln.Close()
	<-outRead
	<-errRead
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, errs.String())
	}
	return out.String()
}

func TestRecordPipedIntoParse(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	port := freePort(t)
	out := pipeline(t, fmt.Sprintf(`"$SKBTRACE" record -e tcp_conn --filter-port %d -d 3 -o - | "$SKBTRACE" parse -i -`, port), port)
	if strings.Count(out, "action=tcp_conn [ESTABLISHED]") != 2 {
		t.Fatalf("piped output lacks both ESTABLISHED events:\n%s", out)
	}
}

func TestLive(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	port := freePort(t)
	out := pipeline(t, fmt.Sprintf(`"$SKBTRACE" live -e tcp_conn --filter-port %d -d 3 --json`, port), port)
	if strings.Count(out, `"state":"ESTABLISHED"`) != 2 {
		t.Fatalf("live output lacks both ESTABLISHED events:\n%s", out)
	}
}
