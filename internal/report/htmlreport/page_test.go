package htmlreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/report/browser"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
)

const evil = `</script><img id="pwned" src="x">"&'`

var (
	sender   = netip.MustParseAddrPort("10.0.0.1:40000")
	receiver = netip.MustParseAddrPort("10.0.0.2:5201")
)

const t0 = int64(1_700_000_000_000_000_000)

// run builds the timeline of a sender that waits for its send buffer 80 %
// of the time, for seconds, with a retransmit and a drop a second, two
// CPUs and a device.
func run(seconds int) *timeline.Timeline {
	b := timeline.NewBuilder(t0)
	for ms := int64(0); ms < int64(seconds)*1000; ms += 10 {
		reason := event.SendlimSndbuf
		if ms%50 == 40 {
			reason = event.SendlimOK
		}
		ev := &event.Event{Type: event.TypeTCPSendlim, Time: t0 + (ms+10)*1e6, Begin: t0 + ms*1e6}
		ev.Sendlim = event.TCPSendlim{Socket: event.Socket{Local: sender, Peer: receiver, Netns: 1},
			Reason: reason, Begin: ev.Begin, SentPkts: 20, MSS: 1448, Cwnd: 40, InFlight: 12}
		b.Add(ev)
		b.AddSocketSample(ev.Time, 1, sender, receiver, uint64(ms)*30_000, 40, 12, uint32(200+ms%300))
		for cpu := range 2 {
			b.AddCPUSample(ev.Time, cpu, timeline.CPUTicks{User: 2, System: 3, Softirq: 4, Idle: 1})
		}
		if ms%1000 == 0 {
			rt := &event.Event{Type: event.TypeTCPRetrans, Time: ev.Time, Socket: event.Socket{Local: sender, Peer: receiver, Netns: 1}}
			rt.Retrans.Cnt = 2
			b.Add(rt)
			drop := &event.Event{Type: event.TypeSkbDrop, Time: ev.Time, Socket: event.Socket{Local: sender, Peer: receiver}}
			drop.Drop.Cnt = 1
			b.Add(drop)
			dev := &event.Event{Type: event.TypeDevXmit, Begin: ev.Time - 1e9, Time: ev.Time}
			copy(dev.Dev.Name[:], []int8{'v', 'e', 't', 'h', '0'})
			dev.Dev.Segs, dev.Dev.Skbs = 40000, 1000
			b.Add(dev)
		}
	}
	return b.Build(func(uint32) string { return "snd" })
}

func settings() *host.Settings {
	dev := func(name string, gro bool) host.DeviceSettings {
		return host.DeviceSettings{Name: name, Kind: "veth", MTU: 1500, Features: map[string]bool{"rx-gro": gro, "tx-tcp-segmentation": true},
			Qdiscs: []host.QdiscSettings{{Kind: "noqueue", Handle: "0:"}}}
	}
	return &host.Settings{Kernel: "6.18.0", Namespaces: []host.NetnsSettings{
		{Name: "snd", Sysctls: map[string]string{"net.ipv4.tcp_wmem": "4096 16384 32768", "net.ipv4.tcp_congestion_control": "cubic"}, Devices: []host.DeviceSettings{dev("veth0", false)}},
		{Name: "rcv", Sysctls: map[string]string{"net.ipv4.tcp_wmem": "4096 16384 4194304", "net.ipv4.tcp_congestion_control": "cubic"}, Devices: []host.DeviceSettings{dev("veth1", true)}},
	}}
}

func doctorPage(tl *timeline.Timeline) *Page {
	return &Page{Title: "skbtrace doctor", Verdict: true, Timeline: tl, Settings: settings(),
		Ends:  []End{{Netns: "snd", Dev: "veth0"}, {Netns: "rcv", Dev: "veth1"}},
		Facts: [][2]string{{"kernel", "6.18.0"}, {"command", evil}},
		Findings: []finding.Finding{
			{ID: "sndbuf-limited", Severity: finding.Warning, Title: "the send buffer caps " + evil, Evidence: []string{"tcp_sendlim [sndbuf] 80% of the time"},
				Explanation: "why", Remedy: []string{`ip netns exec snd sysctl -w net.ipv4.tcp_wmem="4096 16384 4194304"`}, Confidence: finding.Strong},
			{ID: "offload-disabled", Severity: finding.Info, Title: "GRO is off", Remedy: []string{"ethtool -K veth0 gro on"}},
		},
		Notes: []string{"a note"}, Generator: "skbtrace test"}
}

