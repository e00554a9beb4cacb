// Package htmlreport writes the doctor's report and a trace's story as one
// self-contained HTML page: findings first, then per flow, per CPU and per
// device charts on one time axis, then the settings. Styles and the one
// script (copy buttons) are inlined and charts are SVG drawn here, so the
// page works offline and prints.
package htmlreport

import (
	_ "embed"
	"fmt"
	"html"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/report/chart"
	"github.com/skbtrace/skbtrace/internal/units"
)

//go:embed page.css
var pageCSS string

//go:embed page.js
var pageJS string

// ReasonColors are the send-limit reasons' colours, in every chart and in
// docs/report.md.
var ReasonColors = map[string]string{
	"ok": "#a5d6a7", "cwnd": "#fb8c00", "swnd": "#8e24aa", "nagle": "#fdd835",
	"pacing": "#26a69a", "tsq": "#5c6bc0", "sndbuf": "#e53935", "app": "#90a4ae",
	"cork": "#8d6e63", "xmit_fail": "#212121", "rto": "#d81b60",
}

// ReasonOrder is the legend's order.
var ReasonOrder = []string{"ok", "cwnd", "swnd", "sndbuf", "nagle", "cork", "tsq", "pacing", "app", "rto", "xmit_fail"}

// Page is what one report shows.
type Page struct {
	Title string
	// Facts are short "name: value" lines under the title (kernel, window, command).
	Facts [][2]string
	// Findings, when the page has a verdict (the doctor); Healthy when nothing rose above info.
	Findings  []finding.Finding
	Verdict   bool
	Healthy   string
	Damage    string // where a damaged trace stops being readable
	Timeline  *timeline.Timeline
	Settings  *host.Settings
	Ends      []End // the namespaces (and devices) of the main flow's two ends
	Notes     []string
	Appendix  string // preformatted text (stat's summary)
	Generator string
}

// End is one end of the main flow: its namespace and device.
type End struct{ Netns, Dev string }

// Write writes the page.
func Write(w io.Writer, p *Page) error {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>%s</title>\n<style>\n%s</style>\n</head><body>\n",
		esc(p.Title), pageCSS)
	fmt.Fprintf(&b, "<header><h1>%s</h1>\n<dl class=\"facts\">", esc(p.Title))
	for _, f := range p.Facts {
		fmt.Fprintf(&b, "<dt>%s</dt><dd>%s</dd>", esc(f[0]), esc(f[1]))
	}
	b.WriteString("</dl></header>\n")
	if p.Damage != "" {
		fmt.Fprintf(&b, "<div class=\"damage\" id=\"damage\"><strong>The trace is damaged:</strong> %s. Everything before the damage is drawn below.</div>\n", esc(p.Damage))
	}
	if p.Verdict {
		writeFindings(&b, p)
	}
	if p.Timeline != nil {
		writeFlows(&b, p.Timeline)
		writeCPUs(&b, p.Timeline)
		writeDevices(&b, p.Timeline)
	}
	if p.Settings != nil {
		writeSettings(&b, p.Settings, p.Ends)
	}
	if len(p.Notes) > 0 {
		b.WriteString("<section id=\"notes\"><h2>Notes</h2><ul>")
		for _, n := range p.Notes {
			fmt.Fprintf(&b, "<li>%s</li>", esc(n))
		}
		b.WriteString("</ul></section>\n")
	}
	if p.Appendix != "" {
		b.WriteString("<section id=\"summary\"><h2>Summary</h2>\n")
		writeSummary(&b, p.Appendix)
		b.WriteString("</section>\n")
	}
	fmt.Fprintf(&b, "<footer>%s</footer>\n<script>\n%s</script>\n</body></html>\n", esc(p.Generator), pageJS)
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string { return html.EscapeString(s) }

