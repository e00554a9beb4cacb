package e2e

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/report/browser"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// The live capture tests make the captures that internal/analyze/pcap's
// fixtures are copies of; SKBTRACE_UPDATE_PCAP_FIXTURES=1 refreshes them.
var fixtureDir = filepath.Join("..", "..", "internal", "analyze", "pcap", "testdata")

// tcpdumpIn captures on a device inside a namespace until stop is called;
// stop returns tcpdump's closing lines (packets captured, dropped).
func tcpdumpIn(t *testing.T, ns *host.Netns, dev, file string, count int, filter string) (stop func() []string) {
	t.Helper()
	tcpdump := testenv.Tool(t, "tcpdump")
	snap := "128"
	if strings.HasPrefix(dev, "nflog") {
		// libpcap's NFLOG reader splits a message longer than the snaplen
		// into broken records: the log rule's own snaplen bounds them instead.
		snap = "0"
	}
	args := []string{"netns", "exec", ns.Name, tcpdump, "-i", dev, "-s", snap, "-B", "65536", "--immediate-mode", "-w", file, "-U"}
	if dev == "any" {
		// Linux cooked v2 records which frames the host sent.
		args = append(args, "-y", "LINUX_SLL2")
	}
	if count > 0 {
		args = append(args, "-c", fmt.Sprint(count))
	}
	cmd := exec.Command("ip", append(args, filter)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening, drained := make(chan struct{}), make(chan struct{})
	var summary []string
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				close(listening)
				continue
			}
			summary = append(summary, sc.Text())
		}
	}()
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("tcpdump did not start")
	}
	stopped := false
	stop = func() []string {
		if stopped {
			return summary
		}
		stopped = true
		// tcpdump exits at SIGINT without draining its ring: wait until the
		// file stops growing, so the capture holds every packet it got.
		last := int64(-1)
		for i := 0; i < 100; i++ {
			time.Sleep(150 * time.Millisecond)
			st, err := os.Stat(file)
			if err == nil && st.Size() == last {
				break
			}
			if err == nil {
				last = st.Size()
			}
		}
		cmd.Process.Signal(os.Interrupt)
		<-drained
		cmd.Wait()
		t.Logf("tcpdump on %s: %s", dev, strings.Join(summary, "; "))
		return summary
	}
	t.Cleanup(func() { stop() })
	return stop
}

// serveAll runs a load server on every address of the receiver namespace.
func serveAll(t *testing.T, pair *lab.Pair) {
	srv := exec.Command("taskset", "-c", "1", binary, "load", "server", "--listen", "0.0.0.0:5301", "--netns", pair.Receiver.Name)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
}

func analyzeCapture(t *testing.T, file string, args ...string) *pcap.Report {
	t.Helper()
	out, err := exec.Command(binary, append([]string{"pcap", file, "--json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("pcap %s: %v", file, err)
	}
	var r pcap.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("pcap --json: %v: %s", err, out)
	}
	return &r
}

// keepFixture gzips a capture into the analyzer's testdata when asked to.
func keepFixture(t *testing.T, file, name string) {
	if os.Getenv("SKBTRACE_UPDATE_PCAP_FIXTURES") == "" {
		return
	}
	in, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(fixtureDir, name+".pcap.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
}

func dataFlow(t *testing.T, r *pcap.Report, dstPort string) *pcap.FlowReport {
	t.Helper()
	for i := range r.Flows {
		if strings.HasSuffix(r.Flows[i].Dst, dstPort) && r.Flows[i].PayloadBytes > 0 {
			return &r.Flows[i]
		}
	}
	t.Fatalf("no data flow to %s in %+v", dstPort, r.Flows)
	return nil
}

// Frames above the MTU are attributed to whoever made them: the receiver's
// GRO (sender TSO off, receiver GRO on, captured at the receiver) or the
// sender's TSO (captured at the sender).
func TestPcapAttributesLargeFramesToGROOrTSO(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	for _, c := range []struct {
		fixture, madeBy, location string
		atReceiver                bool
	}{
		{"gro-receiver", "receiver GRO", pcap.LocationReceiver, true},
		{"tso-sender", "sender TSO", pcap.LocationSender, false},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			pair := newPair(t)
			ns := pair.Sender
			if c.atReceiver {
				run(t, pair.Sender, "ethtool", "-K", pair.SenderDev, "tso", "off", "gso", "off")
				run(t, pair.Receiver, "ethtool", "-K", pair.ReceiverDev, "gro", "on")
				ns = pair.Receiver
			}
			serveAll(t, pair)
			file := filepath.Join(t.TempDir(), c.fixture+".pcap")
			stop := tcpdumpIn(t, ns, "any", file, 3000, "tcp port 5301")
			loadClient(t, pair, lab.ReceiverAddr.Addr().String()+":5301", "-d", "0.5", "--cc", "cubic")
			stop()
			keepFixture(t, file, c.fixture)
			f := dataFlow(t, analyzeCapture(t, file), ":5301")
			if f.OverMTU == nil || f.OverMTU.AvgSegments < 2 || !strings.Contains(f.OverMTU.MadeBy, c.madeBy) || f.Location != c.location {
				t.Fatalf("captured %q, frames above the MTU %+v", f.Location, f.OverMTU)
			}
		})
	}
}

