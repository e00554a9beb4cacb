package chart

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestThinKeepsPeaksAndBound(t *testing.T) {
	pts := make([]Point, 100_000)
	for i := range pts {
		pts[i] = Point{float64(i), math.Sin(float64(i) / 100)}
	}
	pts[54_321].Y = 50 // a spike
	thin := Thin(pts, MaxPoints)
	if len(thin) > MaxPoints {
		t.Errorf("%d points, want at most %d", len(thin), MaxPoints)
	}
	peak := 0.0
	for i, p := range thin {
		peak = math.Max(peak, p.Y)
		if i > 0 && p.X < thin[i-1].X {
			t.Fatalf("point %d goes back in time", i)
		}
	}
	if peak != 50 {
		t.Errorf("the spike was thinned away (highest %.2f)", peak)
	}
}

func TestBandTakesEachColumnsLongestReason(t *testing.T) {
	spans := []Span{{0, 7, "sndbuf"}, {7, 10, "ok"}}
	for i := 0.0; i < 7; i += 0.5 {
		// Short blips of cwnd inside the sndbuf stretch do not win a column.
		spans = append(spans, Span{i, i + 0.0001, "cwnd"})
	}
	svg := Band("why", 0, 10, spans, map[string]string{"sndbuf": "#e53935", "ok": "#a5d6a7"}, []string{"ok", "sndbuf", "cwnd"}, nil)
	widths := map[string]int{}
	for _, m := range regexp.MustCompile(`data-key="(\w+)" x="\d+" y="\d+" width="(\d+)"`).FindAllStringSubmatch(svg, -1) {
		w, _ := strconv.Atoi(m[2])
		widths[m[1]] += w
	}
	total := widths["sndbuf"] + widths["ok"] + widths["cwnd"]
	if share := float64(widths["sndbuf"]) / float64(total); math.Abs(share-0.7) > 0.01 {
		t.Errorf("sndbuf takes %.2f of the band, want 0.7 (%v)", share, widths)
	}
	if widths["cwnd"] != 0 {
		t.Errorf("cwnd blips took %d columns", widths["cwnd"])
	}
	if n := strings.Count(svg, `class="band"`); n > 3 {
		t.Errorf("%d rectangles for two stretches, want them merged", n)
	}
	if !strings.Contains(svg, `fill="#e53935"`) {
		t.Error("the sndbuf colour is missing")
	}
}

func TestTicksAreRound(t *testing.T) {
	ticks, top := niceTicks(0, 9.3e9)
	if top != 10e9 || len(ticks) < 4 || ticks[1] != 2e9 {
		t.Errorf("ticks %v, top %v; want 0, 2G ... 10G", ticks, top)
	}
	if Short(2.5e9) != "2.5G" || Short(0.125) != "0.125" || Short(1500) != "1.5k" {
		t.Errorf("Short: %s %s %s", Short(2.5e9), Short(0.125), Short(1500))
	}
}

func TestLabelsAreEscaped(t *testing.T) {
	c := New(`<script>alert(1)</script>`, "y", 0, 1)
	c.Line(`"><b>`, "red", []Point{{0, 1}, {1, 2}})
	svg := c.SVG()
	if strings.Contains(svg, "<script>") || strings.Contains(svg, `"><b>`) {
		t.Error("a title or series name reached the SVG unescaped")
	}
}

// A value alone between gaps is drawn as a tick: a move alone draws nothing.
func TestLonePointsAreDrawn(t *testing.T) {
	f := frame{x0: 0, x1: 10, y0: 0, y1: 10, h: 200}
	nan := math.NaN()
	d := path(f, []Point{{0, nan}, {1, 5}, {2, nan}, {3, 4}, {4, 6}, {5, nan}}, 0, 10)
	if strings.Count(d, "h3") != 1 || strings.Count(d, "M") != 2 || strings.Count(d, "L") != 1 {
		t.Errorf("path %q: want one tick for the lone point and one segment for the pair", d)
	}
}

// On a log axis lines a thousandfold apart are decades apart, ticks fall
// on the powers of ten, and zeros are gaps, not lines to the axis.
func TestLogYSpreadsDecades(t *testing.T) {
	c := New("stages", "us", 0, 2).LogY()
	c.Line("small", "#000", []Point{{0.5, 0.4}, {1.5, 0.5}})
	c.Line("big", "#000", []Point{{0.5, 280}, {1.5, 0}, {1.9, 300}})
	svg := c.SVG()
	var ticks []string
	for _, m := range regexp.MustCompile(`<text x="64" y="[0-9.]+" text-anchor="end">([^<]+)</text>`).FindAllStringSubmatch(svg, -1) {
		ticks = append(ticks, m[1])
	}
	if got := strings.Join(ticks, " "); got != "0.1 1 10 100 1k" {
		t.Errorf("ticks %q, want 0.1 1 10 100 1k", got)
	}
	y := map[string][]float64{}
	for _, m := range regexp.MustCompile(`data-name="([a-z]+)" d="([^"]*)"`).FindAllStringSubmatch(svg, -1) {
		for _, p := range regexp.MustCompile(`[ML][0-9.]+ ([0-9.]+)`).FindAllStringSubmatch(m[2], -1) {
			v, _ := strconv.ParseFloat(p[1], 64)
			y[m[1]] = append(y[m[1]], v)
		}
	}
	decade := float64(240-padT-padB) / 4
	if len(y["small"]) != 2 || len(y["big"]) != 2 {
		t.Fatalf("points drawn: %v, want 2 of small and 2 of big (the zero a gap)", y)
	}
	if d := y["small"][0] - y["big"][0]; math.Abs(d-decade*math.Log10(280/0.4)) > 1 {
		t.Errorf("0.4 and 280 are %.1f px apart, want %.1f (%.2f decades)", d, decade*math.Log10(280/0.4), math.Log10(280/0.4))
	}
}
