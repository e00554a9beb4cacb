package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// fakeT records how a helper ended t; Skip and Fatal end the goroutine
// as testing's do.
type fakeT struct {
	testing.TB
	skipped, failed bool
	cleanups        []func()
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Skip(...any)           { f.skipped = true; runtime.Goexit() }
func (f *fakeT) Fatalf(string, ...any) { f.failed = true; runtime.Goexit() }
func (f *fakeT) Errorf(string, ...any) { f.failed = true }
func (f *fakeT) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) run(fn func(testing.TB)) *fakeT {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

func TestSkipOrFailSkipsButFailsUnderCI(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := new(fakeT).run(func(t testing.TB) { SkipOrFail(t, "no %s", "thing") })
		if f.skipped == (ci == "true") || f.failed != (ci == "true") {
			t.Errorf("CI=%q: skipped %v, failed %v", ci, f.skipped, f.failed)
		}
	}
}

func TestTool(t *testing.T) {
	t.Setenv("CI", "true")
	var path string
	if f := new(fakeT).run(func(t testing.TB) { path = Tool(t, "sh") }); f.failed || f.skipped || path == "" {
		t.Errorf("sh: path %q, skipped %v, failed %v", path, f.skipped, f.failed)
	}
	if f := new(fakeT).run(func(t testing.TB) { Tool(t, "skbtrace-no-such-tool") }); !f.failed {
		t.Error("a missing program did not fail the test under CI=true")
	}
}

// The cleanup deletes the namespace, accepts one the test deleted itself,
// and fails the test when `ip netns del` fails with the name still there.
func TestDeleteNetnsAtCleanup(t *testing.T) {
	RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("skbt-testenv-%d", os.Getpid())
	path := filepath.Join(netnsDir, name)
	for _, selfDeleted := range []bool{false, true} {
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", name, err, out)
		}
		f := new(fakeT)
		DeleteNetnsAtCleanup(f, name)
		if selfDeleted {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns del %s: %v: %s", name, err, out)
			}
		}
		f.cleanups[0]()
		if _, err := os.Stat(path); err == nil || f.failed {
			t.Errorf("deleted by the test %v: %s still there (%v) or the cleanup failed (%v)", selfDeleted, path, err, f.failed)
		}
	}

	// ip cannot unlink a directory.
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
	})
	f := new(fakeT)
	DeleteNetnsAtCleanup(f, name)
	f.cleanups[0]()
	if !f.failed {
		t.Errorf("ip netns del failed on %s, a directory, and the cleanup did not fail the test", path)
	}
}
