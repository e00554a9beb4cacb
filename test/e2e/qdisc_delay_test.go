package e2e

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/vishvananda/netlink"
)

// The waits qdisc_delay times agree with Little's law on the qdisc's own
// backlog: a tbf kept full by a UDP blast drains at its rate, so the mean
// wait is the mean backlog the qdisc reports (as tc -s shows it) over that rate. Every datagram is
// an skb the tbf keeps whole, so all are timed.
func TestQdiscDelayMatchesTheBacklogOverTheRate(t *testing.T) {
	requireFamilies(t, "qdisc", "qdisc_delay")
	pair := newPair(t)
	const rateBytes = 20e6 / 8 // tbf rate 20mbit, counted on the frames' bytes as the backlog is
	if _, err := pair.Sender.Run("tc", "qdisc", "add", "dev", pair.SenderDev, "root", "tbf",
		"rate", "20mbit", "burst", "16kb", "limit", "100kb"); err != nil {
		t.Fatal(err)
	}
	var backlogs []float64
	var sampleErr error
	events := recordDuring(t, []string{"-e", "qdisc,qdisc_delay", "--filter-dev", pair.SenderDev, "--interval", "200ms"}, func() {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			backlogs, sampleErr = sampleBacklog(ctx, pair)
		}()
		blastUDP(t, pair, 2*time.Second)
		time.Sleep(100 * time.Millisecond) // the queue drains in 40 ms
		stop()
		wg.Wait()
	})
	if sampleErr != nil {
		t.Fatal(sampleErr)
	}
	// The samples after the drain count the queue's idle time, in which
	// no packet waited: Little's law holds over the busy time.
	var sum float64
	var busy int
	for _, b := range backlogs {
		if b > 0 {
			sum += b
			busy++
		}
	}
	if busy < 20 {
		t.Fatalf("%d of %d backlog samples saw a queue", busy, len(backlogs))
	}
	want := sum / float64(busy) / rateBytes * 1e6 // us
	tbf := func(ev map[string]any) bool { return ev["kind"] == "tbf" }
	packets := total(events, "qdisc_delay", "packets", tbf)
	unstamped := total(events, "qdisc_delay", "unstamped", tbf)
	dequeues := total(events, "qdisc", "dequeues", tbf)
	if packets == 0 {
		t.Fatal("no qdisc_delay events of the tbf")
	}
	var sumNs, p50Weighted float64
	for _, ev := range events {
		if ev["action"] == "qdisc_delay" && tbf(ev) {
			n := ev["packets"].(float64)
			if n == 0 { // only unstamped packets: no wait fields
				continue
			}
			sumNs += ev["mean_us"].(float64) * n
			p50Weighted += ev["p50_us"].(float64) * n
		}
	}
	mean, p50 := sumNs/packets, p50Weighted/packets
	t.Logf("tbf: %.0f packets timed, %.0f unstamped, %.0f dequeued; mean wait %.0f us, p50 %.0f us; Little's law on %d backlog samples: %.0f us",
		packets, unstamped, dequeues, mean, p50, busy, want)
	if packets < 0.95*dequeues {
		t.Errorf("timed %.0f of %.0f dequeued datagrams, want 95 %%", packets, dequeues)
	}
	if math.Abs(mean-want) > 0.15*want {
		t.Errorf("mean wait %.0f us, Little's law %.0f us: want within 15 %%", mean, want)
	}
	// A quarter-octave bucket spans 12.5 % of its values.
	if math.Abs(p50-want) > 0.2*want {
		t.Errorf("median wait %.0f us, Little's law %.0f us: want within 20 %%", p50, want)
	}
}

// sampleBacklog reads the sender's root qdisc backlog every 5 ms until ctx
// ends, through netlink (tc's own counters; a tc process per sample is too
// slow under emulation).
func sampleBacklog(ctx context.Context, pair *lab.Pair) ([]float64, error) {
	h, err := netlink.NewHandleAt(pair.Sender.Handle())
	if err != nil {
		return nil, fmt.Errorf("opening netlink in %s: %w", pair.Sender.Name, err)
	}
	defer h.Close()
	link, err := h.LinkByName(pair.SenderDev)
	if err != nil {
		return nil, err
	}
	var out []float64
	for ctx.Err() == nil {
		qdiscs, err := h.QdiscList(link)
		if err != nil {
			return nil, fmt.Errorf("listing the qdiscs of %s: %w", pair.SenderDev, err)
		}
		for _, q := range qdiscs {
			if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT && a.Statistics != nil && a.Statistics.Queue != nil {
				out = append(out, float64(a.Statistics.Queue.Backlog))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return out, nil
}