func render(t testing.TB, p *Page) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestPageNeedsNothingFromTheNetwork(t *testing.T) {
	page := string(render(t, doctorPage(run(3))))
	for _, re := range []string{`<link`, `<script[^>]*\ssrc=`, `<img`, `<iframe`, `@import`, `url\(`, `href="http`} {
		if m := regexp.MustCompile(re).FindString(page); m != "" {
			t.Errorf("the page loads something (%q): it must be self-contained", m)
		}
	}
}

func TestFindingsComeFirstWithTheirCommands(t *testing.T) {
	page := string(render(t, doctorPage(run(2))))
	ids := regexp.MustCompile(`<article class="finding [a-z]+" data-id="([a-z-]+)"`).FindAllStringSubmatch(page, -1)
	if len(ids) != 2 || ids[0][1] != "sndbuf-limited" || ids[1][1] != "offload-disabled" {
		t.Errorf("findings in the page: %v, want sndbuf-limited then offload-disabled", ids)
	}
	if f, c := strings.Index(page, `id="findings"`), strings.Index(page, `id="flows"`); f < 0 || c < 0 || f > c {
		t.Errorf("the findings (at %d) must come before the charts (at %d)", f, c)
	}
	if n := strings.Count(page, `<button type="button" class="copy">`); n != 2 {
		t.Errorf("%d copy buttons, want one per remedy (2)", n)
	}
	if strings.Contains(page, `<img id="pwned"`) || strings.Contains(page, evil) {
		t.Error("a title or fact reached the page unescaped")
	}
}

func TestHealthyRunSaysSo(t *testing.T) {
	p := doctorPage(nil)
	p.Findings, p.Healthy = nil, "the sender waited for its congestion window 60% of the time"
	page := string(render(t, p))
	if !strings.Contains(page, `id="healthy"`) || !strings.Contains(page, p.Healthy) {
		t.Error("the healthy-run sentence is missing")
	}
}

func TestSettingsHighlightWhatDiffersBetweenTheEnds(t *testing.T) {
	page := string(render(t, doctorPage(nil)))
	rows := regexp.MustCompile(`<tr( class="differs")?><td>([^<]+)</td>`).FindAllStringSubmatch(page, -1)
	differs := map[string]bool{}
	for _, r := range rows {
		differs[r[2]] = r[1] != ""
	}
	for k, want := range map[string]bool{"net.ipv4.tcp_wmem": true, "device rx-gro": true, "net.ipv4.tcp_congestion_control": false, "device mtu": false} {
		if got, ok := differs[k]; !ok || got != want {
			t.Errorf("row %q: present %v, highlighted %v; want highlighted %v", k, ok, got, want)
		}
	}
}

// TestTenMinuteRunStaysSmall: long runs are thinned to the bins, not drawn
// point by point.
func TestTenMinuteRunStaysSmall(t *testing.T) {
	page := render(t, doctorPage(run(600)))
	if len(page) > 2<<20 {
		t.Errorf("the page of a 10-minute run is %d bytes, want under 2 MB", len(page))
	}
	for _, d := range regexp.MustCompile(`<path class="series" data-name="[^"]*" d="([^"]*)"`).FindAllStringSubmatch(string(page), -1) {
		if n := strings.Count(d[1], "L") + strings.Count(d[1], "M"); n > 2100 {
			t.Errorf("a series has %d points, want at most a few thousand", n)
		}
	}
}

