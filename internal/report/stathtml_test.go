package report

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// readTrace summarizes a fresh recording of analyze's testdata as stat does,
// with its timeline.
func readTrace(t *testing.T, name string) (*analyze.Summary, *analyze.Stat, *timeline.Timeline) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "analyze", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sum, st, b := analyze.NewSummary(), analyze.NewStat(), timeline.NewBuilder(0)
	sum.OnWindow = st.Gap
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error {
		st.Add(ev)
		b.Add(ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return sum, st, b.Build(sum.Names.NetnsName)
}

// The page's send-limit legend says what stat's table says, from the same
// runs: it once gave each reason the pixel columns it dominated (swnd 80 %,
// cwnd 14 % beside the table's 72 % and 18 %).
func TestStatPageLegendIsStatsShares(t *testing.T) {
	sum, st, tl := readTrace(t, "iperf3-relisten.trace")
	view := NewStatView(st, sum)
	var text strings.Builder
	if err := WriteStatText(&text, view); err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	if err := WriteStatHTML(&page, sum, st, tl, text.String(), ""); err != nil {
		t.Fatal(err)
	}
	if len(tl.Flows) == 0 {
		t.Fatal("no flow in the timeline")
	}
	f := tl.Flows[0]
	var want string
	for _, c := range view.Connections {
		if c.Local == f.Local.String() && c.Peer == f.Peer.String() {
			want = shares(c.LimitShare)
		}
	}
	if want == "" || want == "-" {
		t.Fatalf("stat has no send limits for the page's first flow %s", f.Label())
	}
	band := page.String()
	band = band[strings.Index(band, `<div class="sendlim">`):]
	band = band[:strings.Index(band, "</div>")]
	var got []string
	for _, m := range regexp.MustCompile(`<text x="[0-9.]+" y="15">([a-z_]+ [0-9]+ %)</text>`).FindAllStringSubmatch(band, -1) {
		got = append(got, m[1])
	}
	wantPairs := regexp.MustCompile(`[a-z_]+ [0-9]+ %`).FindAllString(want, -1)
	sort.Strings(got)
	sort.Strings(wantPairs)
	if strings.Join(got, ", ") != strings.Join(wantPairs, ", ") {
		t.Errorf("legend %v, stat's table %v", got, wantPairs)
	}
}

// stat's text says what its columns are (fresh loopback iperf3 trace): the
// receiver that sent nothing shows no send limits ("app 100 %" read as a
// verdict), a device whose NAPI handed GRO nothing shows "-", not 0.00
// beside its segs/skb, and "bytes timed" is explained.
func TestStatTextExplainsItsColumns(t *testing.T) {
	sum, st, _ := readTrace(t, "iperf3-relisten.trace")
	var text strings.Builder
	if err := WriteStatText(&text, NewStatView(st, sum)); err != nil {
		t.Fatal(err)
	}
	var receiver, lo string
	for _, l := range strings.Split(text.String(), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 6 && f[0] == "[::ffff:127.0.0.1]:42201" && f[1] == "[::ffff:127.0.0.1]:59318" && receiver == "":
			receiver = l
		case len(f) > 0 && f[0] == "lo":
			lo = l
		}
	}
	if !strings.Contains(receiver, "received only") || strings.Contains(receiver, "app") {
		t.Errorf("receiver row %q, want received only", receiver)
	}
	if f := strings.Fields(lo); len(f) == 0 || f[len(f)-1] != "-" {
		t.Errorf("lo row %q, want GRO in/skb -", lo)
	}
	for _, want := range []string{"bytes timed: how many bytes tcp_stage followed the whole way", "(GRO in/skb: packets the device's NAPI polls handed GRO"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
}

// A veth or loopback receives GSO skbs whole, without GRO: stat says so
// beside "recv segs/skb 42.17", and the kernel accounting says which of its
// two sources the verdicts use.
func TestStatTextExplainsGSOWithoutGROAndTheKernelAccounting(t *testing.T) {
	st, sum := analyze.NewStat(), analyze.NewSummary()
	var name [16]int8
	for i, c := range "veth0" {
		name[i] = int8(c)
	}
	st.Add(&event.Event{Type: event.TypeDevRecv, Time: 1e9, Begin: 0, Dev: wire.DevEvent{Name: name, Skbs: 100, Segs: 4217, Bytes: 6_000_000}})
	st.Add(&event.Event{Type: event.TypeTCPConn, Time: 1, Conn: event.TCPConn{Socket: event.Socket{Sock: 0xa, Local: statLocal, Peer: statPeer}, New: event.TCPEstablished}})
	// 0.74 s of swnd runs where tcp_info counted 0.26 s rwnd-limited.
	st.Add(sendlim(740_001_000, 1_000, event.SendlimSwnd, 10, 1_000_000, 0))
	st.Add(&event.Event{Type: event.TypeTCPSendlim, Time: 990_001_000, Begin: 740_001_000, Sendlim: event.TCPSendlim{
		Socket: event.Socket{Sock: 0xa, Local: statLocal, Peer: statPeer}, Reason: event.SendlimCwnd, Begin: 740_001_000, Cnt: 1, Cwnd: 10,
		BusyUs: 1_000_000, RwndLimitedUs: 260_000}})
	var text strings.Builder
	if err := WriteStatText(&text, NewStatView(st, sum)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"42.17", "receives the sender's GSO skbs whole", "KERNEL ACCOUNTING",
		"tcp_info's chrono counters", "The send limits above and the doctor's verdicts use the tcp_sendlim runs"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
}
