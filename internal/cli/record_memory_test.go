package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// memoryCgroup is a memory cgroup this test made, v2 or v1 (whichever
// has the memory controller).
type memoryCgroup struct {
	dir                  string
	limit, peak, oomFile string
}

// newMemoryCgroup makes a fresh memory cgroup limited to limit bytes,
// removed when t ends.
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := "skbtrace-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var cg *memoryCgroup
	if b, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control"); err == nil && strings.Contains(" "+string(b), " memory") {
		cg = &memoryCgroup{dir: "/sys/fs/cgroup/" + name, limit: "memory.max", peak: "memory.peak", oomFile: "memory.events"}
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		cg = &memoryCgroup{dir: "/sys/fs/cgroup/memory/" + name, limit: "memory.limit_in_bytes", peak: "memory.max_usage_in_bytes", oomFile: "memory.oom_control"}
	} else {
		testenv.SkipOrFail(t, "no cgroup hierarchy with the memory controller")
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Fatalf("making a memory cgroup: %v", err)
	}
	t.Cleanup(func() {
		// The cgroup empties once its process is reaped; the kernel may
		// take a moment to see it.
		var err error
		for range 50 {
			if err = os.Remove(cg.dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("removing the memory cgroup %s: %v", cg.dir, err)
	})
	if err := os.WriteFile(filepath.Join(cg.dir, cg.limit), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatalf("limiting the memory cgroup: %v", err)
	}
	return cg
}

// value reads a number from one of the cgroup's files ("" key: the
// file's only value; otherwise the line "KEY N").
func (cg *memoryCgroup) value(t *testing.T, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cg.dir, file))
	if err != nil {
		t.Fatalf("reading the memory cgroup: %v", err)
	}
	s := strings.TrimSpace(string(b))
	if key != "" {
		s = ""
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, key+" "); ok {
				s = v
			}
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("reading %s %s of the memory cgroup: %q", file, key, s)
	}
	return n
}

// run runs record, with args, as this test binary's child (TestChildMain)
// in the cgroup, and returns its exit status and stderr.
func (cg *memoryCgroup) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	js, _ := json.Marshal(append([]string{"record"}, args...))
	// The child joins the cgroup before it execs, so that all it
	// allocates is charged there.
	child := exec.Command("sh", "-c", `echo $$ > "$1" && exec "$2" -test.run='^TestChildMain$'`,
		"sh", filepath.Join(cg.dir, "cgroup.procs"), os.Args[0])
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			child.Env = append(child.Env, kv)
		}
	}
	child.Env = append(child.Env, "SKBTRACE_CLI_CHILD="+string(js))
	var errs bytes.Buffer
	child.Stderr = &errs
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		child.Process.Kill()
		<-done
		t.Errorf("record %s still ran after 60 s", strings.Join(args, " "))
	}
	return child.ProcessState.ExitCode(), errs.String()
}

// loopbackTraffic opens a connection after another on loopback, each
// sending 256 KiB, so that the recording has sockets and packets to keep,
// until stop.
func loopbackTraffic(t *testing.T) (stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer wg.Done()
		buf := make([]byte, 256<<10)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				continue
			}
			c.Write(buf)
			c.Close()
		}
	}()
	return func() {
		close(done)
		ln.Close()
		wg.Wait()
	}
}

// record -e all fits in 64 MB: it sets the Go runtime's soft limit from
// its cgroup's, leaving what the kernel holds for it. Below what it needs
// it says so at start and writes nothing.
func TestRecordUnderAMemoryCgroup(t *testing.T) {
	testenv.RequireRoot(t, "making memory cgroups, loading BPF programs")
	t.Run("64M", func(t *testing.T) {
		cg := newMemoryCgroup(t, 64<<20)
		path := filepath.Join(t.TempDir(), "run.trace")
		stop := loopbackTraffic(t)
		code, errs := cg.run(t, "-e", "all", "-d", "3", "-o", path)
		stop()
		oom := cg.value(t, cg.oomFile, "oom_kill")
		t.Logf("peak %d bytes (%s), OOM kills %d\n%s", cg.value(t, cg.peak, ""), cg.peak, oom, errs)
		if code != 0 || oom != 0 || !strings.Contains(errs, "skbtrace: recorded ") {
			t.Fatalf("record -e all -d 3 under 64M: exit %d, %d OOM kills, want 0 and the totals:\n%s", code, oom, errs)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		r, err := trace.NewReader(f)
		if err != nil {
			t.Fatalf("reading the trace recorded under 64M: %v", err)
		}
		for {
			if _, err := r.Next(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("reading the trace recorded under 64M: %v", err)
			}
		}
	})
	t.Run("32M", func(t *testing.T) {
		cg := newMemoryCgroup(t, 32<<20)
		path := filepath.Join(t.TempDir(), "run.trace")
		code, errs := cg.run(t, "-e", "all", "-d", "3", "-o", path)
		if code == 0 || !strings.Contains(errs, "skbtrace: recording needs about ") ||
			!strings.Contains(errs, "allows 32.00 MiB") || strings.Contains(errs, "skbtrace: recording tcp_") {
			t.Errorf("record -e all under 32M: exit %d, want non-zero saying what it needs before attaching:\n%s", code, errs)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record -e all under 32M left %s: %v", path, err)
		}
	})
}
