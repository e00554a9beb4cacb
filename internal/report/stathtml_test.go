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
	for _, m := range regexp.MustCompile(`<text x="[0-9.]+" y="15">([a-z_]+ (?:<1|[0-9]+)%)</text>`).FindAllStringSubmatch(band, -1) {
		if !strings.HasPrefix(m[1], "<") && !strings.Contains(m[1], "<1%") {
			got = append(got, m[1])
		}
	}
	wantItems := strings.Fields(want)
	var wantPairs []string
	for i := 0; i+1 < len(wantItems); i += 2 {
		wantPairs = append(wantPairs, wantItems[i]+" "+wantItems[i+1])
	}
	sort.Strings(got)
	sort.Strings(wantPairs)
	if strings.Join(got, ", ") != strings.Join(wantPairs, ", ") {
		t.Errorf("legend %v, stat's table %v", got, wantPairs)
	}
}
