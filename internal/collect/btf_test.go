package collect

import (
	"os"
	"testing"
)

// requireKernelBTF skips where the kernel publishes no BTF (some build
// containers); hook checks read it, which needs no privileges.
func requireKernelBTF(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kernel BTF is missing and CI=true forbids skipping")
		}
		t.Skip("kernel BTF not available")
	}
}
