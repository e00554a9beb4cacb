package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// recordSendlim records tcp_sendlim on a fresh loopback port while client
// runs against a server running handle, and returns the per-reason decision
// counts and run lengths of the client's socket.
func recordSendlim(t *testing.T, sndbuf int, handle func(net.Conn), client func(net.Conn)) (map[string]float64, []float64) {
	t.Helper()
	port := freePort(t)
	rec := startRecord(t, "-e", "tcp_sendlim", "--filter-port", strconv.Itoa(port))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := serve(t, ln, handle)
	c, err := dialer(sndbuf).Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client(c)
	c.Close()
	<-done
	rec.stop(t, syscall.SIGINT)
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	counts, runs := sendlimCounts(events, ln.Addr().String())
	t.Logf("client decisions by reason: %v over %d events", counts, len(runs))
	return counts, runs
}

func share(counts map[string]float64, reason string) float64 {
	var total float64
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return 0
	}
	return counts[reason] / total
}

func TestSendlimSmallSendBufferIsMostlySndbuf(t *testing.T) {
	requireFamilies(t, "tcp_sendlim")
	counts, _ := recordSendlim(t, 8<<10, drain, func(c net.Conn) { bulk(t, c, 2*time.Second) })
	if s := share(counts, "sndbuf"); s <= 0.5 {
		t.Fatalf("sndbuf share %.2f of %v, want the majority", s, counts)
	}
}

func TestSendlimReceiverNotReadingIsMostlySwnd(t *testing.T) {
	requireFamilies(t, "tcp_sendlim")
	hold := make(chan struct{})
	counts, _ := recordSendlim(t, 0, func(c net.Conn) { <-hold }, func(c net.Conn) {
		bulk(t, c, 2*time.Second) // stops at the write deadline once the window is shut
		close(hold)
	})
	if s := share(counts, "swnd"); s <= 0.5 {
		t.Fatalf("swnd share %.2f of %v, want the majority", s, counts)
	}
}

func TestSendlimSmallWritesWithoutNodelayShowNagle(t *testing.T) {
	requireFamilies(t, "tcp_sendlim")
	req := make([]byte, 100)
	counts, _ := recordSendlim(t, 0, func(c net.Conn) {
		for {
			if _, err := readFull(c, req); err != nil {
				return
			}
			c.Write([]byte("0123456789"))
		}
	}, func(c net.Conn) {
		if err := c.(*net.TCPConn).SetNoDelay(false); err != nil { // Go sets TCP_NODELAY by default
			t.Fatal(err)
		}
		resp := make([]byte, 10)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			c.Write(req[:50]) // a request in two small writes: the second waits for the first's ACK
			c.Write(req[50:])
			if _, err := readFull(c, resp); err != nil {
				t.Errorf("reading response: %v", err)
				return
			}
		}
	})
	if counts["nagle"] < 10 {
		t.Fatalf("nagle decisions %v in %v, want at least 10 (one per delayed-ACK stall)", counts["nagle"], counts)
	}
}

// An unconstrained bulk sender, as iperf3 is (a Go reader in the test
// process is itself often the bottleneck, which shows as swnd).
func TestSendlimBulkLoopbackFoldsIntoLongRuns(t *testing.T) {
	requireFamilies(t, "tcp_sendlim")
	iperf3 := testenv.Tool(t, "iperf3")
	port := strconv.Itoa(freePort(t))
	server := exec.Command(iperf3, "-s", "-p", port)
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { server.Process.Kill(); server.Wait() }()
	waitListening(t, "127.0.0.1:"+port)
	rec := startRecord(t, "-e", "tcp_sendlim", "--filter-port", port,
		"--", iperf3, "-c", "127.0.0.1", "-p", port, "-t", "2", "-C", "cubic")
	if err := rec.wait(); err != nil {
		t.Fatalf("record -- iperf3: %v: %s", err, rec.stderr)
	}
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatalf("parse: %v: %s", err, summary)
	}
	// The data connection is the socket with the most decisions whose peer is the server.
	bySock := map[any][]float64{}
	for _, ev := range events {
		if ev["action"] == "tcp_sendlim" && ev["peer"] == "127.0.0.1:"+port {
			bySock[ev["sock"]] = append(bySock[ev["sock"]], ev["cnt"].(float64))
		}
	}
	var runs []float64
	var most float64
	for _, r := range bySock {
		var n float64
		for _, c := range r {
			n += c
		}
		if n > most {
			most, runs = n, r
		}
	}
	var inLongRuns float64
	for _, r := range runs {
		if r >= 100 {
			inLongRuns += r
		}
	}
	t.Logf("sender: %.0f decisions in %d events, %.0f in runs of 100 or more", most, len(runs), inLongRuns)
	if most == 0 || inLongRuns < most/2 {
		t.Fatalf("%.0f of %.0f decisions are in runs of 100 or more (%d events); want most of them", inLongRuns, most, len(runs))
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
