// Package testenv holds what tests share about the machine they run on:
// root, the programs they drive, headless Chromium, and the network
// namespaces they make. What a test needs and lacks skips it on a
// developer's machine but fails it under CI=true, where everything the
// tests need is installed and a skip would hide a test that never ran.
package testenv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/skbtrace/skbtrace/internal/report/browser"
)

// SkipOrFail skips t, or fails it under CI=true, saying why.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true forbids skipping", why)
	}
	t.Skip(why)
}

// RequireRoot skips t without root (fails it under CI=true). needs says
// what root is for.
func RequireRoot(t testing.TB, needs string) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "this test needs root (%s)", needs)
	}
}

// Tool returns the path of a program the test runs, or skips t (fails it
// under CI=true) when it is not on PATH.
func Tool(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		SkipOrFail(t, "%s is not installed", name)
	}
	return path
}

// OpenPage loads url in headless Chromium; without Chromium it skips t
// (fails it under CI=true), and any other failure fails t.
func OpenPage(t testing.TB, url string, o browser.Options) *browser.Result {
	t.Helper()
	r, err := browser.Open(t.Context(), url, o)
	if errors.Is(err, browser.ErrMissing) {
		SkipOrFail(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// netnsDir is where iproute2 keeps named namespaces.
const netnsDir = "/var/run/netns"

// DeleteNetnsAtCleanup has `ip netns del name` run when t ends, and fails t
// unless that succeeds or the namespace is already gone (a test may delete
// it itself).
func DeleteNetnsAtCleanup(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
		if err == nil {
			return
		}
		if _, serr := os.Stat(filepath.Join(netnsDir, name)); errors.Is(serr, fs.ErrNotExist) {
			return
		}
		t.Errorf("ip netns del %s: %v: %s", name, err, out)
	})
}
