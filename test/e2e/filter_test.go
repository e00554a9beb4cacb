package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/capture"
	"github.com/skbtrace/skbtrace/internal/lab"
)

// startDecoys starts, beside the stream a filter selects, traffic it must
// leave out, for d: TCP to another port, UDP to the same port, and pings.
// The sockets are made here, where a failure may end the test; the traffic
// runs in goroutines, which report with t.Errorf. wait returns once it ends.
func startDecoys(t *testing.T, pair *lab.Pair, d time.Duration) (wait func()) {
	t.Helper()
	receiver := lab.ReceiverAddr.Addr().String()
	ln := listenIn(t, pair.Receiver, "tcp", receiver+":5202")
	t.Cleanup(func() { ln.Close() })
	served := serve(t, ln, drain)
	var udp net.PacketConn
	if err := pair.Receiver.Do(func() (err error) {
		udp, err = net.ListenPacket("udp", receiver+":5201")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	tcpConn := dialFrom(t, pair.Sender, dialer(0), "tcp", ln.Addr().String())
	udpConn := dialFrom(t, pair.Sender, &net.Dialer{}, "udp", udp.LocalAddr().String())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		bulk(t, tcpConn, d)
	}()
	go func() {
		defer wg.Done()
		defer udpConn.Close()
		payload := make([]byte, 1000)
		// Four at a time: a millisecond's sleep lasts about 20 in an
		// emulated guest beside another (93 datagrams in 2 s, one at a time).
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
			for range 4 {
				udpConn.Write(payload)
			}
		}
	}()
	go func() {
		defer wg.Done()
		if _, err := pair.Sender.Run("ping", "-c", "5", "-i", "0.2", receiver); err != nil {
			t.Error(err)
		}
	}()
	// A test that ends early still waits: t.Errorf after its end panics.
	t.Cleanup(wg.Wait)
	return func() {
		wg.Wait()
		<-served
	}
}

