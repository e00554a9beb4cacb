package report

import (
	"fmt"
	"html"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
	"github.com/skbtrace/skbtrace/internal/report/chart"
)

// WriteGraphs draws, for each flow direction, a tcptrace-style
// time-sequence graph (data, the ACK line, the receive-window line,
// retransmissions and SACKs marked), throughput, RTT and packet size over
// time, as SVG files and one self-contained HTML page showing them all;
// it returns the paths it wrote.
//
// The files are written into a staging directory inside dir and moved into
// place only when all are written: a failed run leaves an earlier set as it
// was; a complete one replaces it, earlier flows' files included.
func WriteGraphs(dir string, graphs []pcap.FlowGraph) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the graphs directory: %w", err)
	}
	staging, err := os.MkdirTemp(dir, ".graphs-*")
	if err != nil {
		return nil, fmt.Errorf("creating the graphs directory: %w", err)
	}
	defer os.RemoveAll(staging)
	var page strings.Builder
	// The charts are 960 units wide: scaled to the window, not cut at its edge.
	page.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n" +
		"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>skbtrace pcap</title>\n" +
		"<style>body{font-family:sans-serif;margin:20px} svg{display:block;margin:8px 0;border:1px solid #ddd;max-width:100%;height:auto}</style></head><body>\n" +
		"<h1>skbtrace pcap</h1>\n")
	if len(graphs) == 0 {
		page.WriteString("<p>No flow carried data to draw.</p>\n")
	}
	names := map[string]bool{}
	for i, g := range graphs {
		fmt.Fprintf(&page, "<h2>%s</h2>\n", html.EscapeString(g.Title))
		for _, c := range []struct {
			name string
			draw func(pcap.FlowGraph) string
		}{{"tseq", timeSequence}, {"throughput", throughput}, {"rtt", rtt}, {"size", packetSize}} {
			svg := c.draw(g)
			name := fmt.Sprintf("flow%d-%s.svg", i+1, c.name)
			if err := os.WriteFile(filepath.Join(staging, name), []byte(svg), 0o644); err != nil {
				return nil, fmt.Errorf("writing %s: %w", name, err)
			}
			names[name] = true
			page.WriteString(svg)
		}
	}
	page.WriteString("</body></html>\n")
	if err := os.WriteFile(filepath.Join(staging, "index.html"), []byte(page.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing index.html: %w", err)
	}
	names["index.html"] = true
	var written []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if err := os.Rename(filepath.Join(staging, name), filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
		written = append(written, filepath.Join(dir, name))
	}
	// An earlier run's graphs of flows this one does not have.
	stale, _ := filepath.Glob(filepath.Join(dir, "flow*-*.svg"))
	for _, p := range stale {
		if !names[filepath.Base(p)] {
			os.Remove(p)
		}
	}
	return written, nil
}

func span(g pcap.FlowGraph) (float64, float64) {
	if len(g.Points) == 0 {
		return 0, 1
	}
	return g.Points[0].T, g.Points[len(g.Points)-1].T
}

// series picks one value per bin; bins without one are gaps.
func series(g pcap.FlowGraph, at func(p pcap.GraphPoint) (float64, bool)) []chart.Point {
	out := make([]chart.Point, 0, len(g.Points))
	for _, p := range g.Points {
		v, ok := at(p)
		if !ok {
			v = math.NaN()
		}
		out = append(out, chart.Point{X: p.T, Y: v})
	}
	return out
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
	var b strings.Builder
	x, y := chart.Axis(&b, "time-sequence: "+g.Title, "sequence (bytes from the first)", t0, t1, lo, hi, 320,
		[]chart.LegendItem{{Name: "data", Color: "black"}, {Name: "ack", Color: "green"}, {Name: "window", Color: "orange"}, {Name: "retransmit", Color: "red"}, {Name: "sack", Color: "purple"}})
	var d strings.Builder
	for _, p := range g.Points {
		if p.HasData {
			fmt.Fprintf(&d, "M%.1f %.1f V%.1f ", x(p.T), y(p.SeqMin), math.Min(y(p.SeqMax), y(p.SeqMin)-1))
		}
	}
	if d.Len() > 0 {
		fmt.Fprintf(&b, `<path d="%s" stroke="black" stroke-width="1.5"/>`+"\n", d.String())
	}
	// The ACK and window lines hold their last value until the next ACK, as
	// tcptrace draws them: a slow or bursty flow's ACKs fall in few bins.
	for _, l := range []struct {
		color string
		at    func(p pcap.GraphPoint) float64
	}{
		{"green", func(p pcap.GraphPoint) float64 { return p.Ack }},
		{"orange", func(p pcap.GraphPoint) float64 { return p.Win }},
	} {
		var d strings.Builder
		last, seen := 0.0, false
		for _, p := range g.Points {
			if !p.HasAck {
				continue
			}
			if seen {
				fmt.Fprintf(&d, "H%.1f L%.1f %.1f ", x(p.T), x(p.T), y(l.at(p)))
			} else {
				fmt.Fprintf(&d, "M%.1f %.1f ", x(p.T), y(l.at(p)))
			}
			last, seen = x(p.T), true
		}
		if seen {
			// To the end of the flow's span: the last ACK still holds.
			fmt.Fprintf(&d, "H%.1f", math.Max(last+2, x(g.Points[len(g.Points)-1].T)))
			fmt.Fprintf(&b, `<path d="%s" stroke="%s" fill="none" stroke-width="1.2"/>`+"\n", d.String(), l.color)
		}
	}
	for _, p := range g.Points {
		if p.Retrans > 0 {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="red"><title>%d retransmitted</title></circle>`+"\n", x(p.T), y(p.RetransSeq), p.Retrans)
		}
		if p.SACKs > 0 && p.HasAck {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="2" height="6" fill="purple"/>`+"\n", x(p.T), y(p.Ack)-8)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func throughput(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	c := chart.New("throughput: "+g.Title, "bit/s", t0, t1)
	c.Line("throughput", "steelblue", series(g, func(p pcap.GraphPoint) (float64, bool) { return p.Bps, true }))
	return c.SVG()
}

func rtt(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	c := chart.New("RTT at the capture point: "+g.Title, "microseconds", t0, t1)
	var pts []chart.Point
	for _, p := range g.Points {
		if p.RTTus > 0 {
			pts = append(pts, chart.Point{X: p.T, Y: p.RTTus})
		}
	}
	c.Dots("rtt", "darkred", pts)
	return c.SVG()
}

func packetSize(g pcap.FlowGraph) string {
	t0, t1 := span(g)
	c := chart.New("largest payload per interval: "+g.Title, "bytes", t0, t1)
	c.Line("largest payload", "teal", series(g, func(p pcap.GraphPoint) (float64, bool) { return float64(p.MaxPayload), p.HasData }))
	return c.SVG()
}
