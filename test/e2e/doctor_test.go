package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

func runDoctor(t *testing.T, args ...string) (*doctor.Report, string) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"doctor", "--json"}, args...)...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("doctor %v: %v: %s", args, err, errs.String())
	}
	var rep doctor.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("doctor %v: report is not JSON: %v: %s", args, err, out.String())
	}
	return &rep, errs.String()
}

func TestDoctorWithNothingToObserveSaysSo(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	ns := "skbtrace-e2e-doctor-empty"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	testenv.DeleteNetnsAtCleanup(t, ns)
	rep, _ := runDoctor(t, "-d", "1", "--netns", ns)
	if rep.Top(finding.Warning) != nil || rep.Healthy != "" || !strings.Contains(rep.NoTraffic, "no flow moved data") {
		t.Fatalf("findings %+v, healthy %q, no traffic %q", rep.Findings, rep.Healthy, rep.NoTraffic)
	}
	if !rep.Evidence.KernelEvents {
		t.Errorf("ran as root without kernel events: %v", rep.Notes)
	}
}

func TestDoctorSurvivesANamespaceThatDisappears(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	ns := "skbtrace-e2e-doctor-gone"
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	testenv.DeleteNetnsAtCleanup(t, ns)
	deleted := make(chan error, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
		deleted <- err
	}()
	rep, _ := runDoctor(t, "-d", "2", "--netns", ns)
	// Unless the namespace went during the run, the test shows nothing.
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	// The doctor holds the namespace open, so it lives on unnamed until the
	// end: the report must come either way, with or without a note.
	if rep.Evidence == nil || rep.Evidence.Seconds < 1.5 {
		t.Fatalf("no evidence for the run: %+v", rep)
	}
}

func TestDoctorJudgesHundredsOfSockets(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		payload := make([]byte, 1000)
		for {
			for _, c := range conns {
				select {
				case <-stop:
					return
				default:
				}
				c.Write(payload)
			}
		}
	}()
	rep, _ := runDoctor(t, "-d", "2", "--netns", "host")
	if n := len(rep.Evidence.Flows); n != 64 {
		t.Errorf("%d flows judged, want the 64 busiest of 600 sockets", n)
	}
	found := false
	for _, n := range rep.Notes {
		found = found || strings.Contains(n, "the 64 busiest are judged")
	}
	if !found {
		t.Errorf("no note about the flows left out: %v", rep.Notes)
	}
}

func TestDoctorWithoutRootStillJudgesCountersAndSaysWhy(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	setpriv := testenv.Tool(t, "setpriv")
	// The binary sits in a private temporary directory; copy it where nobody may run it.
	dir, err := os.MkdirTemp("", "skbtrace-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := dir + "/skbtrace"
	if out, err := exec.Command("cp", binary, bin).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "doctor", "--json", "-d", "1", "--netns", "host")
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("doctor as nobody: %v: %s", err, errs.String())
	}
	var rep doctor.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if rep.Evidence.KernelEvents || len(rep.Evidence.CPUs) == 0 || len(rep.Evidence.Namespaces) == 0 {
		t.Fatalf("evidence %+v", rep.Evidence)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "kernel events need root") {
		t.Errorf("no note that kernel events need root: %v", rep.Notes)
	}
}

func TestDoctorWrapsACommandAndKeepsItsTrace(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	srv := exec.Command(binary, "load", "server", "--listen", "127.0.0.1:5299")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	traceFile := t.TempDir() + "/doctor.trace"
	start := time.Now()
	rep, stderr := runDoctor(t, "--netns", "host", "--trace", traceFile, "--",
		binary, "load", "client", "127.0.0.1:5299", "-d", "1", "--cc", "cubic")
	if rep.Evidence.Command == nil || rep.Evidence.Command.ExitCode != 0 {
		t.Fatalf("command result %+v; stderr %s", rep.Evidence.Command, stderr)
	}
	if !strings.Contains(stderr, "bit/s") {
		t.Errorf("the command's own output did not reach stderr: %s", stderr)
	}
	if len(rep.Evidence.Flows) == 0 || rep.Healthy == "" && rep.Top(finding.Warning) == nil {
		t.Errorf("no flow or verdict: %+v", rep)
	}
	t.Logf("doctor took %v for a 1 s command: %s", time.Since(start), rep.Healthy)
	out, err := exec.Command(binary, "stat", "-i", traceFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "127.0.0.1:5299") {
		t.Fatalf("stat of the kept trace: %v: %s", err, out)
	}
	if testing.Verbose() {
		fmt.Println(string(out))
	}
}
