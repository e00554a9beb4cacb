package e2e

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/lab"
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

// TestProfileCountsReceivedPacketsOnVethAndLoopback: every receive path
// counts its packets once. veth and loopback hand theirs to the stack
// through the backlog, where the drivers' entry points never fire (veth
// profiled "received 2" beside 1.9 M transmitted): a TCP stream over each
// must be received as it was transmitted, skb for skb as the devices'
// own counters count them (the profile counts every device on the host,
// so a little more than the stream's).
func TestProfileCountsReceivedPacketsOnVethAndLoopback(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair, err := lab.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	vethAddr := loadServer(t, pair)
	loAddr := loopbackServer(t)
	vethRx := func() uint64 {
		return linkStats(t, pair.Sender, pair.SenderDev).RxPackets + linkStats(t, pair.Receiver, pair.ReceiverDev).RxPackets
	}
	loRx := func() uint64 {
		b, err := os.ReadFile("/sys/class/net/lo/statistics/rx_packets")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name string
		// received reads the skbs the devices of the stream received
		received func() uint64
		client   []string
	}{
		{"veth", vethRx, []string{"load", "client", vethAddr, "--netns", pair.Sender.Name, "-d", "2"}},
		{"loopback", loRx, []string{"load", "client", loAddr, "-d", "2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pb := filepath.Join(t.TempDir(), c.name+".pb.gz")
			before := c.received()
			out, err := exec.Command(binary, append([]string{"profile", "-o", pb, "--", binary}, c.client...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("skbtrace profile: %v\n%s", err, out)
			}
			devRx := c.received() - before
			f, err := os.Open(pb)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := profile.ReadPprof(f)
			if err != nil {
				t.Fatal(err)
			}
			tr := p.Meta.Traffic
			t.Logf("%s: transmitted %d packets in %d skbs, received %d in %d; the devices received %d skbs",
				c.name, tr.TxPkts, tr.TxSkbs, tr.RxPkts, tr.RxSkbs, devRx)
			if devRx < 1000 {
				t.Fatalf("the stream moved only %d skbs", devRx)
			}
			if math.Abs(float64(tr.RxPkts)/float64(tr.TxPkts)-1) > 0.03 || math.Abs(float64(tr.RxSkbs)/float64(tr.TxSkbs)-1) > 0.03 {
				t.Errorf("received %d packets in %d skbs against %d in %d transmitted", tr.RxPkts, tr.RxSkbs, tr.TxPkts, tr.TxSkbs)
			}
			if r := float64(tr.RxSkbs) / float64(devRx); r < 0.97 || r > 1.1 {
				t.Errorf("received %d skbs, the devices %d (%.3f)", tr.RxSkbs, devRx, r)
			}
		})
	}
}
