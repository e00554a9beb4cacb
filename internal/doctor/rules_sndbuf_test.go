package doctor

import (
	"math"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func findingNamed(t *testing.T, rep *Report, id string) *finding.Finding {
	t.Helper()
	for i := range rep.Findings {
		if rep.Findings[i].ID == id {
			return &rep.Findings[i]
		}
	}
	t.Fatalf("no %s among %v", id, ids(rep.Findings))
	return nil
}

// The lab's sndbuf-limited (tcp_wmem 4096 8192 8192 in the sender's
// namespace): the sysctl is named, in its namespace, and the first remedy
// is the sysctl command with a maximum computed from the flow (as the
// kernel sizes a buffer for what it keeps in flight), not a default cap.
func TestSndbufNamesTheNamespacesWmem(t *testing.T) {
	rep := Diagnose(load(t, "sock/sndbuf-wmem.json"))
	if got := top(rep); got != "sndbuf-limited" {
		t.Fatalf("top %q, want sndbuf-limited; findings %v", got, ids(rep.Findings))
	}
	f := findingNamed(t, rep, "sndbuf-limited")
	if f.Limit == nil || f.Limit.Kind != "tcp_wmem" || f.Limit.Where.Layer != finding.LayerSysctl || f.Limit.Value != "4096 8192 8192" {
		t.Fatalf("limit %+v, want the namespace's tcp_wmem", f.Limit)
	}
	a := f.Limit.Undo[0]
	if len(a.Argv) != 3 || a.Argv[0] != "sysctl" || !strings.HasPrefix(a.Argv[2], "net.ipv4.tcp_wmem=4096 8192 ") || a.Netns != f.Limit.Where.Netns || a.Netns == "" {
		t.Fatalf("first action %+v", a)
	}
	// 175 segments in the congestion window, 4352 bytes each as the
	// kernel charges a 1448-byte segment: 2 x 175 x 4352.
	if a.Argv[2] != "net.ipv4.tcp_wmem=4096 8192 1523200" || !strings.Contains(f.Limit.Arithmetic, "tcp_sndbuf_expand") {
		t.Errorf("action %q, arithmetic %q", a.Text, f.Limit.Arithmetic)
	}
	if r := strings.Join(f.Remedy, "\n"); strings.Contains(r, "4194304") || strings.Contains(r, "2097152") || strings.Contains(r, "SO_SNDBUF") {
		t.Errorf("remedy %q: a default cap, or the application's call where it set none", r)
	}
	// Waiting 96 % of its time, the flow is credited with ten times its
	// rate without the waits: 90 % at stake, not the 96 % waited.
	if math.Abs(f.Impact-0.9) > 1e-9 || !strings.Contains(f.ImpactText, "without the waits") {
		t.Errorf("impact %.3f (%s)", f.Impact, f.ImpactText)
	}
}

// The lab's sndbuf-so-sndbuf and sndbuf-python-sndbuf: the application's
// SO_SNDBUF is named with its process, as a change to the application (no
// command), and the namespace's tcp_wmem, which a locked buffer ignores,
// is not prescribed.
func TestSndbufNamesTheApplicationsSndbuf(t *testing.T) {
	for fixture, comm := range map[string]string{"sock/sndbuf-so-sndbuf.json": "skbtrace", "sock/sndbuf-python-sndbuf.json": "python3"} {
		t.Run(fixture, func(t *testing.T) { appSndbufNamed(t, fixture, comm) })
	}
}

func appSndbufNamed(t *testing.T, fixture, comm string) {
	rep := Diagnose(load(t, fixture))
	if got := top(rep); got != "sndbuf-limited" {
		t.Fatalf("top %q, want sndbuf-limited; findings %v", got, ids(rep.Findings))
	}
	f := findingNamed(t, rep, "sndbuf-limited")
	if f.Limit == nil || f.Limit.Kind != "so_sndbuf" || f.Limit.SetBy == nil || f.Limit.SetBy.PID == 0 || f.Limit.SetBy.Comm != comm {
		t.Fatalf("limit %+v, want so_sndbuf set by %s", f.Limit, comm)
	}
	a := f.Limit.Undo[0]
	if len(a.Argv) != 0 || !strings.HasPrefix(a.Text, "in "+f.Limit.SetBy.String()+": drop its setsockopt(SO_SNDBUF, 16384)") {
		t.Errorf("first action %+v", a)
	}
	if r := strings.Join(f.Remedy, "\n"); strings.Contains(r, "tcp_wmem=") {
		t.Errorf("remedy %q prescribes the sysctl", r)
	}
	if !strings.Contains(strings.Join(f.Evidence, "\n"), "so_sndbuf = 16384 bytes") {
		t.Errorf("evidence %q", f.Evidence)
	}
}

// Where the namespace's maximum already holds what the flow needs, the
// sysctl is not what limits: no sysctl limit is named.
func TestSndbufNoSysctlWhereItDoesNotLimit(t *testing.T) {
	ev := load(t, "sock/sndbuf-wmem.json")
	for i := range ev.Limits {
		if ev.Limits[i].Kind == "tcp_wmem" {
			ev.Limits[i].Value = "4096 8192 8388608"
		}
	}
	f := findingNamed(t, Diagnose(ev), "sndbuf-limited")
	if f.Limit != nil && f.Limit.Kind == "tcp_wmem" {
		t.Errorf("limit %+v named where its maximum is above the need", f.Limit)
	}
}

// A locked buffer whose owner was not found is the sending application's,
// not the receiving one's (the receive window's wording).
func TestSndbufOwnerUnknownIsTheSender(t *testing.T) {
	ev := load(t, "sock/sndbuf-so-sndbuf.json")
	for i := range ev.Limits {
		ev.Limits[i].SetBy = nil
	}
	f := findingNamed(t, Diagnose(ev), "sndbuf-limited")
	if f.Limit == nil || !strings.HasPrefix(f.Remedy[0], "in the sending application: drop its setsockopt(SO_SNDBUF") {
		t.Errorf("remedy %q", f.Remedy)
	}
}
