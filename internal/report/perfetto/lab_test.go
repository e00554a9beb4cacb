package perfetto

import (
	"bytes"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// testdata/sndbuf-limited.trace is the faulty run of `skbtrace lab run
// sndbuf-limited --trace DIR` (kernel 6.18, 2 s): one iperf-like sender
// whose send buffer is capped at 16 KB, its receiver in another namespace.

// TestLabSndbufLimited: the sender's thread holds its send-limit runs, sndbuf
// for most of its time, and agrees with stat: the time per reason, and the
// bytes acknowledged under the acked-throughput counter.
func TestLabSndbufLimited(t *testing.T) {
	data, err := os.ReadFile("testdata/sndbuf-limited.trace")
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := export(t, data)
	if err != nil {
		t.Fatal(err)
	}
	d := validate(t, out)

	st := analyze.NewStat()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := analyze.Replay(r, &event.Filter{}, analyze.NewSummary(), func(ev *event.Event) error {
		st.Add(ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var sender *analyze.ConnStat
	for _, c := range st.Connections {
		if c.LimitNs()["sndbuf"] > 0 {
			sender = c
		}
	}
	if sender == nil {
		t.Fatal("stat finds no sndbuf-limited sender in the lab trace")
	}

	tid := d.tidNamed(t, sender.Local+" -> "+sender.Peer)
	procs := d.names("process_name")
	var spans []traceEvent
	for _, e := range d.Events {
		if e.Ph == "X" && e.Tid == tid {
			spans = append(spans, e)
			if !strings.HasSuffix(procs[e.Pid], "-snd") {
				t.Fatalf("the sender's spans are in process %q, not its namespace's", procs[e.Pid])
			}
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].Ts < spans[j].Ts })
	perReason := map[string]int64{}
	var covered int64
	for _, s := range spans {
		perReason[s.Name] += s.Dur
		covered += s.Dur
	}
	first, last := spans[0].Ts, spans[len(spans)-1].Ts+spans[len(spans)-1].Dur
	if share := float64(covered) / float64(last-first); share < 0.999 {
		t.Errorf("the sender's spans cover %.4f of its time from the first run to the last, want all", share)
	}
	if share := float64(perReason["sndbuf"]) / float64(covered); share < 0.9 {
		t.Errorf("sndbuf spans hold %.3f of the sender's time, want most: %v", share, perReason)
	}
	// Spans start where the previous ended, which moves each by the few
	// hundred ns the kernel takes to stamp a run's event.
	runs := sender.LimitRuns()
	for reason, ns := range sender.LimitNs() {
		if diff := ns - perReason[reason]; diff < 0 || diff > int64(runs[reason])*2000 {
			t.Errorf("%s spans last %d ns, stat counts %d in %d runs", reason, perReason[reason], ns, runs[reason])
		}
	}

	// The rate counters' areas are the bytes acknowledged and received
	// between each connection's first and last tcp_rtt sample.
	for _, c := range st.Connections {
		label := c.Local + "->" + c.Peer
		for _, r := range []struct {
			name string
			want uint64
		}{{"throughput acked ", c.BytesAcked}, {"throughput received ", c.BytesReceived}} {
			points := d.counter(t, r.name+label, "bit/s")
			var bytes float64
			for i := 1; i < len(points); i++ {
				bytes += points[i-1][1] * (points[i][0] - points[i-1][0]) / 8e9
			}
			if len(points) > 0 && points[len(points)-1][1] != 0 {
				t.Errorf("%q ends at %v, not zero", r.name+label, points[len(points)-1])
			}
			if math.Abs(bytes-float64(r.want)) > 1e-6*float64(r.want)+1 {
				t.Errorf("%q adds up to %.0f bytes, stat counts %d", r.name+label, bytes, r.want)
			}
		}
	}
	if sender.BytesAcked < 100<<20 {
		t.Errorf("the sender had %d bytes acknowledged, want the run's hundreds of MB", sender.BytesAcked)
	}

	for _, e := range d.Events {
		if e.Ph == "C" && strings.HasPrefix(e.Name, "throughput sent") && e.Tid != tid {
			t.Errorf("counter %q on tid %d: only the sender sent segments", e.Name, e.Tid)
		}
	}
}
