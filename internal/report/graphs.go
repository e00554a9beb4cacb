package report

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
)

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 960, 320
	padL, padR     = 80, 20
	padT, padB     = 30, 40
)

// WriteGraphs draws, for each flow direction, a tcptrace-style
// time-sequence graph (data, the ACK line, the receive-window line,
// retransmissions and SACKs marked), throughput, RTT and packet size over
// time, as SVG files and one self-contained HTML page showing them all.
func WriteGraphs(dir string, graphs []pcap.FlowGraph) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the graphs directory: %w", err)
	}
	var page strings.Builder
	page.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>skbtrace pcap</title>\n" +
		"<style>body{font-family:sans-serif;margin:20px} svg{display:block;margin:8px 0;border:1px solid #ddd}</style></head><body>\n" +
		"<h1>skbtrace pcap</h1>\n")
	if len(graphs) == 0 {
		page.WriteString("<p>No flow carried enough data (256 KB) to draw.</p>\n")
	}
	for i, g := range graphs {
		fmt.Fprintf(&page, "<h2>%s</h2>\n", html.EscapeString(g.Title))
		for _, c := range []struct {
			name string
			draw func(pcap.FlowGraph) string
		}{{"tseq", timeSequence}, {"throughput", throughput}, {"rtt", rtt}, {"size", packetSize}} {
			svg := c.draw(g)
			name := fmt.Sprintf("flow%d-%s.svg", i+1, c.name)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(svg), 0o644); err != nil {
				return fmt.Errorf("writing %s: %w", name, err)
			}
			page.WriteString(svg)
		}
	}
	page.WriteString("</body></html>\n")
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(page.String()), 0o644); err != nil {
		return fmt.Errorf("writing index.html: %w", err)
	}
	return nil
}

// chart maps data coordinates to the plot area.
type chart struct {
	b              strings.Builder
	x0, x1, y0, y1 float64
	title, yLabel  string
}

func newChart(title, yLabel string, x0, x1, y0, y1 float64) *chart {
	if x1 <= x0 {
		x1 = x0 + 1
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	c := &chart{x0: x0, x1: x1, y0: y0, y1: y1, title: title, yLabel: yLabel}
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&c.b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&c.b, `<text x="%d" y="18" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(title))
	// Axes with three ticks each.
	fmt.Fprintf(&c.b, `<path d="M%d %d V%d H%d" stroke="black" fill="none"/>`+"\n", padL, padT, chartH-padB, chartW-padR)
	for i := 0; i <= 2; i++ {
		fx, fy := x0+(x1-x0)*float64(i)/2, y0+(y1-y0)*float64(i)/2
		fmt.Fprintf(&c.b, `<text x="%.1f" y="%d" text-anchor="middle">%s s</text>`+"\n", c.x(fx), chartH-padB+16, short(fx))
		fmt.Fprintf(&c.b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, c.y(fy)+4, short(fy))
	}
	fmt.Fprintf(&c.b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">%s</text>`+"\n",
		chartH/2, chartH/2, html.EscapeString(yLabel))
	return c
}

func (c *chart) x(v float64) float64 {
	return padL + (v-c.x0)/(c.x1-c.x0)*(chartW-padL-padR)
}

func (c *chart) y(v float64) float64 {
	return chartH - padB - (v-c.y0)/(c.y1-c.y0)*(chartH-padT-padB)
}

// line draws a polyline through the points where ok is true, broken at gaps.
func (c *chart) line(color string, n int, at func(i int) (x, y float64, ok bool)) {
	var d strings.Builder
	pen := false
	for i := 0; i < n; i++ {
		x, y, ok := at(i)
		if !ok {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		fmt.Fprintf(&d, "%s%.1f %.1f ", cmd, c.x(x), c.y(y))
		pen = true
	}
	if d.Len() > 0 {
		fmt.Fprintf(&c.b, `<path d="%s" stroke="%s" fill="none" stroke-width="1.2"/>`+"\n", d.String(), color)
	}
}

func (c *chart) legend(items ...string) {
	for i := 0; i+1 < len(items); i += 2 {
		fmt.Fprintf(&c.b, `<text x="%d" y="18" fill="%s">%s</text>`+"\n", chartW-padR-110*(len(items)/2-i/2), items[i+1], items[i])
	}
}

func (c *chart) done() string {
	c.b.WriteString("</svg>\n")
	return c.b.String()
}

func span(g pcap.FlowGraph) (float64, float64) {
	if len(g.Points) == 0 {
		return 0, 1
	}
	return g.Points[0].T, g.Points[len(g.Points)-1].T
}

func timeSequence(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range g.Points {
		if p.HasData {
			lo, hi = math.Min(lo, p.SeqMin), math.Max(hi, p.SeqMax)
		}
		if p.HasAck {
			hi = math.Max(hi, p.Win)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	c := newChart("time-sequence: "+g.Title, "sequence (bytes from the first)", t0, t1, lo, hi)
	c.legend("data", "black", "ack", "green", "window", "orange", "retransmit", "red", "sack", "purple")
	var d strings.Builder
	for _, p := range g.Points {
		if p.HasData {
			fmt.Fprintf(&d, "M%.1f %.1f V%.1f ", c.x(p.T), c.y(p.SeqMin), math.Min(c.y(p.SeqMax), c.y(p.SeqMin)-1))
		}
	}
	if d.Len() > 0 {
		fmt.Fprintf(&c.b, `<path d="%s" stroke="black" stroke-width="1.5"/>`+"\n", d.String())
	}
	c.line("green", len(g.Points), func(i int) (float64, float64, bool) { p := g.Points[i]; return p.T, p.Ack, p.HasAck })
	c.line("orange", len(g.Points), func(i int) (float64, float64, bool) { p := g.Points[i]; return p.T, p.Win, p.HasAck })
	for _, p := range g.Points {
		if p.Retrans > 0 {
			fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="3" fill="red"><title>%d retransmitted</title></circle>`+"\n", c.x(p.T), c.y(p.RetransSeq), p.Retrans)
		}
		if p.SACKs > 0 && p.HasAck {
			fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="2" height="6" fill="purple"/>`+"\n", c.x(p.T), c.y(p.Ack)-8)
		}
	}
	return c.done()
}

func throughput(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	hi := 0.0
	for _, p := range g.Points {
		hi = math.Max(hi, p.Bps/1e6)
	}
	c := newChart("throughput: "+g.Title, "Mbit/s", t0, t1, 0, hi*1.05)
	c.line("steelblue", len(g.Points), func(i int) (float64, float64, bool) { p := g.Points[i]; return p.T, p.Bps / 1e6, true })
	return c.done()
}

func rtt(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	hi := 0.0
	for _, p := range g.Points {
		hi = math.Max(hi, p.RTTus)
	}
	c := newChart("RTT at the capture point: "+g.Title, "microseconds", t0, t1, 0, hi*1.05)
	for _, p := range g.Points {
		if p.RTTus > 0 {
			fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="1.6" fill="darkred"/>`+"\n", c.x(p.T), c.y(p.RTTus))
		}
	}
	return c.done()
}

func packetSize(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	hi := 0.0
	for _, p := range g.Points {
		hi = math.Max(hi, float64(p.MaxPayload))
	}
	c := newChart("largest payload per interval: "+g.Title, "bytes", t0, t1, 0, hi*1.05)
	c.line("teal", len(g.Points), func(i int) (float64, float64, bool) {
		p := g.Points[i]
		return p.T, float64(p.MaxPayload), p.HasData
	})
	return c.done()
}

// short prints an axis value compactly.
func short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 1 || a == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