func writeFindings(b *strings.Builder, p *Page) {
	b.WriteString("<section id=\"findings\"><h2>Findings</h2>\n")
	if len(p.Findings) == 0 {
		b.WriteString("<p>No findings.</p>\n")
	}
	for _, f := range p.Findings {
		fmt.Fprintf(b, "<article class=\"finding %s\" data-id=\"%s\">\n<h3><span class=\"sev\">%s</span> <code>%s</code> %s</h3>\n",
			f.Severity, esc(f.ID), f.Severity, esc(f.ID), esc(f.Title))
		fmt.Fprintf(b, "<p class=\"meta\">scope: %s · at stake: %s · confidence: %s</p>\n", esc(f.Scope), esc(f.ImpactText), esc(string(f.Confidence)))
		if len(f.Evidence) > 0 {
			b.WriteString("<h4>Evidence</h4><ul class=\"evidence\">")
			for _, e := range f.Evidence {
				fmt.Fprintf(b, "<li>%s</li>", esc(e))
			}
			b.WriteString("</ul>\n")
		}
		if f.Explanation != "" {
			fmt.Fprintf(b, "<h4>Why</h4><p>%s</p>\n", esc(f.Explanation))
		}
		writeCommands(b, "Fix", f.Remedy)
		writeCommands(b, "Confirm", f.Confirm)
		b.WriteString("</article>\n")
	}
	if p.Healthy != "" {
		fmt.Fprintf(b, "<p class=\"healthy\" id=\"healthy\"><strong>Healthy:</strong> %s</p>\n", esc(p.Healthy))
	}
	b.WriteString("</section>\n")
}

// writeCommands lists a finding's remedies or confirmations: a line that
// begins with a command shows the command with a copy button and what
// follows it (the house style: "CMD   (why)", "CMD: what to look for",
// "CMD during the transfer, then ...") as a note; a line of prose (which may
// name commands in passing) is text, with nothing to copy.
func writeCommands(b *strings.Builder, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "<h4>%s</h4><ul class=\"commands\">", title)
	for _, l := range lines {
		cmd, note, ok := command(l)
		if !ok {
			fmt.Fprintf(b, "<li class=\"prose\">%s</li>", esc(l))
			continue
		}
		fmt.Fprintf(b, "<li class=\"command\"><div class=\"cmd\"><pre>%s</pre><button type=\"button\" class=\"copy\">copy</button></div>", esc(cmd))
		if note != "" {
			fmt.Fprintf(b, "<p class=\"note\">%s</p>", esc(note))
		}
		b.WriteString("</li>")
	}
	b.WriteString("</ul>\n")
}

// commands are the programs the doctor's remedies and confirmations run; a
// line beginning with one of them is a command line. English verbs that are
// programs too (find) are left out: "find what runs on CPU 1: ..." is prose.
var commands = map[string]bool{
	"ip": true, "ethtool": true, "sysctl": true, "ss": true, "tc": true, "ping": true, "tcpdump": true,
	"nstat": true, "mpstat": true, "strace": true, "top": true, "perf": true, "skbtrace": true, "iperf3": true,
	"nft": true, "iptables": true, "taskset": true, "echo": true,
}

// commandEnd finds where a command line's command ends and its commentary
// begins.
var commandEnd = regexp.MustCompile(`   \(|: |, |; |  or  | during | for one run| twice| of the `)

// command splits a command line into the command to copy and the note after
// it; ok is false for prose.
func command(line string) (cmd, note string, ok bool) {
	first, rest, _ := strings.Cut(line, " ")
	if !commands[first] || rest == "" {
		return "", "", false
	}
	cmd = line
	if loc := commandEnd.FindStringIndex(line); loc != nil {
		cmd, note = line[:loc[0]], strings.TrimLeft(line[loc[0]:], " :,;")
	}
	return strings.TrimSpace(cmd), note, true
}

func points(ps []timeline.Point) []chart.Point {
	out := make([]chart.Point, len(ps))
	for i, p := range ps {
		out[i] = chart.Point{X: p.T, Y: p.V}
	}
	return out
}