// bandShares is each send-limit reason's share of the first band's width.
func bandShares(t *testing.T, dom string) map[string]float64 {
	t.Helper()
	band := dom[strings.Index(dom, `class="sendlim"`):]
	band = band[:strings.Index(band, "</svg>")]
	widths := map[string]float64{}
	var total float64
	for _, m := range regexp.MustCompile(`<rect class="band" data-key="([a-z_]+)" x="\d+" y="\d+" width="(\d+)"`).FindAllStringSubmatch(band, -1) {
		w, _ := strconv.ParseFloat(m[2], 64)
		widths[m[1]] += w
		total += w
	}
	if total == 0 {
		t.Fatal("the send-limit band has no rectangles")
	}
	for k := range widths {
		widths[k] /= total
	}
	return widths
}

func TestBrowserShowsThePageOffline(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, render(t, doctorPage(run(5))), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Open(t, file)
	if len(r.Console) > 0 {
		t.Errorf("console messages: %v", r.Console)
	}
	if got := bandShares(t, r.DOM); got["sndbuf"] < 0.7 {
		t.Errorf("the band is %.0f%% sndbuf, want about 80%% (%v)", got["sndbuf"]*100, got)
	}
	if !strings.Contains(r.DOM, `fill="`+ReasonColors["sndbuf"]+`"`) {
		t.Error("the sndbuf colour is not in the page")
	}
}

// Open loads a page in headless Chromium, with the network cut off where it
// can be (as root).
func Open(t *testing.T, file string) *browser.Result {
	t.Helper()
	return testenv.OpenPage(t, "file://"+file, browser.Options{Offline: os.Geteuid() == 0})
}

// BenchmarkTenMinutePage: building and writing the page of a 10-minute run
// (one flow sampled every 10 ms, two CPUs, a device).
func BenchmarkTenMinutePage(b *testing.B) {
	var size int
	for b.Loop() {
		size = len(render(b, doctorPage(run(600))))
	}
	b.ReportMetric(float64(size), "page-bytes")
}

