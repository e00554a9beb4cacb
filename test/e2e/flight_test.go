package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// dropBurst has nft in ns drop every segment to the lab's port for d: the
// sender's retransmission timer fires and it enters Loss.
func dropBurst(t *testing.T, ns *host.Netns, d time.Duration) {
	t.Helper()
	for _, args := range [][]string{
		{"add", "table", "inet", "skbtrace_burst"},
		{"add", "chain", "inet", "skbtrace_burst", "in", "{ type filter hook input priority 0 ; }"},
		{"add", "rule", "inet", "skbtrace_burst", "in", "tcp", "dport", fmt.Sprint(lab.Port), "drop"},
	} {
		if out, err := ns.Run("nft", args...); err != nil {
			t.Fatalf("nft %v: %v: %s", args, err, out)
		}
	}
	time.Sleep(d)
	if out, err := ns.Run("nft", "delete", "table", "inet", "skbtrace_burst"); err != nil {
		t.Fatalf("removing the burst: %v: %s", err, out)
	}
}

// The flight recorder on a stream that loses everything for 1.5 s twice,
// 16 s apart (FLIGHT_BURST_GAP sets it: the case is 60s): with
// --trigger rto it writes the seconds around each burst, named by their
// trigger, and little else; stat shows the loss.
func TestFlightRecorderKeepsTheSecondsAroundEachLossBurst(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	requireTool(t, "nft")
	gap := 16 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLIGHT_BURST_GAP")); err == nil && d >= 10*time.Second {
		gap = d
	}
	pair, err := lab.NewPair()
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	rec := startRecord(t, "--trigger", "rto", "--pre", "2s", "--post", "2s", "--ring", "8M", "--filter-port", fmt.Sprint(lab.Port),
		"-e", "tcp_conn,tcp_sendlim,tcp_cong,tcp_retrans,skb_drop")
	start := time.Now()
	bursts := make(chan time.Time, 2)
	go func() {
		for _, at := range []time.Duration{8 * time.Second, 8*time.Second + gap} {
			time.Sleep(time.Until(start.Add(at)))
			bursts <- time.Now()
			dropBurst(t, pair.Receiver, 1500*time.Millisecond)
		}
	}()
	vethStream(t, pair, 20*time.Second+gap, 0)
	rec.stop(t, syscall.SIGINT)
	b1, b2 := <-bursts, <-bursts
	if !strings.Contains(rec.stderr.String(), "flight recorder:") {
		t.Fatalf("no flight recorder summary: %s", rec.stderr)
	}
	out, err := exec.Command(binary, "stat", "--json", "-i", rec.file).Output()
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	var st struct {
		Windows  int `json:"flight_windows"`
		Triggers []struct {
			Time time.Time `json:"time"`
			Expr string    `json:"trigger"`
		} `json:"triggers"`
		Drops []struct {
			Reason string `json:"reason"`
			Count  uint64 `json:"count"`
		} `json:"drops"`
		Connections []struct {
			Retrans uint64 `json:"retrans_segs"`
		} `json:"connections"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	if st.Windows != 2 || len(st.Triggers) < 2 || st.Triggers[0].Expr != "rto" {
		t.Fatalf("%d windows, triggers %+v; want one window per burst, named rto\n%s", st.Windows, st.Triggers, rec.stderr)
	}
	var netfilter uint64
	for _, d := range st.Drops {
		if d.Reason == "NETFILTER_DROP" {
			netfilter += d.Count
		}
	}
	var retrans uint64
	for _, c := range st.Connections {
		retrans += c.Retrans
	}
	if netfilter == 0 || retrans == 0 {
		t.Errorf("stat shows %d netfilter drops and %d retransmissions; want the bursts' loss", netfilter, retrans)
	}
	// Every event lies within a window: from 2 s (and a block, a second)
	// before a burst's trigger to 2 s (and a block) after its last firing.
	events, summary, err := parseJSON(t, rec.file)
	if err != nil {
		t.Fatal(err)
	}
	outside := 0
	for _, ev := range events {
		ts, _ := ev["time"].(string) // seconds.nanoseconds
		secs, err := strconv.ParseFloat(ts, 64)
		if err != nil {
			t.Fatalf("event time %q", ts)
		}
		at := time.Unix(0, int64(secs*1e9))
		near := func(b time.Time) bool { return at.After(b.Add(-4*time.Second)) && at.Before(b.Add(7*time.Second)) }
		if !near(b1) && !near(b2) {
			outside++
		}
	}
	if outside > 0 || strings.Contains(summary, "missing") {
		t.Errorf("%d of %d events outside the bursts' windows; %s", outside, len(events), summary)
	}
	t.Logf("%d events, %d netfilter drops, %d retransmitted; %s", len(events), netfilter, retrans, strings.TrimSpace(rec.stderr.String()))
}