func TestPcapFindsJumpingOuterIPIDsButNotOnTheInnerDevice(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(t)
	if err := pair.AddVXLAN(); err != nil {
		t.Fatal(err)
	}
	run(t, pair.Sender, "ethtool", "-K", pair.SenderDev, "tso", "off", "tx-udp_tnl-segmentation", "off", "tx-udp_tnl-csum-segmentation", "off")
	run(t, pair.Receiver, "ethtool", "-K", pair.ReceiverDev, "gro", "on")
	if err := pair.ScrambleOuterIPIDs(); err != nil {
		t.Fatal(err)
	}
	serveAll(t, pair)
	dir := t.TempDir()
	outerFile, innerFile := filepath.Join(dir, "outer.pcap"), filepath.Join(dir, "inner.pcap")
	stopOuter := tcpdumpIn(t, pair.Receiver, pair.ReceiverDev, outerFile, 3000, "udp port 4789")
	stopInner := tcpdumpIn(t, pair.Receiver, lab.TunnelDev, innerFile, 3000, "tcp port 5301")
	loadClient(t, pair, lab.ReceiverTunnelAddr.Addr().String()+":5301", "-d", "0.5", "--cc", "cubic")
	stopOuter()
	stopInner()
	keepFixture(t, outerFile, "vxlan-outer-jumping")
	keepFixture(t, innerFile, "vxlan-inner")
	outer := analyzeCapture(t, outerFile)
	var found bool
	for _, f := range outer.Findings {
		found = found || f.ID == "gro-blocked" && strings.Contains(f.Scope, "outer header")
	}
	if !found || len(outer.Tunnels) == 0 || outer.Tunnels[0].IPID.Share < 0.9 {
		t.Fatalf("outer capture: findings %+v, tunnels %+v", outer.Findings, outer.Tunnels)
	}
	for _, f := range analyzeCapture(t, innerFile).Findings {
		if f.ID == "gro-blocked" {
			t.Fatalf("the inner device's capture gave %+v", f)
		}
	}
}

