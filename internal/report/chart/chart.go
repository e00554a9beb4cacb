// Package chart draws the SVG charts of every skbtrace page (pcap graphs,
// the doctor's and stat's reports): one way to draw an axis, a line, a band
// of reasons, marks and a legend. Charts are drawn in Go, so a page needs no
// script and prints as it shows. Every series is thinned to at most
// MaxPoints points, whatever the run's length.
package chart

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// MaxPoints bounds the points drawn per series: more than the plot has
// pixel columns gains nothing and makes long runs' pages heavy.
const MaxPoints = 2000

// Geometry, in SVG user units.
const (
	Width        = 960
	padL, padR   = 70, 16
	padT, padB   = 26, 34
	bandHeight   = 26
	legendStride = 14
)

// Point is one value at one time (seconds from the page's start).
type Point struct{ X, Y float64 }

// Span is a stretch of time spent in one state (a send-limit reason).
type Span struct {
	From, To float64
	Key      string
}

// Mark is an event at one time: a retransmission, a drop.
type Mark struct {
	X     float64
	Label string
}

type line struct {
	name, color string
	pts         []Point
	dots        bool
}

type marks struct {
	name, color string
	marks       []Mark
}

type layer struct {
	name, color string
	pts         []Point
}

// Chart is one plot: lines, dots, stacked layers and marks over a shared
// time axis. Nothing is drawn until SVG, so the y range fits the data.
type Chart struct {
	title, yLabel string
	x0, x1        float64
	yMin, yMax    float64
	fixedY        bool
	logY          bool
	height        int
	lines         []line
	marks         []marks
	layers        []layer
	// Unit formats y tick labels (default: compact numbers).
	Unit func(float64) string
}

// New starts a chart over [x0, x1] seconds.
func New(title, yLabel string, x0, x1 float64) *Chart {
	if !(x1 > x0) {
		x1 = x0 + 1
	}
	return &Chart{title: title, yLabel: yLabel, x0: x0, x1: x1, height: 240, Unit: Short}
}

// FixY sets the y range instead of fitting it to the data.
func (c *Chart) FixY(lo, hi float64) *Chart {
	c.yMin, c.yMax, c.fixedY = lo, hi, true
	return c
}

// LogY draws the y axis in decades, for lines whose values lie orders of
// magnitude apart (a stage of 0.4 us beside one of 280 us, which a linear
// axis draws on the same pixel row). Values at or below zero are not drawn.
// Lines only: stacked layers have no meaning on it.
func (c *Chart) LogY() *Chart {
	c.logY = true
	return c
}

// Height sets the chart's height.
func (c *Chart) Height(h int) *Chart {
	c.height = h
	return c
}

// Line adds a series drawn as a line, broken where X goes backwards or a
// point is NaN.
func (c *Chart) Line(name, color string, pts []Point) {
	c.lines = append(c.lines, line{name, color, Thin(pts, MaxPoints), false})
}

// Dots adds a series drawn as points.
func (c *Chart) Dots(name, color string, pts []Point) {
	c.lines = append(c.lines, line{name, color, Thin(pts, MaxPoints), true})
}

// Marks adds events drawn as ticks along the bottom of the plot.
func (c *Chart) Marks(name, color string, ms []Mark) {
	if len(ms) > MaxPoints {
		ms = ms[:MaxPoints]
	}
	c.marks = append(c.marks, marks{name, color, ms})
}

// Stack adds a layer on top of the previous ones (CPU time split); all
// layers must share their X values.
func (c *Chart) Stack(name, color string, pts []Point) {
	c.layers = append(c.layers, layer{name, color, pts})
}

