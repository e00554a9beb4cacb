// Package testenv holds what tests share about the machine they run on.
package testenv

import (
	"os"
	"testing"
)

// RequireRoot skips t without root, but fails it under CI=true: there the
// kernel, lab and namespace tests must run. needs says what root is for.
func RequireRoot(t testing.TB, needs string) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("this test needs root (%s) and CI=true forbids skipping it", needs)
	}
	t.Skipf("needs root (%s)", needs)
}