func TestPcapRetransmissionsMatchTheKernel(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "nft")
	pair := newPair(t)
	for _, args := range [][]string{
		{"add", "table", "inet", "skbtrace_e2e"},
		{"add", "chain", "inet", "skbtrace_e2e", "in", "{ type filter hook input priority 0 ; }"},
		// Never the SYN: a lost SYN costs the 0.3 s transfer a whole second.
		{"add", "rule", "inet", "skbtrace_e2e", "in", "tcp", "dport", "5301", "tcp flags & syn == 0", "numgen", "random", "mod", "100", "<", "1", "drop"},
	} {
		run(t, pair.Receiver, "nft", args...)
	}
	serveAll(t, pair)
	file := filepath.Join(t.TempDir(), "loss.pcap")
	before := retransSegs(t, pair.Sender)
	stop := tcpdumpIn(t, pair.Sender, pair.SenderDev, file, 0, "tcp port 5301")
	loadClient(t, pair, lab.ReceiverAddr.Addr().String()+":5301", "-d", "0.3", "--cc", "cubic")
	// The closed socket still retransmits its tail; capture and count until
	// everything is acknowledged.
	waitAcked(t, pair.Sender)
	stop()
	kernel := int64(retransSegs(t, pair.Sender) - before)
	keepFixture(t, file, "loss-sender")
	if os.Getenv("SKBTRACE_UPDATE_PCAP_FIXTURES") != "" {
		if err := os.WriteFile(filepath.Join(fixtureDir, "loss-sender.kernel.json"), []byte(fmt.Sprintf("{\"tcp_retrans_segs_delta\": %d}\n", kernel)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := dataFlow(t, analyzeCapture(t, file), ":5301")
	got := float64(f.TCP.RetransmittedSegs)
	t.Logf("capture: %d retransmitted segments (%d packets); kernel TcpRetransSegs delta %d", f.TCP.RetransmittedSegs, f.TCP.Retransmissions, kernel)
	if kernel < 20 || math.Abs(got-float64(kernel)) > 0.05*float64(kernel) {
		t.Fatalf("capture counted %v retransmitted segments, the kernel %d", got, kernel)
	}
}

// waitAcked waits until no TCP socket of the namespace has data in flight.
func waitAcked(t *testing.T, ns *host.Netns) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var socks []host.TCPSocket
		if err := ns.Do(func() (err error) { socks, err = host.ReadTCPSockets(); return err }); err != nil {
			t.Fatal(err)
		}
		busy := false
		for _, s := range socks {
			busy = busy || s.Unacked > 0 || s.NotSent > 0
		}
		if !busy {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("data still in flight after 10 s")
}

func run(t *testing.T, ns *host.Netns, name string, args ...string) {
	t.Helper()
	if _, err := ns.Run(name, args...); err != nil {
		t.Fatal(err)
	}
}

// The graphs page opens in a browser at once and shows non-empty charts.
func TestPcapGraphsRenderInHeadlessChromium(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command(binary, "pcap", filepath.Join(fixtureDir, "tso-sender.pcap.gz"), "--graphs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	shot := filepath.Join(dir, "page.png")
	testenv.OpenPage(t, "file://"+filepath.Join(dir, "index.html"), browser.Options{Screenshot: shot, Width: 1000, Height: 1400})
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// Each chart's plot area must hold drawn (non-white, non-grey-frame)
	// pixels: count coloured ones in the first chart's band.
	b := img.Bounds()
	coloured := 0
	for y := b.Min.Y + 130; y < min(b.Max.Y, 450); y++ {
		for x := b.Min.X + 100; x < b.Max.X-30; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 200 || g>>8 < 200 || bl>>8 < 200 {
				coloured++
			}
		}
	}
	if coloured < 500 {
		t.Fatalf("the time-sequence chart looks empty: %d drawn pixels", coloured)
	}
	for _, name := range []string{"flow1-tseq.svg", "flow1-throughput.svg", "flow1-rtt.svg", "flow1-size.svg"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() < 1000 {
			t.Errorf("%s missing or empty", name)
		}
	}
}

// BIG TCP (Linux 6.3 for IPv4): with gso_max_size above 64 KB the sender
// hands the veth GSO packets larger than an IP length field holds. A
// capture at the sender has frames above 64 KB whose IPv4 total length
// reads 0; the analysis takes their length from the frame and attributes
// them to the sender's GSO.
func TestPcapAnalyzesBigTCPFramesAbove64KB(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	// IPv6 is left out: over this veth pair its stream stayed in segments
	// of a few hundred bytes (the unit tests cover jumbograms).
	for _, c := range []struct{ name, dst string }{
		{"bigtcp-ipv4", lab.ReceiverAddr.Addr().String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			pair := newPair(t)
			if err := pair.BigTCP(185000); err != nil {
				t.Fatal(err)
			}
			run(t, pair.Sender, "ip", "-6", "addr", "add", "fd00:200::1/64", "dev", pair.SenderDev, "nodad")
			run(t, pair.Receiver, "ip", "-6", "addr", "add", "fd00:200::2/64", "dev", pair.ReceiverDev, "nodad")
			srv := exec.Command("taskset", "-c", "1", binary, "load", "server", "--listen", "[::]:5301", "--netns", pair.Receiver.Name)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
			file := filepath.Join(t.TempDir(), c.name+".pcap")
			stop := tcpdumpIn(t, pair.Sender, "any", file, 3000, "tcp port 5301")
			loadClient(t, pair, net.JoinHostPort(c.dst, "5301"), "-d", "0.5", "--cc", "cubic", "-l", "1048576")
			stop()
			keepFixture(t, file, c.name)
			f := dataFlow(t, analyzeCapture(t, file), ":5301")
			var above uint64
			for _, s := range f.Sizes {
				if s.UpTo > 65535 {
					above += s.Packets
				}
			}
			t.Logf("%s: %d of %d data frames above 64 KB; frames above the MTU: %+v", c.name, above, f.DataPackets, f.OverMTU)
			if above == 0 || f.OverMTU == nil || !strings.Contains(f.OverMTU.MadeBy, "sender TSO") {
				t.Fatalf("sizes %+v, frames above the MTU %+v", f.Sizes, f.OverMTU)
			}
		})
	}
}

// NFLOG (tcpdump -i nflog:N) holds what a netfilter rule logs, packets in
// TLVs; the receiver's stream, logged by nft, analyzes like any capture.
func TestPcapReadsAnNFLOGCapture(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(t)
	for _, args := range [][]string{
		{"add", "table", "inet", "skbtrace_e2e"},
		{"add", "chain", "inet", "skbtrace_e2e", "in", "{ type filter hook input priority 0 ; }"},
		{"add", "rule", "inet", "skbtrace_e2e", "in", "tcp", "dport", "5301", "log", "group", "5", "snaplen", "96"},
	} {
		run(t, pair.Receiver, "nft", args...)
	}
	serveAll(t, pair)
	file := filepath.Join(t.TempDir(), "nflog.pcap")
	stop := tcpdumpIn(t, pair.Receiver, "nflog:5", file, 2000, "")
	loadClient(t, pair, lab.ReceiverAddr.Addr().String()+":5301", "-d", "0.3", "--cc", "cubic")
	stop()
	keepFixture(t, file, "nflog")
	r := analyzeCapture(t, file)
	f := dataFlow(t, r, ":5301")
	t.Logf("nflog: %d frames, %d data packets, %d payload bytes to :5301", r.Capture.Frames, f.DataPackets, f.PayloadBytes)
	if r.Capture.Malformed != 0 || f.DataPackets < 100 || r.Capture.NonIP != 0 {
		t.Fatalf("capture %+v, flow %+v", r.Capture, f)
	}
}