func writeFlows(b *strings.Builder, tl *timeline.Timeline) {
	b.WriteString("<section id=\"flows\"><h2>Flows</h2>\n")
	if len(tl.Flows) == 0 {
		b.WriteString("<p>No TCP flow sent data while this was recorded.</p>\n")
	}
	if tl.OtherFlows > 0 {
		fmt.Fprintf(b, "<p id=\"other-flows\">Left out: %s that moved less than these (each connection, a socket's life, is a flow; the %d busiest are drawn, and only the %d busiest so far have their series kept).</p>\n",
			units.Count(tl.OtherFlows, "other sender", "other senders"), timeline.MaxFlows, timeline.MaxCandidates)
	}
	for i, f := range tl.Flows {
		fmt.Fprintf(b, "<div class=\"flow\" id=\"flow%d\"><h3>%s</h3>\n", i+1, esc(f.Label()))
		if f.Partial {
			fmt.Fprintf(b, "<p class=\"muted partial\">Drawn from %.2f s: before then this flow was not among the %d busiest, whose series alone are kept; the %s it moved before then are in its total, not drawn.</p>\n",
				f.DrawnFrom, timeline.MaxCandidates, units.Bytes(uint64(f.UndrawnBytes)))
		}
		if len(f.Limits) > 0 {
			spans := make([]chart.Span, len(f.Limits))
			for j, s := range f.Limits {
				spans[j] = chart.Span{From: s.From, To: s.To, Key: s.Reason}
			}
			fmt.Fprintf(b, "<div class=\"sendlim\">%s</div>", chart.Band("why the sender was not sending more (tcp_sendlim)", 0, tl.Seconds, spans, ReasonColors, ReasonOrder, f.LimitShare))
		} else {
			b.WriteString("<p class=\"muted\">No send-limit decisions were recorded for this flow (tcp_sendlim needs kernel events).</p>\n")
		}
		c := chart.New("throughput: "+f.ThroughputFrom, "bit/s", 0, tl.Seconds)
		c.Line("throughput", "#1e88e5", points(f.Throughput))
		c.Marks("retransmits", "#d81b60", marks(f.Retrans, "segments retransmitted"))
		c.Marks("drops", "#212121", marks(f.Drops, "packets dropped"))
		b.WriteString(c.SVG())
		c = chart.New("congestion window and segments in flight", "segments", 0, tl.Seconds).Height(200)
		c.Line("cwnd", "#fb8c00", points(f.Cwnd))
		c.Line("in flight", "#3949ab", points(f.InFlight))
		b.WriteString(c.SVG())
		if len(f.SRTT) > 0 {
			c = chart.New("smoothed RTT", "µs", 0, tl.Seconds).Height(180)
			c.Line("srtt", "#6d4c41", points(f.SRTT))
			b.WriteString(c.SVG())
		}
		b.WriteString(stageChart(f.StageUs, tl.Seconds, "where a sent byte's time went: each stage's mean wait (tcp_stage)", event.SentStages))
		b.WriteString(stageChart(f.StageUs, tl.Seconds, "where a received byte's time went: each stage's mean wait (tcp_stage)", event.ReceivedStages))
		b.WriteString("</div>\n")
	}
	b.WriteString("</section>\n")
}

// stageColors colour tcp_stage's stages, in event.StageNames' order.
var stageColors = [...]string{"#8e24aa", "#fb8c00", "#43a047", "#1e88e5", "#00897b", "#e53935"}

