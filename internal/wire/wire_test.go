package wire

import (
	"os/exec"
	"strings"
	"testing"
)

// The offline stages read traces, captures and profiles through these
// types alone: none links the BPF loader.
func TestOfflinePackagesLinkNoLoader(t *testing.T) {
	offline := []string{"../event", "../trace", "../analyze/...", "../report/...", "../profile", "../finding", "../doctor"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, offline...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasSuffix(dep, "/internal/probe") || dep == "github.com/cilium/ebpf" {
			t.Errorf("an offline package links %s", dep)
		}
	}
}
