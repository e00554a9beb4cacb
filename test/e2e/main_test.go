// Package e2e runs the skbtrace binary against real kernel events: loopback
// and veth traffic the tests generate themselves. It needs root; without it
// the tests skip, except under CI=true, where skipping is a failure.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(writerEnv) != "" {
		runWriterHelper()
	}
	dir, err := os.MkdirTemp("", "skbtrace-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The kernel matrix runs a compiled test binary in guests that have no
	// Go build cache: it names a prebuilt skbtrace.
	if binary = os.Getenv("SKBTRACE_BIN"); binary == "" {
		binary = filepath.Join(dir, "skbtrace")
		build := exec.Command("go", "build", "-o", binary, "../../cmd/skbtrace")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building skbtrace:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// familyStatus is a line of `skbtrace events --json`.
type familyStatus struct {
	Family   string   `json:"family"`
	Runs     bool     `json:"runs"`
	Hooks    []string `json:"hooks"`
	Programs []string `json:"programs"`
	Reason   string   `json:"reason"`
	Verified bool     `json:"verified"`
}

var kernelFamilies struct {
	sync.Once
	byName map[string]familyStatus
	err    error
}

// eventsOnThisKernel is what `skbtrace events --json` says of every family.
func eventsOnThisKernel(t testing.TB) map[string]familyStatus {
	t.Helper()
	kernelFamilies.Do(func() {
		out, err := exec.Command(binary, "events", "--json").Output()
		if err != nil {
			kernelFamilies.err = fmt.Errorf("skbtrace events --json: %w", err)
			return
		}
		kernelFamilies.byName = map[string]familyStatus{}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var fs familyStatus
			if err := dec.Decode(&fs); err == io.EOF {
				break
			} else if err != nil {
				kernelFamilies.err = fmt.Errorf("decoding skbtrace events --json: %w", err)
				return
			}
			kernelFamilies.byName[fs.Family] = fs
		}
	})
	if kernelFamilies.err != nil {
		t.Fatal(kernelFamilies.err)
	}
	return kernelFamilies.byName
}

// requireFamilies skips a test whose families this kernel cannot run, as
// `skbtrace events` reports them. Only the kernel matrix
// (SKBTRACE_KERNEL_MATRIX=1, which checks each kernel's expected set
// itself) may skip so; on the kernel CI runs on, every family must run.
func requireFamilies(t testing.TB, names ...string) {
	t.Helper()
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	fams := eventsOnThisKernel(t)
	for _, n := range names {
		if fs := fams[n]; !fs.Runs {
			if os.Getenv("SKBTRACE_KERNEL_MATRIX") != "1" {
				t.Fatalf("event family %s cannot run on this kernel: %s", n, fs.Reason)
			}
			t.Skipf("event family %s cannot run on this kernel: %s", n, fs.Reason)
		}
	}
}

// recorder is a running `skbtrace record`.
type recorder struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	file   string
	read   chan struct{} // stderr read to its end
}

// startRecord runs skbtrace record with args and waits until it has attached.
func startRecord(t testing.TB, args ...string) *recorder {
	t.Helper()
	file := filepath.Join(t.TempDir(), "run.trace")
	cmd := exec.Command(binary, append([]string{"record", "-o", file}, args...)...)
	r := &recorder{cmd: cmd, stderr: &syncBuffer{}, file: file, read: make(chan struct{})}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ready := make(chan struct{})
	go func() { collectLinesSignal(pipe, r.stderr, "skbtrace: recording", ready); close(r.read) }()
	select {
	case <-ready:
	case <-time.After(3 * time.Minute): // loading every program takes a minute on an emulated CPU
		t.Fatalf("record did not attach within 3 minutes: %s", r.stderr)
	}
	if !strings.Contains(r.stderr.String(), "skbtrace: recording") {
		<-r.read
		cmd.Wait()
		t.Fatalf("record failed to start: %s", r.stderr)
	}
	return r
}

// wait waits for record to exit by itself, its stderr read to the end.
func (r *recorder) wait() error {
	<-r.read
	return r.cmd.Wait()
}

// stop sends sig and waits for record to exit. Wait closes the pipe, so
// its stderr is read to the end first: record's last words are its totals.
func (r *recorder) stop(t testing.TB, sig syscall.Signal) {
	t.Helper()
	r.cmd.Process.Signal(sig)
	select {
	case <-r.read:
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		r.cmd.Wait()
		t.Fatalf("record did not stop within 30s of %v", sig)
	}
	if err := r.cmd.Wait(); err != nil && sig != syscall.SIGKILL {
		t.Fatalf("record exited with %v: %s", err, r.stderr)
	}
}

// parseJSON runs skbtrace parse --json on a trace and decodes every line.
func parseJSON(t testing.TB, file string, args ...string) ([]map[string]any, string, error) {
	t.Helper()
	events, summary, err := parseJSONQuiet(file, args...)
	if errors.Is(err, errBadJSON) {
		t.Fatal(err)
	}
	return events, summary, err
}

var errBadJSON = errors.New("parse --json printed invalid JSON")

func parseJSONQuiet(file string, args ...string) ([]map[string]any, string, error) {
	cmd := exec.Command(binary, append([]string{"parse", "--json", "-i", file}, args...)...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	var events []map[string]any
	dec := json.NewDecoder(&out)
	for {
		var ev map[string]any
		if derr := dec.Decode(&ev); derr == io.EOF {
			break
		} else if derr != nil {
			return nil, errs.String(), fmt.Errorf("%w: %v", errBadJSON, derr)
		}
		events = append(events, ev)
	}
	return events, errs.String(), err
}

// sendlimCounts sums cnt per reason for the sockets whose peer is peer.
func sendlimCounts(events []map[string]any, peer string) (map[string]float64, []float64) {
	counts := map[string]float64{}
	var runs []float64
	for _, ev := range events {
		if ev["action"] == "tcp_sendlim" && ev["peer"] == peer {
			counts[ev["reason"].(string)] += ev["cnt"].(float64)
			runs = append(runs, ev["cnt"].(float64))
		}
	}
	return counts, runs
}

type syncBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, s)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// freePort asks the kernel for an unused loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func collectLines(r io.Reader, into *syncBuffer) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		into.WriteLine(sc.Text())
	}
}

// collectLinesSignal collects lines and closes ready at the first line
// containing marker, or at the end of input.
func collectLinesSignal(r io.Reader, into *syncBuffer, marker string, ready chan struct{}) {
	sc := bufio.NewScanner(r)
	signalled := false
	for sc.Scan() {
		into.WriteLine(sc.Text())
		if !signalled && strings.Contains(sc.Text(), marker) {
			signalled = true
			close(ready)
		}
	}
	if !signalled {
		close(ready)
	}
}

// waitListening waits until something accepts connections at addr.
func waitListening(t testing.TB, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens at %s", addr)
}