func (c *Chart) yRange() (float64, float64) {
	if c.fixedY {
		return c.yMin, c.yMax
	}
	if c.logY {
		lo, hi := math.Inf(1), 0.0
		for _, l := range c.lines {
			for _, p := range l.pts {
				if p.Y > 0 {
					lo, hi = math.Min(lo, p.Y), math.Max(hi, p.Y)
				}
			}
		}
		if hi == 0 {
			return 1, 10
		}
		lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	hi := 0.0
	for _, l := range c.lines {
		for _, p := range l.pts {
			if !math.IsNaN(p.Y) {
				hi = math.Max(hi, p.Y)
			}
		}
	}
	if len(c.layers) > 0 {
		sums := map[float64]float64{}
		for _, l := range c.layers {
			for _, p := range l.pts {
				sums[p.X] += p.Y
				hi = math.Max(hi, sums[p.X])
			}
		}
	}
	if hi <= 0 {
		hi = 1
	}
	_, top := niceTicks(0, hi*1.05)
	return 0, top
}

type frame struct {
	x0, x1, y0, y1 float64
	h              int
	log            bool
}

func (f frame) x(v float64) float64 {
	return padL + (v-f.x0)/(f.x1-f.x0)*(Width-padL-padR)
}

func (f frame) y(v float64) float64 {
	share := (v - f.y0) / (f.y1 - f.y0)
	if f.log {
		share = math.Log10(v/f.y0) / math.Log10(f.y1/f.y0)
	}
	return float64(f.h-padB) - share*float64(f.h-padT-padB)
}

// SVG renders the chart.
func (c *Chart) SVG() string {
	y0, y1 := c.yRange()
	f := frame{c.x0, c.x1, y0, y1, c.height, c.logY}
	var b strings.Builder
	open(&b, c.title, c.height)
	ticks, _ := niceTicks(y0, y1)
	if c.logY {
		ticks = decades(y0, y1)
	}
	for _, t := range ticks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", padL, Width-padR, f.y(t), f.y(t))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, f.y(t)+4, html.EscapeString(c.Unit(t)))
	}
	timeAxis(&b, f)
	fmt.Fprintf(&b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`+"\n",
		c.height/2, c.height/2, html.EscapeString(c.yLabel))
	c.drawLayers(&b, f)
	for _, l := range c.lines {
		if c.logY {
			l.pts = positive(l.pts)
		}
		if l.dots {
			fmt.Fprintf(&b, `<g class="series" data-name="%s" fill="%s">`, attr(l.name), l.color)
			for _, p := range l.pts {
				if !math.IsNaN(p.Y) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="1.6"/>`, f.x(p.X), f.y(clamp(p.Y, y0, y1)))
				}
			}
			b.WriteString("</g>\n")
			continue
		}
		fmt.Fprintf(&b, `<path class="series" data-name="%s" d="%s" stroke="%s" fill="none" stroke-width="1.3"/>`+"\n",
			attr(l.name), path(f, l.pts, y0, y1), l.color)
	}
	for i, m := range c.marks {
		base := float64(c.height-padB) - 2 - float64(i)*8
		fmt.Fprintf(&b, `<g class="marks" data-name="%s" stroke="%s" stroke-width="1.5">`, attr(m.name), m.color)
		for _, mk := range m.marks {
			x := f.x(mk.X)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"><title>%s</title></line>`, x, x, base, base-7, html.EscapeString(mk.Label))
		}
		b.WriteString("</g>\n")
	}
	var items []LegendItem
	for _, l := range c.layers {
		items = append(items, LegendItem{l.name, l.color})
	}
	for _, l := range c.lines {
		items = append(items, LegendItem{l.name, l.color})
	}
	for _, m := range c.marks {
		items = append(items, LegendItem{m.name, m.color})
	}
	legend(&b, items)
	b.WriteString("</svg>\n")
	return b.String()
}

// drawLayers fills the stacked layers, each between the sum below it and
// the sum including it.
func (c *Chart) drawLayers(b *strings.Builder, f frame) {
	if len(c.layers) == 0 {
		return
	}
	n := len(c.layers[0].pts)
	below := make([]float64, n)
	for _, l := range c.layers {
		pts := l.pts
		if len(pts) != n || n == 0 {
			continue
		}
		var d strings.Builder
		for i, p := range pts {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, f.x(p.X), f.y(clamp(below[i]+p.Y, f.y0, f.y1)))
		}
		for i := n - 1; i >= 0; i-- {
			fmt.Fprintf(&d, "L%.1f %.1f ", f.x(pts[i].X), f.y(clamp(below[i], f.y0, f.y1)))
		}
		fmt.Fprintf(b, `<path class="layer" data-name="%s" d="%sZ" fill="%s" stroke="none"/>`+"\n", attr(l.name), d.String(), l.color)
		for i, p := range pts {
			below[i] += p.Y
		}
	}
}