// stageChart draws a flow's stages of one direction (span, of
// event.StageNames), each stage's mean wait its own line on a log axis:
// stages lie orders of magnitude apart (a loopback sender's driver 0.4 us,
// send queue 5 us, ACK 280 us), and drawn stacked on a linear axis the
// small ones' lines lay on one pixel row, one line seen of four. A stage
// timed and never waited in (qdisc on a device without one) has no line;
// its legend says so. Nothing when the direction was not timed.
func stageChart(ps []timeline.StagePoint, seconds float64, title string, span [2]int) string {
	var timed []timeline.StagePoint // the bins with bytes timed this way
	for _, p := range ps {
		for _, us := range p.Us[span[0]:span[1]] {
			if us > 0 {
				timed = append(timed, p)
				break
			}
		}
	}
	if len(timed) == 0 {
		return ""
	}
	c := chart.New(title, "us (log scale)", 0, seconds).Height(220).LogY()
	for k := span[0]; k < span[1]; k++ {
		line := make([]chart.Point, 0, len(timed))
		waited := false
		for _, p := range timed {
			line = append(line, chart.Point{X: p.T, Y: p.Us[k]})
			waited = waited || p.Us[k] > 0
		}
		label := strings.ReplaceAll(event.StageNames[k], "_", " ")
		if !waited {
			label += ": no wait"
		}
		c.Line(label, stageColors[k], line)
	}
	return c.SVG()
}

func marks(ms []timeline.Mark, what string) []chart.Mark {
	out := make([]chart.Mark, len(ms))
	for i, m := range ms {
		out[i] = chart.Mark{X: m.T, Label: fmt.Sprintf("%d %s at %.3f s", m.N, what, m.T)}
	}
	return out
}

// CPU layer colours: the same in the doctor's and stat's pages.
var cpuColors = [][2]string{{"user", "#42a5f5"}, {"system", "#ef5350"}, {"softirq", "#ffb300"}, {"irq", "#8d6e63"}, {"idle", "#eeeeee"}}

func writeCPUs(b *strings.Builder, tl *timeline.Timeline) {
	b.WriteString("<section id=\"cpus\"><h2>CPUs</h2>\n")
	if len(tl.CPUs) == 0 {
		b.WriteString("<p class=\"muted\">No CPU time was recorded (the doctor reads /proc/stat; a trace needs the softirq family).</p>\n")
	}
	for _, c := range tl.CPUs {
		if !c.FromProcStat {
			ch := chart.New(fmt.Sprintf("CPU %d: network softirq time (softirq family; the trace has no /proc/stat)", c.CPU), "share", 0, tl.Seconds).FixY(0, 1).Height(180)
			ch.Unit = chart.Percent
			ch.Line("softirq", cpuColors[2][1], points(c.Softirq))
			b.WriteString(ch.SVG())
			continue
		}
		ch := chart.New(fmt.Sprintf("CPU %d", c.CPU), "share", 0, tl.Seconds).FixY(0, 1).Height(180)
		ch.Unit = chart.Percent
		for i, layer := range [][]timeline.Point{c.User, c.System, c.Softirq, c.IRQ, c.Idle} {
			ch.Stack(cpuColors[i][0], cpuColors[i][1], points(layer))
		}
		b.WriteString(ch.SVG())
	}
	b.WriteString("</section>\n")
}

// maxDevices keeps the page short on hosts with many devices.
const maxDevices = 6

func writeDevices(b *strings.Builder, tl *timeline.Timeline) {
	b.WriteString("<section id=\"devices\"><h2>Devices</h2>\n")
	if len(tl.Devices) == 0 {
		b.WriteString("<p class=\"muted\">No device traffic was recorded: dev_xmit and dev_recv need kernel events and, sampled, " +
			"see only the part of each second they are attached (doctor --deep, record -e dev_xmit,dev_recv count it all).</p>\n")
	}
	for i, d := range tl.Devices {
		if i == maxDevices {
			fmt.Fprintf(b, "<p>%d more devices carried less traffic.</p>\n", len(tl.Devices)-maxDevices)
			break
		}
		name := d.Name
		if d.Netns != "" {
			name += " (netns " + d.Netns + ")"
		}
		c := chart.New(name+": packets per second (segments on the wire)", "packets/s", 0, tl.Seconds).Height(200)
		c.Line("transmit", "#1e88e5", points(d.TxPps))
		c.Line("receive", "#43a047", points(d.RxPps))
		b.WriteString(c.SVG())
		c = chart.New(name+": segments per skb (TSO/GSO at transmit, GRO at receive)", "segments/skb", 0, tl.Seconds).Height(180)
		c.Line("transmit", "#1e88e5", points(d.TxSegsSkb))
		c.Line("receive", "#43a047", points(d.RxSegsSkb))
		b.WriteString(c.SVG())
	}
	b.WriteString("</section>\n")
}

