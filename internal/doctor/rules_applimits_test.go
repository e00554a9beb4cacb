package doctor

import (
	"strings"
	"testing"
)

// The lab's nagle-delay: Nagle left on is named as the socket's limit, and
// its first action is the application's change (no command: the lab
// applies it by the workload's switch).
func TestNagleNamesTheSocketsNagle(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "lab/nagle-delay.json")), "nagle-delay")
	if f.Limit == nil || f.Limit.Kind != KindTCPNagle || len(f.Limit.Applies.Flows) != 1 {
		t.Fatalf("limit %+v", f.Limit)
	}
	if a := f.Limit.Undo[0]; len(a.Argv) != 0 || !strings.Contains(a.Text, "TCP_NODELAY, 1") || f.Remedy[0] != a.Text {
		t.Errorf("first action %+v, remedy %q", a, f.Remedy)
	}
}

// The lab's small-packet-bound: the process and the size of its calls are
// the limit, and the remedy names them.
func TestSmallPacketNamesTheWriter(t *testing.T) {
	f := findingNamed(t, Diagnose(load(t, "lab/small-packet-bound.json")), "small-packet-bound")
	if f.Limit == nil || f.Limit.Kind != KindWriteSize || f.Limit.SetBy == nil || f.Limit.SetBy.PID == 0 {
		t.Fatalf("limit %+v", f.Limit)
	}
	if a := f.Limit.Undo[0]; len(a.Argv) != 0 || !strings.HasPrefix(a.Text, "in "+f.Limit.SetBy.String()+": send larger messages") {
		t.Errorf("first action %+v", a)
	}
}