// Band draws spans as one coloured strip over [x0, x1]: each pixel column
// takes the colour of the key that held most of its time, so a band stays
// a few hundred rectangles however many spans a run has. Keys without a
// colour are drawn grey. Each rectangle carries its key (data-key). The
// legend gives each key's share from shares when given (what the caller's
// tables say), else from the spans' time: a span of a pixel's dominant key
// overstates it.
func Band(title string, x0, x1 float64, spans []Span, colors map[string]string, order []string, shares map[string]float64) string {
	if !(x1 > x0) {
		x1 = x0 + 1
	}
	h := padT + bandHeight + 8
	cols := Width - padL - padR
	share := make([]map[string]float64, cols)
	perCol := (x1 - x0) / float64(cols)
	total := map[string]float64{}
	for _, s := range spans {
		from, to := math.Max(s.From, x0), math.Min(s.To, x1)
		if !(to > from) {
			continue
		}
		total[s.Key] += to - from
		for col := int((from - x0) / perCol); col < cols && x0+float64(col)*perCol < to; col++ {
			lo, hi := math.Max(from, x0+float64(col)*perCol), math.Min(to, x0+float64(col+1)*perCol)
			if hi > lo {
				if share[col] == nil {
					share[col] = map[string]float64{}
				}
				share[col][s.Key] += hi - lo
			}
		}
	}
	var b strings.Builder
	open(&b, title, h)
	top := float64(padT)
	start, cur := 0, ""
	flush := func(end int) {
		if cur == "" || end <= start {
			return
		}
		color, ok := colors[cur]
		if !ok {
			color = "#bdbdbd"
		}
		fmt.Fprintf(&b, `<rect class="band" data-key="%s" x="%d" y="%.0f" width="%d" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
			attr(cur), padL+start, top, end-start, bandHeight, color, html.EscapeString(cur))
	}
	for col := 0; col < cols; col++ {
		key, best := "", 0.0
		for k, v := range share[col] {
			if v > best || v == best && k < key {
				key, best = k, v
			}
		}
		if key != cur {
			flush(col)
			start, cur = col, key
		}
	}
	flush(cols)
	fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", padL, top, cols, bandHeight)
	if shares == nil {
		shares = map[string]float64{}
		for k, v := range total {
			shares[k] = v / sum(total)
		}
	}
	var items []LegendItem
	for _, k := range order {
		if shares[k] > 0 {
			share := fmt.Sprintf("%.0f %%", 100*shares[k])
			if shares[k] < 0.005 {
				share = "<1 %"
			}
			items = append(items, LegendItem{k + " " + share, colors[k]})
		}
	}
	legend(&b, items)
	b.WriteString("</svg>\n")
	return b.String()
}

func sum(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// LegendItem is a name and its colour.
type LegendItem struct{ Name, Color string }

func open(b *strings.Builder, title string, h int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11" font-family="sans-serif">`+"\n",
		Width, h, Width, h)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", Width, h)
	fmt.Fprintf(b, `<text x="%d" y="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(title))
}

func timeAxis(b *strings.Builder, f frame) {
	bottom := float64(f.h - padB)
	fmt.Fprintf(b, `<path d="M%d %d V%.0f H%d" stroke="#333" fill="none"/>`+"\n", padL, padT, bottom, Width-padR)
	ticks, _ := niceTicks(f.x0, f.x1)
	for _, t := range ticks {
		if t < f.x0 || t > f.x1 {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#333"/>`, f.x(t), f.x(t), bottom, bottom+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s s</text>`+"\n", f.x(t), bottom+16, Short(t))
	}
}

// legend lays the items out right to left along the top edge.
func legend(b *strings.Builder, items []LegendItem) {
	x := float64(Width - padR)
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		w := float64(len(it.Name))*6.6 + 22
		x -= w
		fmt.Fprintf(b, `<g class="legend"><rect x="%.0f" y="6" width="10" height="10" fill="%s"/><text x="%.0f" y="15">%s</text></g>`+"\n",
			x, it.Color, x+13, html.EscapeString(it.Name))
	}
}

// Axis draws a bare time axis, for a chart made of custom shapes (the pcap
// time-sequence graph); it returns the x and y mappings.
func Axis(b *strings.Builder, title, yLabel string, x0, x1, y0, y1 float64, h int, items []LegendItem) (x, y func(float64) float64) {
	if !(x1 > x0) {
		x1 = x0 + 1
	}
	if !(y1 > y0) {
		y1 = y0 + 1
	}
	f := frame{x0, x1, y0, y1, h, false}
	open(b, title, h)
	ticks, _ := niceTicks(y0, y1)
	for _, t := range ticks {
		if t < y0 || t > y1 {
			continue
		}
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e6e6e6"/>`+"\n", padL, Width-padR, f.y(t), f.y(t))
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, f.y(t)+4, Short(t))
	}
	timeAxis(b, f)
	fmt.Fprintf(b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`+"\n", h/2, h/2, html.EscapeString(yLabel))
	legend(b, items)
	return f.x, f.y
}

// path is the d attribute of a line through pts, broken at NaN. A point
// alone between gaps (a bursty flow's bin) is a short tick: a move alone
// draws nothing.
func path(f frame, pts []Point, y0, y1 float64) string {
	var d strings.Builder
	for i, p := range pts {
		if math.IsNaN(p.Y) {
			continue
		}
		x, y := f.x(p.X), f.y(clamp(p.Y, y0, y1))
		after := i+1 < len(pts) && !math.IsNaN(pts[i+1].Y)
		switch {
		case i > 0 && !math.IsNaN(pts[i-1].Y):
			fmt.Fprintf(&d, "L%.1f %.1f ", x, y)
		case after:
			fmt.Fprintf(&d, "M%.1f %.1f ", x, y)
		default:
			fmt.Fprintf(&d, "M%.1f %.1f h3 ", x-1.5, y)
		}
	}
	return strings.TrimSpace(d.String())
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

func attr(s string) string { return html.EscapeString(s) }

// Thin keeps at most n points: pts are cut into n/2 buckets of equal count
// and each keeps its lowest and highest point in time order, so peaks and
// dips survive. NaN points (gaps) are kept.
func Thin(pts []Point, n int) []Point {
	if len(pts) <= n || n < 4 {
		return pts
	}
	buckets := n / 2
	out := make([]Point, 0, n+8)
	for i := 0; i < buckets; i++ {
		lo, hi := i*len(pts)/buckets, (i+1)*len(pts)/buckets
		minI, maxI, gap := -1, -1, false
		for j := lo; j < hi; j++ {
			if math.IsNaN(pts[j].Y) {
				gap = true
				continue
			}
			if minI < 0 || pts[j].Y < pts[minI].Y {
				minI = j
			}
			if maxI < 0 || pts[j].Y > pts[maxI].Y {
				maxI = j
			}
		}
		switch {
		case minI < 0:
			out = append(out, Point{pts[lo].X, math.NaN()})
			continue
		case minI == maxI:
			out = append(out, pts[minI])
		case minI < maxI:
			out = append(out, pts[minI], pts[maxI])
		default:
			out = append(out, pts[maxI], pts[minI])
		}
		if gap {
			out = append(out, Point{pts[hi-1].X, math.NaN()})
		}
	}
	return out
}

// positive is pts with the values a log axis cannot place made gaps.
func positive(pts []Point) []Point {
	out := make([]Point, len(pts))
	for i, p := range pts {
		if !(p.Y > 0) {
			p.Y = math.NaN()
		}
		out[i] = p
	}
	return out
}

// decades are a log axis's ticks: the powers of ten from lo to hi, every
// other one past six.
func decades(lo, hi float64) []float64 {
	n := int(math.Round(math.Log10(hi / lo)))
	step := 1
	if n > 6 {
		step = 2
	}
	var ticks []float64
	for i := 0; i <= n; i += step {
		ticks = append(ticks, lo*math.Pow(10, float64(i)))
	}
	return ticks
}

// niceTicks returns about five round tick values covering [lo, hi] and the
// top tick.
func niceTicks(lo, hi float64) ([]float64, float64) {
	if !(hi > lo) {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	first := math.Ceil(lo/step-1e-9) * step
	if first == 0 {
		first = 0 // not -0, which prints as "-0"
	}
	for t := first; t <= hi+step*1e-6; t += step {
		ticks = append(ticks, t)
	}
	top := math.Ceil(hi/step-1e-9) * step
	return ticks, top
}

// Short prints an axis value compactly.
func Short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(fmt.Sprintf("%.2f", v/1e9)) + "G"
	case a >= 1e6:
		return trim(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case a >= 1e3:
		return trim(fmt.Sprintf("%.2f", v/1e3)) + "k"
	case a >= 1 || a == 0:
		return trim(fmt.Sprintf("%.2f", v))
	default:
		return trim(fmt.Sprintf("%.3f", v))
	}
}

func trim(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Percent formats a share (0..1) as a tick label.
func Percent(v float64) string { return trim(fmt.Sprintf("%.1f", v*100)) + "%" }