// settingsColumn is one namespace (and its device of interest) as rows.
type settingsColumn struct {
	title string
	rows  map[string]string
}

func writeSettings(b *strings.Builder, s *host.Settings, ends []End) {
	b.WriteString("<section id=\"settings\"><h2>Settings</h2>\n")
	fmt.Fprintf(b, "<p>kernel %s", esc(s.Kernel))
	var vulnerable []string
	for _, m := range s.Mitigations {
		if strings.HasPrefix(m.State, "Vulnerable") || strings.HasPrefix(m.State, "Mitigation") {
			vulnerable = append(vulnerable, m.Name+": "+m.State)
		}
	}
	if len(vulnerable) > 0 {
		fmt.Fprintf(b, "; CPU mitigations: %s", esc(strings.Join(vulnerable, "; ")))
	}
	b.WriteString("</p>\n")
	cols := columns(s, ends)
	if len(cols) == 0 {
		b.WriteString("<p>No namespace settings were recorded.</p></section>\n")
		return
	}
	keys := map[string]bool{}
	for _, c := range cols {
		for k := range c.rows {
			keys[k] = true
		}
	}
	var order []string
	for k := range keys {
		order = append(order, k)
	}
	sort.Strings(order)
	b.WriteString("<table class=\"settings\"><thead><tr><th>setting</th>")
	for _, c := range cols {
		fmt.Fprintf(b, "<th>%s</th>", esc(c.title))
	}
	b.WriteString("</tr></thead><tbody>\n")
	for _, k := range order {
		differs := false
		for _, c := range cols[1:] {
			if k == "~device" {
				break // the two ends' devices are named apart by design
			}
			if c.rows[k] != cols[0].rows[k] {
				differs = true
			}
		}
		class := ""
		if differs && len(cols) > 1 {
			class = " class=\"differs\""
		}
		fmt.Fprintf(b, "<tr%s><td>%s</td>", class, esc(strings.TrimPrefix(k, "~")))
		for _, c := range cols {
			fmt.Fprintf(b, "<td>%s</td>", esc(c.rows[k]))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody></table>\n")
	if len(cols) > 1 {
		b.WriteString("<p class=\"muted\">Rows that differ between the ends are highlighted.</p>\n")
	}
	b.WriteString("</section>\n")
}

// columns are the flow's ends as known; without any, the first two
// namespaces with devices beyond loopback. One known end is not completed
// with another namespace: paired with one the flow never crossed (the
// host's), every row would read as a difference.
func columns(s *host.Settings, ends []End) []settingsColumn {
	var out []settingsColumn
	taken := map[string]bool{}
	for _, e := range ends {
		for _, ns := range s.Namespaces {
			if ns.Name == e.Netns && !taken[ns.Name] {
				out = append(out, column(ns, e.Dev))
				taken[ns.Name] = true
			}
		}
	}
	for _, ns := range s.Namespaces {
		if len(out) >= 2 || len(ends) > 0 {
			break
		}
		if taken[ns.Name] {
			continue
		}
		for _, d := range ns.Devices {
			if d.Kind != "" && d.Name != "lo" {
				out = append(out, column(ns, ""))
				break
			}
		}
	}
	return out
}

func column(ns host.NetnsSettings, dev string) settingsColumn {
	c := settingsColumn{title: "netns " + ns.Name, rows: map[string]string{}}
	for k, v := range ns.Sysctls {
		c.rows[k] = v
	}
	for _, d := range ns.Devices {
		if dev != "" && d.Name != dev || dev == "" && d.Name == "lo" {
			continue
		}
		// "~" sorts device rows after the sysctls; the prefix is not shown.
		prefix := "~device "
		if dev == "" {
			prefix += d.Name + " "
		} else {
			c.title += ", " + d.Name
			c.rows["~device"] = d.Name + " (" + d.Kind + ")"
		}
		c.rows[prefix+"mtu"] = fmt.Sprint(d.MTU)
		if d.SpeedMbps > 0 {
			c.rows[prefix+"speed"] = fmt.Sprintf("%d Mbit/s", d.SpeedMbps)
		}
		var qd []string
		for _, q := range d.Qdiscs {
			s := q.Kind + " " + q.Handle
			if q.RateBps > 0 {
				s += fmt.Sprintf(" rate %s", chart.Short(float64(q.RateBps)*8)) + "bit/s"
			}
			qd = append(qd, s)
		}
		c.rows[prefix+"qdiscs"] = strings.Join(qd, ", ")
		for f, on := range d.Features {
			c.rows[prefix+f] = map[bool]string{true: "on", false: "off"}[on]
		}
	}
	return c
}

// writeSummary lays out a text summary (stat's) for a window of any width:
// its aligned tables (text/tabwriter's, cells left-aligned two spaces
// apart) become HTML tables whose cells wrap, its other lines paragraphs.
// As one <pre> its 200-column rows ran off the right edge, the scroll bar
// a screen below.
func writeSummary(b *strings.Builder, text string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i := 0; i < len(lines); {
		if starts := columnStarts(lines[i]); len(starts) >= 2 {
			j := i + 1
			for j < len(lines) && aligned(lines[j], starts) {
				j++
			}
			if j > i+1 {
				writeTable(b, lines[i], lines[i+1:j], starts)
				i = j
				continue
			}
		}
		switch line := lines[i]; {
		case strings.TrimSpace(line) == "":
		case heading(line):
			fmt.Fprintf(b, "<h3 class=\"summary-title\">%s</h3>\n", esc(line))
		default:
			fmt.Fprintf(b, "<p class=\"summary-line\">%s</p>\n", esc(line))
		}
		i++
	}
}

// columnStarts are where a table row's cells begin: at its start and after
// each run of two or more spaces; nil for an indented line.
func columnStarts(line string) []int {
	if line == "" || line[0] == ' ' {
		return nil
	}
	starts := []int{0}
	for k := 2; k < len(line); k++ {
		if line[k] != ' ' && line[k-1] == ' ' && line[k-2] == ' ' {
			starts = append(starts, k)
		}
	}
	return starts
}

// aligned says whether row is a row of the table whose header begins its
// cells at starts: it has two cells or more ("(3 more sockets ...)" is a
// line of its own), each beginning at one of them.
func aligned(row string, starts []int) bool {
	own := columnStarts(row)
	if len(own) < 2 {
		return false
	}
	for _, k := range own {
		if !slices.Contains(starts, k) {
			return false
		}
	}
	return true
}

// heading is a section's title line: its first word in capitals
// ("CONNECTIONS", "TIME BY STAGE (...)").
func heading(line string) bool {
	word, _, _ := strings.Cut(line, " ")
	return len(word) >= 3 && strings.ToUpper(word) == word && strings.ToLower(word) != word
}

func writeTable(b *strings.Builder, header string, rows []string, starts []int) {
	cells := func(line string) []string {
		out := make([]string, len(starts))
		for c, s := range starts {
			if s >= len(line) {
				break
			}
			end := len(line)
			if c+1 < len(starts) && starts[c+1] < end {
				end = starts[c+1]
			}
			out[c] = strings.TrimSpace(line[s:end])
		}
		return out
	}
	b.WriteString("<div class=\"summary-table\"><table><thead><tr>")
	for _, h := range cells(header) {
		fmt.Fprintf(b, "<th>%s</th>", esc(h))
	}
	b.WriteString("</tr></thead><tbody>\n")
	for _, r := range rows {
		b.WriteString("<tr>")
		for _, c := range cells(r) {
			fmt.Fprintf(b, "<td>%s</td>", esc(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody></table></div>\n")
}
