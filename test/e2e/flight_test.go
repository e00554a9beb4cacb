package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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
func dropBurst(ns *host.Netns, d time.Duration) error {
	for _, args := range [][]string{
		{"add", "table", "inet", "skbtrace_burst"},
		{"add", "chain", "inet", "skbtrace_burst", "in", "{ type filter hook input priority 0 ; }"},
		{"add", "rule", "inet", "skbtrace_burst", "in", "tcp", "dport", fmt.Sprint(lab.Port), "drop"},
	} {
		if _, err := ns.Run("nft", args...); err != nil {
			return err
		}
	}
	time.Sleep(d)
	if _, err := ns.Run("nft", "delete", "table", "inet", "skbtrace_burst"); err != nil {
		return fmt.Errorf("removing the burst: %w", err)
	}
	return nil
}

// The flight recorder on a stream that loses everything for 1.5 s twice,
// 16 s apart (FLIGHT_BURST_GAP sets it: the case is 60s): with
// --trigger rto it writes the seconds around each burst, named by their
// trigger, and little else; stat shows the loss.
func TestFlightRecorderKeepsTheSecondsAroundEachLossBurst(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "nft")
	gap := 16 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FLIGHT_BURST_GAP")); err == nil && d >= 10*time.Second {
		gap = d
	}
	pair := newPair(t)
	rec := startRecord(t, "--trigger", "rto", "--pre", "2s", "--post", "2s", "--ring", "8M", "--filter-port", fmt.Sprint(lab.Port),
		"-e", "tcp_conn,tcp_sendlim,tcp_cong,tcp_retrans,skb_drop")
	start := time.Now()
	bursts, burstsDone := make(chan time.Time, 2), make(chan error, 1)
	go func() {
		for _, at := range []time.Duration{8 * time.Second, 8*time.Second + gap} {
			time.Sleep(time.Until(start.Add(at)))
			bursts <- time.Now()
			if err := dropBurst(pair.Receiver, 1500*time.Millisecond); err != nil {
				burstsDone <- err
				return
			}
		}
		burstsDone <- nil
	}()
	vethStream(t, pair, 20*time.Second+gap, 0)
	rec.stop(t, syscall.SIGINT)
	if err := <-burstsDone; err != nil {
		t.Fatal(err)
	}
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
	// Firings closer than a window (2 s before, 2 s after, a block of a
	// second each side) share one. Each burst must open a cluster; a loaded
	// host's stream may have a timeout of its own (CI saw one 2.4 s in), whose
	// window is as right, so windows are counted against clusters.
	type cluster struct{ first, last time.Time }
	var clusters []cluster
	for _, tr := range st.Triggers {
		if tr.Expr != "rto" {
			t.Fatalf("trigger %q fired; only rto was asked for", tr.Expr)
		}
		if n := len(clusters); n > 0 && tr.Time.Sub(clusters[n-1].last) < 6*time.Second {
			clusters[n-1].last = tr.Time
			continue
		}
		clusters = append(clusters, cluster{tr.Time, tr.Time})
	}
	opened := func(b time.Time) bool {
		for _, c := range clusters {
			if !c.first.Before(b) && c.first.Before(b.Add(3*time.Second)) {
				return true
			}
		}
		return false
	}
	if st.Windows != len(clusters) || !opened(b1) || !opened(b2) {
		t.Fatalf("%d windows for %d clusters of firings %+v, bursts at %s and %s; want one window per cluster, one opened by each burst\n%s",
			st.Windows, len(clusters), st.Triggers, b1.Format(time.StampMilli), b2.Format(time.StampMilli), rec.stderr)
	}
	if len(clusters) > 2 {
		t.Logf("%d clusters of firings for 2 bursts: %+v", len(clusters), clusters)
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
	records := map[string]int{}
	for _, ev := range events {
		// parse prints the windows and triggers inline, beside the events.
		if r, ok := ev["record"].(string); ok {
			records[r]++
			continue
		}
		secs, ok := ev["time"].(float64) // seconds.nanoseconds
		if !ok {
			t.Fatalf("event time %v", ev["time"])
		}
		at := time.Unix(0, int64(secs*1e9))
		near := false
		for _, c := range clusters {
			near = near || at.After(c.first.Add(-4*time.Second)) && at.Before(c.last.Add(4*time.Second))
		}
		if !near {
			outside++
		}
	}
	if outside > 0 || strings.Contains(summary, "missing") {
		t.Errorf("%d of %d events outside the firings' windows; %s", outside, len(events), summary)
	}
	if records["flight_window"] != st.Windows || records["trigger"] != len(st.Triggers) {
		t.Errorf("parse printed %d window and %d trigger lines; stat counts %d windows and %d triggers", records["flight_window"], records["trigger"], st.Windows, len(st.Triggers))
	}
	t.Logf("%d events, %d netfilter drops, %d retransmitted; %s", len(events), netfilter, retrans, strings.TrimSpace(rec.stderr.String()))
}
