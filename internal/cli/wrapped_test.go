package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pidCommand is a command that writes its PID to file, then sleeps: sh
// execs sleep, so the PID is the sleeping process's.
func pidCommand(file string, trapTerm bool) []string {
	script := "echo $$ > " + file + "; exec sleep 30"
	if trapTerm {
		script = "trap '' TERM; " + script
	}
	return []string{"sh", "-c", script}
}

// readPid waits for the PID a pidCommand wrote.
func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no PID in %s after 10 s", file)
	return 0
}

// running tells whether pid lives: a zombie (killed, its new parent not
// yet waiting for it) does not.
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// checkGone fails t unless pid has ended within 5 s, and kills it if not.
func checkGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s: the command (pid %d) still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWrappedCommandEndsOnTermThenKill(t *testing.T) {
	for _, c := range []struct {
		trap bool
		says string
	}{
		{false, "skbtrace: ended sh (pid %d) at the end of the recording: SIGTERM, exit status 143\n"},
		{true, "skbtrace: killed sh (pid %d) at the end of the recording: still running 200ms after SIGTERM\n"},
	} {
		file := filepath.Join(t.TempDir(), "pid")
		w, err := startWrapped(pidCommand(file, c.trap), nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		pid := readPid(t, file)
		var errs bytes.Buffer
		w.end(200*time.Millisecond, &errs)
		if running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("trap %v: the command runs on after end", c.trap)
		}
		if want := fmt.Sprintf(c.says, pid); errs.String() != want {
			t.Errorf("trap %v: end said %q, want %q", c.trap, errs.String(), want)
		}
		if err := w.status(); err != nil {
			t.Errorf("trap %v: a command skbtrace ended is reported as failing: %v", c.trap, err)
		}
		errs.Reset()
		w.end(200*time.Millisecond, &errs)
		if errs.Len() > 0 {
			t.Errorf("trap %v: ending it again said %q", c.trap, errs.String())
		}
	}
}

// A command that fails on its own is reported as before: skbtrace exits
// with its status.
func TestWrappedCommandFailureIsItsStatus(t *testing.T) {
	for _, c := range []struct {
		script string
		want   error
	}{
		{"exit 0", nil},
		{"exit 3", commandStatus{name: "sh", code: 3}},
		{"kill -KILL $$", commandStatus{name: "sh", code: 137}},
	} {
		w, err := startWrapped([]string{"sh", "-c", c.script}, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		<-w.Done()
		if err := w.status(); err != c.want {
			t.Errorf("sh -c %q: status %v, want %v", c.script, err, c.want)
		}
	}
	if _, err := startWrapped([]string{"/nonexistent/h1-command"}, nil, io.Discard); err == nil || !strings.HasPrefix(err.Error(), "starting /nonexistent/h1-command: ") {
		t.Errorf("a command that cannot start: %v", err)
	}
}

// Pdeathsig fires when the forking thread ends: a command asked for from
// a thread that ends at once (a goroutine locked to it that returns) must
// live on while skbtrace does.
func TestWrappedCommandOutlivesTheThreadThatStartedIt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pid")
	type started struct {
		w   *wrappedCmd
		tid int
		err error
	}
	var s started
	for range 3 {
		ch := make(chan started, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			w, err := startWrapped(pidCommand(file, false), nil, io.Discard)
			ch <- started{w, unix.Gettid(), err}
		}()
		if s = <-ch; s.err != nil {
			t.Fatal(s.err)
		}
		if s.tid != os.Getpid() {
			break
		}
		// The main thread is kept, not ended: try again from another one.
		s.w.end(time.Second, io.Discard)
		s.w = nil
		os.Remove(file)
	}
	if s.w == nil {
		t.Fatal("every goroutine ran on the main thread")
	}
	defer s.w.end(time.Second, io.Discard)
	pid := readPid(t, file)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not end", s.tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-s.w.Done():
		t.Fatalf("the command died with the thread that asked for it: %v", s.w.err)
	case <-time.After(300 * time.Millisecond):
	}
	if !running(pid) {
		t.Fatal("the command died with the thread that asked for it")
	}
}

// A skbtrace killed outright (SIGKILL, the OOM killer) takes its command
// along: this test binary's child starts one and is killed.
func TestWrappedCommandDiesWithSkbtrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "pid")
	child := exec.Command(os.Args[0], "-test.run=^TestWrappedChild$")
	child.Env = append(os.Environ(), "SKBTRACE_WRAPPED_CHILD="+file)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	pid := readPid(t, file)
	child.Process.Kill()
	child.Wait()
	checkGone(t, pid, "SIGKILL of the process that started it")
}

// TestWrappedChild is TestWrappedCommandDiesWithSkbtrace's child: it
// starts a command, then waits to be killed.
func TestWrappedChild(t *testing.T) {
	file := os.Getenv("SKBTRACE_WRAPPED_CHILD")
	if file == "" {
		t.Skip("runs only as TestWrappedCommandDiesWithSkbtrace's child")
	}
	if _, err := startWrapped(pidCommand(file, false), nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
}
