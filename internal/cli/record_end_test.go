package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

// record and live end the command after -- when -d ends the recording
// first, say so before the totals, and do not count it as failing; a
// command that fails on its own still sets the exit status.
func TestRecordAndLiveEndTheirCommand(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	for _, name := range []string{"record", "live"} {
		dir := t.TempDir()
		file := filepath.Join(dir, "pid")
		args := []string{name, "-e", "tcp_conn", "-d", "1"}
		if name == "record" {
			args = append(args, "-o", filepath.Join(dir, "run.trace"))
		}
		var out, errs bytes.Buffer
		code := Main(append(append(args, "--"), pidCommand(file, false)...), nil, &out, &errs)
		pid := readPid(t, file)
		checkGone(t, pid, name+" -d 1")
		ended := regexp.MustCompile(`skbtrace: ended sh \(pid \d+\) at the end of the recording: SIGTERM, exit status 143\nskbtrace: recorded `)
		if code != 0 || !ended.MatchString(errs.String()) {
			t.Errorf("%s -d 1 -- sleep: exit %d, want 0, the command's end then the totals:\n%s", name, code, errs.String())
		}

		errs.Reset()
		code = Main(append(append(args, "--"), "sh", "-c", "exit 3"), nil, &out, &errs)
		if code != 3 || !strings.HasSuffix(errs.String(), "skbtrace: sh exited with status 3\n") || strings.Contains(errs.String(), "ended sh") {
			t.Errorf("%s -- sh -c 'exit 3': exit %d, want 3 saying so:\n%s", name, code, errs.String())
		}
	}
}

// SIGINT and SIGTERM end record, which ends its command; SIGKILL ends
// record outright, and the kernel ends the command (Pdeathsig). record
// runs in a child, this test binary (TestChildMain).
func TestRecordEndsItsCommandWhenSignalled(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGKILL} {
		dir := t.TempDir()
		file := filepath.Join(dir, "pid")
		args, _ := json.Marshal(append([]string{"record", "-e", "tcp_conn", "-o", filepath.Join(dir, "run.trace"), "--"}, pidCommand(file, false)...))
		child := exec.Command(os.Args[0], "-test.run=^TestChildMain$")
		child.Env = append(os.Environ(), "SKBTRACE_CLI_CHILD="+string(args))
		var errs bytes.Buffer
		child.Stderr = &errs
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		// The command starts once the programs are attached.
		pid := readPid(t, file)
		child.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- child.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			child.Process.Kill()
			<-done
			t.Errorf("%v: record still ran after 20 s", sig)
		}
		checkGone(t, pid, sig.String())
		if sig == syscall.SIGKILL {
			continue
		}
		if code := child.ProcessState.ExitCode(); code != 0 || !strings.Contains(errs.String(), "skbtrace: ended sh (pid ") ||
			!strings.Contains(errs.String(), "skbtrace: recorded ") {
			t.Errorf("%v: exit %d, want 0 saying the command was ended and the totals:\n%s", sig, code, errs.String())
		}
	}
}

// A full disk is named with the file, after the totals; the trace keeps
// what was written, read with --partial.
func TestRecordOnAFullDisk(t *testing.T) {
	sink := &sinkWriter{w: &createOnWrite{path: "/dev/full"}}
	_, err := trace.NewWriter(sink, tracetest.Header(trace.NativeOrder))
	err = sink.explain(err, "/dev/full")
	want := "writing the trace to /dev/full: no space left on device (it holds what was written before, its last block possibly torn: read it with skbtrace parse --partial)"
	if err == nil || err.Error() != want || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("/dev/full: %v, want %q", err, want)
	}
	other := errors.New("attaching: no such tracepoint")
	if err := (&sinkWriter{w: &bytes.Buffer{}}).explain(other, "run.trace"); err != other {
		t.Errorf("an error not of the destination became %v", err)
	}

	testenv.RequireRoot(t, "mounting a tmpfs, loading BPF programs")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "skbtrace-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mounting a 64 KiB tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	// A hundred loopback connections a second make some 50 KiB of tcp_conn
	// events a second: the first blocks fit, a later one fills the disk.
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
			c.Close()
		}
	}()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
				c.Close()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	path := filepath.Join(dir, "run.trace")
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var out, errs bytes.Buffer
	code := Main([]string{"record", "-e", "tcp_conn", "--filter-port", port, "-d", "20", "-o", path}, nil, &out, &errs)
	full := regexp.MustCompile(`skbtrace: recorded \d+ events in .* to ` + regexp.QuoteMeta(path) + ` .*; lost \d+\nskbtrace: writing the trace to ` +
		regexp.QuoteMeta(path) + `: no space left on device \(it holds what was written before`)
	if code != 1 || !full.MatchString(errs.String()) {
		t.Errorf("record onto a full disk: exit %d, want 1 with the totals, then the file and the cause:\n%s", code, errs.String())
	}
	errs.Reset()
	out.Reset()
	if code := Main([]string{"parse", "--partial", path}, nil, &out, &errs); code != 0 || out.Len() == 0 {
		t.Errorf("parse --partial of what the full disk kept: exit %d, %d bytes of events:\n%s", code, out.Len(), errs.String())
	}
}

// A recording killed outright leaves whole blocks: parse reads them,
// warns that the end record is missing, and succeeds. A trace cut inside
// a block (a copy cut short) is damaged: parse fails unless --partial.
func TestParseOfARecordingCutShort(t *testing.T) {
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	a := tracetest.Addrs(netip.MustParseAddrPort("127.0.0.1:43545"), netip.MustParseAddrPort("127.0.0.1:5201"), 4026531840)
	conn := uint16(event.TypeTCPConn)
	for seq := range uint64(4) {
		if err := w.Event(conn, tracetest.Conn(seq, 1000*(seq+1), 0, 0xffff88003cea0a40, a, 2, 1, 7, "iperf3")); err != nil {
			t.Fatal(err)
		}
		if seq == 1 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	killed, torn := filepath.Join(dir, "killed.trace"), filepath.Join(dir, "torn.trace")
	if err := os.WriteFile(killed, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(torn, buf.Bytes()[:buf.Len()-7], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		code  int
		lines int
		says  string
	}{
		{[]string{"parse", killed}, 0, 4, "skbtrace: warning: the recording did not end normally (no end record)"},
		{[]string{"parse", torn}, 1, 2, "skbtrace: trace truncated: the block at offset"},
		{[]string{"parse", "--partial", torn}, 0, 2, "skbtrace: warning: trace truncated"},
	} {
		var out, errs bytes.Buffer
		code := Main(c.args, nil, &out, &errs)
		if code != c.code || strings.Count(out.String(), "\n") != c.lines || !strings.Contains(errs.String(), c.says) {
			t.Errorf("%v: exit %d, %d events; want exit %d, %d events, saying %q:\n%s", c.args, code, strings.Count(out.String(), "\n"), c.code, c.lines, c.says, errs.String())
		}
	}
}