// capturedPackets counts a capture's packets and fails on any tcpdump dropped.
func capturedPackets(t *testing.T, file string, summary []string) int {
	t.Helper()
	for _, l := range summary {
		if m := regexp.MustCompile(`^(\d+) packets dropped by kernel`).FindStringSubmatch(l); m != nil && m[1] != "0" {
			t.Fatalf("tcpdump lost packets, so the capture cannot be the reference: %s", strings.Join(summary, "; "))
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var fr capture.Frame
	for {
		if err := r.Next(&fr); errors.Is(err, io.EOF) {
			return n
		} else if err != nil {
			t.Fatalf("reading %s: %v", file, err)
		}
		n++
	}
}

// skbsOn sums the skbs dev_xmit and dev_recv counted on dev.
func skbsOn(events []map[string]any, dev string) float64 {
	return total(events, "dev_xmit", "skbs", onDev(dev)) + total(events, "dev_recv", "skbs", onDev(dev))
}

// -F runs in the kernel and passes exactly the packets tcpdump's same
// filter passes on the same device at the same time: the stream it selects
// among decoys (another port, UDP to the same port, pings), in both
// directions, TSO super-packets as tcpdump sees them.
func TestPacketFilterPassesWhatTcpdumpPasses(t *testing.T) {
	requireFamilies(t, "dev_xmit", "dev_recv")
	pair := newPair(t)
	receiver := lab.ReceiverAddr.Addr().String()
	// The filter; one on TCP flags and ICMP (the stream's SYNs and
	// FINs, the pings); one on UDP by an address's net and a computed offset.
	filters := []struct {
		expr    string
		atLeast int // packets tcpdump must capture for the comparison to mean something
	}{
		{"tcp port 5201 and host " + receiver, 100},
		{"tcp[tcpflags] & (tcp-syn|tcp-fin) != 0 or icmp", 10},
		{"udp and dst net 10.200.0.0/24 and udp[4:2] > 500", 100},
	}
	args := []string{"-e", "dev_xmit,dev_recv", "--filter-dev", pair.SenderDev, "--interval", "200ms"}
	unfiltered := startRecord(t, args...)
	// Every program that runs the filter must load with it: the drop and
	// qdisc programs too (named families are required, so record fails if one does not).
	fams := "dev_xmit,dev_recv,skb_drop"
	if eventsOnThisKernel(t)["qdisc"].Runs {
		fams += ",qdisc"
	}
	type run struct {
		file string
		stop func() []string
		rec  *recorder
	}
	runs := make([]run, len(filters))
	for i, f := range filters {
		runs[i].file = filepath.Join(t.TempDir(), "ref.pcap")
		runs[i].stop = tcpdumpIn(t, pair.Sender, pair.SenderDev, runs[i].file, 0, f.expr)
		runs[i].rec = startRecord(t, "-e", fams, "--filter-dev", pair.SenderDev, "--interval", "200ms", "-F", f.expr)
	}

	waitDecoys := startDecoys(t, pair, 2*time.Second)
	vethStream(t, pair, 2*time.Second, 0)
	waitDecoys()
	time.Sleep(500 * time.Millisecond) // the last ACKs and FINs

	all := skbsOn(stopAndParse(t, unfiltered), pair.SenderDev)
	for i, f := range filters {
		packets := capturedPackets(t, runs[i].file, runs[i].stop())
		kept := skbsOn(stopAndParse(t, runs[i].rec), pair.SenderDev)
		t.Logf("%q: tcpdump captured %d packets; skbtrace -F counted %.0f skbs of %.0f on %s", f.expr, packets, kept, all, pair.SenderDev)
		if packets < f.atLeast {
			t.Errorf("%q: tcpdump captured only %d packets", f.expr, packets)
		}
		if kept != float64(packets) {
			t.Errorf("-F %q counted %.0f skbs, tcpdump captured %d packets", f.expr, kept, packets)
		}
		if all < kept+100 {
			t.Errorf("%q: without -F %.0f skbs against %.0f with it: the filter left nothing out", f.expr, all, kept)
		}
	}
}

// --context and --cpu partition the events: recordings of complementary
// sets, running together, add up to the unfiltered recording exactly, and
// a TCP stream has both process-context and softirq work.
func TestContextAndCPUFiltersPartitionTheEvents(t *testing.T) {
	requireFamilies(t, "dev_xmit", "dev_recv")
	pair := newPair(t)
	// Only the stream's packets: background traffic (neighbour discovery on
	// the fresh veth) could fall between two recorders' attaching.
	args := []string{"-e", "dev_xmit,dev_recv", "--filter-dev", pair.SenderDev, "--interval", "200ms", "-F", "tcp port 5201"}
	runs := map[string][]string{
		"all":             nil,
		"syscall":         {"--context", "syscall"},
		"softirq,hardirq": {"--context", "softirq,hardirq"},
		"cpu 0":           {"--cpu", "0"},
		"cpu 1-":          {"--cpu", fmt.Sprintf("1-%d", runtime.NumCPU()-1)},
	}
	recs := map[string]*recorder{}
	for name, extra := range runs {
		recs[name] = startRecord(t, append(append([]string{}, args...), extra...)...)
	}
	vethStream(t, pair, 2*time.Second, 0)
	// The stream's last packets (its FIN and the ACKs) must not fall
	// between the recorders' stops: wait until no end of it is left but
	// TIME_WAIT, which sends nothing unasked (slow under emulation).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err := pair.Sender.Run("ss", "-Htna", "exclude", "time-wait", "( sport = :5201 or dport = :5201 )")
		if err == nil && strings.TrimSpace(out) == "" || time.Now().After(deadline) {
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	skbs := map[string]float64{}
	for name, rec := range recs {
		skbs[name] = skbsOn(stopAndParse(t, rec), pair.SenderDev)
	}
	t.Logf("skbs on %s: %v", pair.SenderDev, skbs)
	if skbs["all"] < 100 {
		t.Fatalf("only %.0f skbs of the stream", skbs["all"])
	}
	if skbs["syscall"] == 0 || skbs["softirq,hardirq"] == 0 {
		t.Fatalf("a TCP stream sends from its writes and receives ACKs in softirq: got %.0f in syscall context, %.0f in interrupts",
			skbs["syscall"], skbs["softirq,hardirq"])
	}
	if got := skbs["syscall"] + skbs["softirq,hardirq"]; got != skbs["all"] {
		t.Fatalf("contexts: %.0f + %.0f = %.0f skbs, the unfiltered recording %.0f", skbs["syscall"], skbs["softirq,hardirq"], got, skbs["all"])
	}
	if got := skbs["cpu 0"] + skbs["cpu 1-"]; got != skbs["all"] {
		t.Fatalf("CPUs: %.0f + %.0f = %.0f skbs, the unfiltered recording %.0f", skbs["cpu 0"], skbs["cpu 1-"], got, skbs["all"])
	}
}
