package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// TestProfileAttributesUDPSendsAndCountsPackets profiles 64-byte UDP on
// loopback sent by a child process (-- CMD): the samples must land in the
// UDP send path, the packets be counted in the same window, and every
// output format be written.
func TestProfileAttributesUDPSendsAndCountsPackets(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	addr := loopbackServer(t)
	dir := t.TempDir()
	pb := filepath.Join(dir, "udp.pb.gz")
	// The sender is skbtrace's own load generator, so the guests of the
	// kernel matrix need nothing beyond the binary.
	cmd := exec.Command(binary, "profile", "--frequency", "499", "-o", pb, "--",
		binary, "load", "client", addr, "--mode", "udp", "-l", "64", "-d", "2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("skbtrace profile: %v\n%s", err, out)
	}
	for _, want := range []string{"phase (busy CPU)", "ns/packet", "udp"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the phase table lacks %q:\n%s", want, out)
		}
	}
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.ReadPprof(f)
	if err != nil {
		t.Fatal(err)
	}
	// Counting at work, not the rate: an emulated 5.10 guest sent 5,336
	// datagrams in the 2 s (this host, tens of thousands).
	if p.Meta.Traffic.Packets() < 1000 {
		t.Errorf("%d packets counted in 2 s of UDP", p.Meta.Traffic.Packets())
	}
	var udp, syscall uint64
	for _, s := range p.Samples {
		if s.Phase == profile.PhaseUDP {
			udp += s.Count
		}
		if s.Context == profile.Syscall {
			syscall += s.Count
		}
	}
	if udp == 0 || syscall == 0 {
		t.Errorf("no samples in UDP (%d) or in syscalls (%d) of %d", udp, syscall, p.Total())
	}
	for _, format := range []string{"folded", "html"} {
		file := filepath.Join(dir, "out."+format)
		if out, err := exec.Command(binary, "profile", "-d", "0.5", "-o", file).CombinedOutput(); err != nil {
			t.Fatalf("skbtrace profile -o %s: %v\n%s", file, err, out)
		}
		if st, err := os.Stat(file); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", file, err)
		}
	}
}

// TestLabComparePairsNameWhatChanged runs the lab's good and bad pairs:
// compare must name netfilter, the offloads and the packet size.
func TestLabComparePairsNameWhatChanged(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "nft")
	testenv.Tool(t, "ethtool")
	start := time.Now()
	out, err := exec.Command(binary, "lab", "compare", "--dir", t.TempDir(), "-d", "3").CombinedOutput()
	if err != nil {
		t.Fatalf("skbtrace lab compare: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "\n  named\n"); n != 3 {
		t.Errorf("%d of 3 pairs named:\n%s", n, out)
	}
	t.Logf("%s in %v", out, time.Since(start))
}

// TestDoctorProfileJoinsTheReport: doctor --profile puts the profile's
// phases and packets in the report's evidence and writes the pprof, so
// compare can diff two reports phase by phase.
func TestDoctorProfileJoinsTheReport(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	addr := loopbackServer(t)
	dir := t.TempDir()
	report := func(name, size string) string {
		file := filepath.Join(dir, name+".json")
		out, err := exec.Command(binary, "doctor", "--json", "-o", file, "--profile", filepath.Join(dir, name+".pb.gz"), "--",
			binary, "load", "client", addr, "-d", "2", "-l", size).CombinedOutput()
		if err != nil {
			t.Fatalf("skbtrace doctor --profile: %v\n%s", err, out)
		}
		return file
	}
	a, b := report("large", "131072"), report("small", "1000")
	out, err := exec.Command(binary, "compare", a, b).CombinedOutput()
	if err != nil {
		t.Fatalf("skbtrace compare: %v\n%s", err, out)
	}
	for _, want := range []string{"doctor report", "phase (ns per", "tcp"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("compare of two profiled reports lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "small.pb.gz")); err != nil {
		t.Errorf("the profile was not written: %v", err)
	}
}
