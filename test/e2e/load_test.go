package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// loadServer runs `skbtrace load server` in the receiver namespace.
func loadServer(t testing.TB, pair *lab.Pair) string {
	t.Helper()
	addr := lab.ReceiverAddr.Addr().String() + ":5301"
	srv := exec.Command("taskset", "-c", "1", binary, "load", "server", "--listen", addr, "--netns", pair.Receiver.Name)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	return addr
}

// loopbackServer runs `skbtrace load server` on a free loopback port for
// the test and returns its address.
func loopbackServer(t *testing.T) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	server := exec.Command(binary, "load", "server", "--listen", addr)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	waitListening(t, addr)
	return addr
}

// loadClient runs `skbtrace load client --json` from the sender namespace.
func loadClient(t testing.TB, pair *lab.Pair, addr string, args ...string) map[string]any {
	t.Helper()
	var out []byte
	var err error
	for try := 0; try < 50; try++ { // until the server listens
		out, err = exec.Command("taskset", append([]string{"-c", "0", binary, "load", "client", addr, "--json", "--netns", pair.Sender.Name}, args...)...).Output()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("load client %v: %v", args, err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("load client --json: %v: %s", err, out)
	}
	return res
}

func TestLoadAcrossNamespaces(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(t)
	addr := loadServer(t, pair)
	bulk := loadClient(t, pair, addr, "-d", "1", "--cc", "cubic")
	if bulk["bits_per_second"].(float64) < 1e9 {
		t.Fatalf("bulk over veth at %.0f bit/s", bulk["bits_per_second"])
	}
	nagle := loadClient(t, pair, addr, "-d", "1", "--mode", "rr", "--writes", "2")
	nodelay := loadClient(t, pair, addr, "-d", "1", "--mode", "rr", "--writes", "2", "--nodelay")
	if n, d := nagle["ops_per_second"].(float64), nodelay["ops_per_second"].(float64); n*10 > d {
		t.Fatalf("split requests: %.0f/s with Nagle, %.0f/s with TCP_NODELAY; want the delayed-ACK stall to show", n, d)
	}
	udp := loadClient(t, pair, addr, "-d", "1", "--mode", "udp", "--rate", "50M")
	if udp["received_datagrams"].(float64) == 0 {
		t.Fatal("the server counted no datagrams")
	}
}

// BenchmarkLoadVsIperf3 compares the generator with iperf3 on the same veth
// pair, clients on CPU 0 and servers on CPU 1 for both (as two hosts would
// be), as the median ratio of alternating runs. It is a benchmark rather
// than a test: this VM's throughput drifts so much that single pairs range
// from 0.7 to 1.6, and a 10 % check would fail at random.
func BenchmarkLoadVsIperf3(b *testing.B) {
	testenv.RequireRoot(b, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	iperf3 := testenv.Tool(b, "iperf3")
	pair := newPair(b)
	addr := loadServer(b, pair)
	srv := exec.Command("ip", "netns", "exec", pair.Receiver.Name, "taskset", "-c", "1", iperf3, "-s", "-p", "5201")
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	var ratios []float64
	for i := 0; i < 10; i++ {
		ours := func() float64 {
			return loadClient(b, pair, addr, "-d", "1.5", "--cc", "cubic")["bits_per_second"].(float64)
		}
		var o, th float64
		if i%2 == 0 { // alternate the order, so drift favours neither
			o, th = ours(), iperf3Bps(b, iperf3, pair)
		} else {
			th, o = iperf3Bps(b, iperf3, pair), ours()
		}
		ratios = append(ratios, o/th)
	}
	sort.Float64s(ratios)
	b.ReportMetric((ratios[4]+ratios[5])/2, "load/iperf3")
}

func iperf3Bps(t testing.TB, iperf3 string, pair *lab.Pair) float64 {
	t.Helper()
	var out []byte
	var err error
	for try := 0; try < 50; try++ {
		out, err = exec.Command("ip", "netns", "exec", pair.Sender.Name, "taskset", "-c", "0", iperf3, "-c", lab.ReceiverAddr.Addr().String(),
			"-p", "5201", "-t", "1.5", "-C", "cubic", "-J").Output()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("iperf3: %v: %s", err, out)
	}
	var res struct {
		End struct {
			SumSent struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_sent"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("iperf3 -J: %v", err)
	}
	return res.End.SumSent.BitsPerSecond
}

// A busy port is a clear error, inside a namespace as outside.
func TestLoadServerOnABusyPortSaysSo(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(t)
	addr := loadServer(t, pair)
	waitListeningIn(t, pair.Receiver, addr)
	out, err := exec.Command(binary, "load", "server", "--listen", addr, "--netns", pair.Receiver.Name, "-d", "1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "address already in use") || strings.Contains(string(out), "panic") {
		t.Fatalf("a second server on %s: %v: %s", addr, err, out)
	}
}

// waitListeningIn waits until a TCP socket listens on addr in the namespace.
func waitListeningIn(t *testing.T, ns *host.Netns, addr string) {
	t.Helper()
	for try := 0; try < 100; try++ {
		var socks []host.TCPSocket
		if err := ns.Do(func() (err error) { socks, err = host.ReadTCPSockets(); return err }); err != nil {
			t.Fatal(err)
		}
		for _, s := range socks {
			if s.State == 10 && s.Local.String() == addr { // TCP_LISTEN
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}