// A flow with tcp_stage's waits gets a chart of each direction it timed,
// a line per stage.
func TestStageChartsPerDirection(t *testing.T) {
	tl := run(2)
	tl.Flows[0].StageUs = []timeline.StagePoint{{T: 0.5, Us: [6]float64{80_000, 5_000, 2, 40}}, {T: 1.5, Us: [6]float64{70_000, 5_000, 2, 40}}}
	page := string(render(t, doctorPage(tl)))
	for _, want := range []string{"where a sent byte", "mean wait (tcp_stage)", "send queue", "qdisc", "driver", "ack"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "received byte") {
		t.Error("a flow that timed no received byte gets their chart")
	}
	tl.Flows[0].StageUs = append(tl.Flows[0].StageUs, timeline.StagePoint{T: 1.5, Us: [6]float64{4: 30, 5: 9000}})
	page = string(render(t, doctorPage(tl)))
	for _, want := range []string{"where a received byte", "rx stack", "rx queue"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(string(render(t, doctorPage(run(2)))), "(tcp_stage)") {
		t.Error("a flow without tcp_stage's waits gets their chart")
	}
}

// readTimeline builds the timeline of a recording in testdata as stat does.
func readTimeline(t *testing.T, name string) *timeline.Timeline {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sum, b := analyze.NewSummary(), timeline.NewBuilder(0)
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error {
		b.Add(ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.Build(sum.Names.NetnsName)
}

// Every stage a byte waited in has a line of its own, apart from the
// others. On a fresh loopback iperf3 recording the sent bytes waited 0.4 us
// in the driver, 5 us in the send queue and 100s of us for the ACK: drawn
// stacked on a linear axis, send queue, + qdisc and + driver lay on one
// pixel row under + ack, one line seen of four.
func TestStageChartShowsEveryStage(t *testing.T) {
	tl := readTimeline(t, "iperf3-stage.trace")
	page := string(render(t, &Page{Title: "skbtrace stat", Timeline: tl}))
	var checked int
	for _, f := range tl.Flows {
		// The stages this flow's sent bytes waited in, from the data.
		waited := map[string]bool{}
		for _, p := range f.StageUs {
			for k := event.SentStages[0]; k < event.SentStages[1]; k++ {
				if p.Us[k] > 0 {
					waited[strings.ReplaceAll(event.StageNames[k], "_", " ")] = true
				}
			}
		}
		if len(waited) < 3 {
			continue
		}
		checked++
		start := strings.Index(page, fmt.Sprintf(`<div class="flow" id="flow%d">`, slices.Index(tl.Flows, f)+1))
		svg := page[start:]
		svg = svg[strings.Index(svg, "where a sent byte"):]
		svg = svg[:strings.Index(svg, "</svg>")]
		rows := map[string]float64{}
		for _, m := range regexp.MustCompile(`<path class="series" data-name="([^"]*)" d="([^"]*)"`).FindAllStringSubmatch(svg, -1) {
			ys := regexp.MustCompile(`[ML][0-9.]+ ([0-9.]+)`).FindAllStringSubmatch(m[2], -1)
			if len(ys) == 0 {
				continue
			}
			var sum float64
			for _, y := range ys {
				v, _ := strconv.ParseFloat(y[1], 64)
				sum += v
			}
			rows[m[1]] = sum / float64(len(ys))
		}
		for name := range waited {
			if _, ok := rows[name]; !ok {
				t.Errorf("flow %s waited in %s: no line of it (lines: %v)", f.Label(), name, rows)
			}
			if !strings.Contains(svg, ">"+name+"</text>") {
				t.Errorf("flow %s: %s is not in the legend", f.Label(), name)
			}
		}
		for a, ya := range rows {
			for b, yb := range rows {
				if a < b && math.Abs(ya-yb) < 8 {
					t.Errorf("flow %s: the lines of %s and %s lie %.1f px apart: one hides the other", f.Label(), a, b, math.Abs(ya-yb))
				}
			}
		}
		if !waited["qdisc"] && !strings.Contains(svg, ">qdisc: no wait</text>") {
			t.Errorf("flow %s never waited in a qdisc and its legend does not say so", f.Label())
		}
	}
	if checked == 0 {
		t.Fatal("no flow of the recording waited in three stages")
	}
}

// layout opens page in a window width pixels wide and returns what script
// (a function body returning a JSON-able value) measured once laid out.
func layout(t *testing.T, page []byte, width int, script string) string {
	t.Helper()
	probe := "<script>document.body.setAttribute(\"data-layout\", JSON.stringify((function () {" + script + "})()));</script>\n</body>"
	file := filepath.Join(t.TempDir(), "page.html")
	if err := os.WriteFile(file, bytes.Replace(page, []byte("</body>"), []byte(probe), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	r := testenv.OpenPage(t, "file://"+file, browser.Options{Width: width, Height: 900})
	m := regexp.MustCompile(`<body[^>]*\sdata-layout="([^"]*)"`).FindStringSubmatch(r.DOM)
	if m == nil {
		t.Fatalf("the measuring script did not run; chromium said:\n%s", r.Stderr)
	}
	return html.UnescapeString(m[1])
}

// overflowing lists the elements of #summary whose content is wider than
// their box (cut off, or behind a scroll bar a screen below) or that end
// past the window's right edge.
const overflowing = `
var out = {width: window.innerWidth, over: []};
var s = document.getElementById("summary");
[s].concat(Array.prototype.slice.call(s.querySelectorAll("*"))).forEach(function (e) {
  var right = e.getBoundingClientRect().right;
  if (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1 || right > window.innerWidth + 1) {
    out.over.push(e.tagName + "." + e.className + ": content " + e.scrollWidth + " px in " + e.clientWidth + ", right edge at " + Math.round(right));
  }
});
return out;`

// stat's summary (of a fresh loopback iperf3 recording, 197 columns wide)
// fits the window at 800 and 1280 pixels: its tables wrap their cells.
func TestSummaryFitsTheWindow(t *testing.T) {
	text, err := os.ReadFile("testdata/stat-summary.txt")
	if err != nil {
		t.Fatal(err)
	}
	p := &Page{Title: "skbtrace stat", Appendix: string(text), Generator: "skbtrace test"}
	page := render(t, p)
	for _, cell := range []string{"<th>send limits (share of time)</th>", "<td>app 56% ok 27% cwnd 16% pacing 1%</td>", "<td>TCP_OLD_DATA</td>"} {
		if !bytes.Contains(page, []byte(cell)) {
			t.Errorf("the summary lacks the cell %s", cell)
		}
	}
	if !bytes.Contains(page, []byte(`<p class="summary-line">(3 more sockets only changed state)</p>`)) {
		t.Error("a line between a table's rows is not a line of its own")
	}
	for _, width := range []int{800, 1280} {
		var got struct {
			Width int      `json:"width"`
			Over  []string `json:"over"`
		}
		if err := json.Unmarshal([]byte(layout(t, page, width, overflowing)), &got); err != nil {
			t.Fatal(err)
		}
		if got.Width != width {
			t.Errorf("the window is %d px wide, want %d", got.Width, width)
		}
		for _, o := range got.Over {
			t.Errorf("at %d px the summary overflows: %s", width, o)
		}
	}
}

// Copy buttons sit beside commands only, and copy the command without the
// commentary after it; prose remedies (the doctor's cpu-saturated, on a
// loopback iperf3 run) have none.
func TestCopyButtonsOnCommandsOnly(t *testing.T) {
	p := doctorPage(nil)
	p.Findings = []finding.Finding{{ID: "cpu-saturated", Severity: finding.Warning, Title: "CPU 1 is saturated (100% busy)",
		Remedy: []string{"find what runs on CPU 1: top -1, or perf top -C 1",
			"move competing work to other CPUs (taskset -pc CPUS PID, cgroup cpusets) or give the network path its own CPU",
			`ip netns exec snd sysctl -w net.ipv4.tcp_wmem="4096 16384 4194304"`},
		Confirm: []string{"mpstat -P 1 1 during the transfer (is it 100% busy throughout?), then perf top -C 1: what runs there",
			"ip netns exec rcv ss -tm src 10.0.0.2:5201: Recv-Q stays high while the flow runs",
			"ss -ti dst 10.0.0.2:5201   (rtt far above minrtt while the flow runs)",
			"top -H -p PID of the sender: is it busy elsewhere, or waiting on its own input?"}}}
	page := string(render(t, p))
	var got []string
	for _, li := range regexp.MustCompile(`<li class="(command|prose)">(.*?)</li>`).FindAllStringSubmatch(page, -1) {
		button := strings.Contains(li[2], `class="copy"`)
		if li[1] == "prose" {
			if button {
				t.Errorf("a copy button on prose: %s", li[2])
			}
			continue
		}
		m := regexp.MustCompile(`^<div class="cmd"><pre>([^<]*)</pre><button type="button" class="copy">copy</button></div>`).FindStringSubmatch(li[2])
		if m == nil {
			t.Errorf("a command without its copy button: %s", li[2])
			continue
		}
		got = append(got, html.UnescapeString(m[1]))
	}
	want := []string{`ip netns exec snd sysctl -w net.ipv4.tcp_wmem="4096 16384 4194304"`, "mpstat -P 1 1",
		"ip netns exec rcv ss -tm src 10.0.0.2:5201", "ss -ti dst 10.0.0.2:5201", "top -H -p PID"}
	if !slices.Equal(got, want) {
		t.Errorf("commands to copy:\n%q\nwant\n%q", got, want)
	}
	if n := strings.Count(page, `class="copy"`); n != len(want) {
		t.Errorf("%d copy buttons, want %d", n, len(want))
	}
	for _, note := range []string{"(rtt far above minrtt while the flow runs)", "Recv-Q stays high while the flow runs"} {
		if !strings.Contains(page, `<p class="note">`+note+`</p>`) {
			t.Errorf("the note %q is not beside its command", note)
		}
	}
}
