package report

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
	"github.com/skbtrace/skbtrace/internal/report/browser"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// A bursty flow's ACKs fall in few bins: the ACK and window lines hold
// their value between them and to the end, not empty paths under a legend.
func TestAckLineHoldsBetweenAcks(t *testing.T) {
	g := pcap.FlowGraph{Title: "a -> b", Points: []pcap.GraphPoint{
		{T: 0, HasData: true, SeqMax: 1000},
		{T: 1, HasAck: true, Ack: 1000, Win: 65000},
		{T: 2},
		{T: 3, HasData: true, SeqMin: 1000, SeqMax: 2000},
	}}
	svg := timeSequence(g)
	for _, color := range []string{"green", "orange"} {
		i := strings.Index(svg, `stroke="`+color+`"`)
		if i < 0 {
			t.Fatalf("no %s line:\n%s", color, svg)
		}
		d := svg[strings.LastIndex(svg[:i], `d="`):i]
		if !strings.Contains(d, "H") {
			t.Errorf("the %s line does not hold to the end: %s", color, d)
		}
	}
}

// The graphs page fits a window 800 pixels wide: each chart is scaled to
// it (cut at 800 px, the time-sequence legend read "data ack wind").
func TestGraphsPageFitsTheWindow(t *testing.T) {
	dir := t.TempDir()
	g := pcap.FlowGraph{Title: "a -> b", Points: []pcap.GraphPoint{
		{T: 0, HasData: true, SeqMax: 1000}, {T: 1, HasAck: true, Ack: 1000, Win: 65000}, {T: 3, HasData: true, SeqMin: 1000, SeqMax: 2000}}}
	if _, err := WriteGraphs(dir, []pcap.FlowGraph{g}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	probe := `<script>var over = [];
document.querySelectorAll("svg").forEach(function (s) {
  var r = s.getBoundingClientRect();
  if (r.right > window.innerWidth + 1) { over.push(Math.round(r.right)); }
});
document.body.setAttribute("data-over", over.join(" ") + "/" + document.querySelectorAll("svg").length);</script></body>`
	file := filepath.Join(t.TempDir(), "measured.html")
	if err := os.WriteFile(file, []byte(strings.Replace(string(page), "</body>", probe, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := testenv.OpenPage(t, "file://"+file, browser.Options{Width: 800, Height: 900})
	m := regexp.MustCompile(`data-over="([^"]*)/([0-9]+)"`).FindStringSubmatch(r.DOM)
	if m == nil {
		t.Fatalf("the measuring script did not run; chromium said:\n%s", r.Stderr)
	}
	if m[2] != "4" {
		t.Errorf("%s charts on the page, want 4", m[2])
	}
	if m[1] != "" {
		t.Errorf("charts end past the 800 px window's right edge, at %s px", m[1])
	}
}
