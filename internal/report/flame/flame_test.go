package flame

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/report/browser"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// evilName would end the data's script element and inject markup if the page
// did not escape it.
const evilName = `</script><img id="pwned" src="x">"&'`

func sendStack(leaf ...string) []string {
	return append([]string{"entry_SYSCALL_64", "do_syscall_64", "__x64_sys_sendto", "__sys_sendto"}, leaf...)
}

// sendProfile has tcp_sendmsg carrying 60 % of 100 samples and udp_sendmsg 25 %.
func sendProfile() Page {
	return Page{
		Title:    "send <profile> & co",
		Subtitle: "2 CPUs, 99 Hz, 1 s, 100 samples",
		Unit:     "samples",
		Stacks: []Stack{
			{Frames: sendStack("tcp_sendmsg", "tcp_sendmsg_locked", "tcp_push", "__tcp_push_pending_frames"), Value: 35},
			{Frames: sendStack("tcp_sendmsg", "tcp_sendmsg_locked", "skb_copy_datagram_from_iter"), Value: 15},
			{Frames: sendStack("tcp_sendmsg", "release_sock"), Value: 10},
			{Frames: sendStack("udp_sendmsg", "ip_make_skb"), Value: 15},
			{Frames: sendStack("udp_sendmsg", "udp_send_skb", "ip_send_skb"), Value: 10},
			{Frames: []string{"entry_SYSCALL_64", "do_syscall_64", "__x64_sys_sendto"}, Value: 1},
			{Frames: []string{"entry_SYSCALL_64", "do_syscall_64"}, Value: 1},
			{Frames: []string{"entry_SYSCALL_64"}, Value: 1},
			// Far under half a pixel wide: must not be drawn.
			{Frames: []string{"entry_SYSCALL_64", "tiny_frame"}, Value: 0.001},
			{Frames: []string{"[idle]"}, Value: 10},
			{Frames: []string{"[unknown]", evilName}, Value: 2},
		},
	}
}

// diffProfile grows tcp_sendmsg from 40 to 60 and shrinks udp_sendmsg from 50 to 25.
func diffProfile() Page {
	return Page{
		Title: "send: after vs before",
		Unit:  "ns/packet",
		Diff:  true,
		Stacks: []Stack{
			{Frames: sendStack("tcp_sendmsg", "tcp_push"), Value: 60, Base: 40},
			{Frames: sendStack("udp_sendmsg", "ip_make_skb"), Value: 25, Base: 50},
			{Frames: sendStack("sock_sendmsg_nosec"), Value: 5, Base: 5},
			{Frames: sendStack("new_function"), Value: 10},
		},
	}
}

func writePage(t testing.TB, p Page) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var dataScript = regexp.MustCompile(`(?s)<script type="application/json" id="flame-data">(.*?)</script>`)

func embeddedTree(t *testing.T, page []byte) tree {
	t.Helper()
	m := dataScript.FindSubmatch(page)
	if m == nil {
		t.Fatal("the page has no flame-data script element")
	}
	var tr tree
	if err := json.Unmarshal(m[1], &tr); err != nil {
		t.Fatalf("decoding the embedded data: %v", err)
	}
	return tr
}

// stacksOf takes the tree apart again: each node with a weight of its own is
// the leaf of a stack.
func stacksOf(tr tree) []Stack {
	var stacks []Stack
	var path []string
	for i, d := range tr.Depth {
		path = append(path[:d], tr.Names[tr.Name[i]])
		s := Stack{Value: tr.Self[i]}
		if tr.Diff {
			s.Base = tr.BaseSelf[i]
		}
		if s.Value != 0 || s.Base != 0 {
			s.Frames = slices.Clone(path[1:])
			stacks = append(stacks, s)
		}
	}
	return stacks
}

func sortStacks(stacks []Stack) {
	slices.SortFunc(stacks, func(a, b Stack) int { return slices.Compare(a.Frames, b.Frames) })
}

func TestEmbeddedDataRoundTrips(t *testing.T) {
	for name, p := range map[string]Page{"plain": sendProfile(), "diff": diffProfile()} {
		t.Run(name, func(t *testing.T) {
			tr := embeddedTree(t, writePage(t, p))
			if tr.Unit != p.Unit || tr.Diff != p.Diff {
				t.Errorf("unit %q, diff %v; want %q, %v", tr.Unit, tr.Diff, p.Unit, p.Diff)
			}
			if tr.Names[tr.Name[0]] != rootName || tr.Depth[0] != 0 {
				t.Errorf("node 0 is %q at depth %d; want the root %q", tr.Names[tr.Name[0]], tr.Depth[0], rootName)
			}
			for i := 1; i < len(tr.Depth); i++ {
				if tr.Depth[i] < 1 || tr.Depth[i] > tr.Depth[i-1]+1 {
					t.Fatalf("node %d is at depth %d after one at %d; the page needs a preorder", i, tr.Depth[i], tr.Depth[i-1])
				}
			}
			got := stacksOf(tr)
			want := slices.Clone(p.Stacks)
			sortStacks(got)
			sortStacks(want)
			if len(got) != len(want) {
				t.Fatalf("got %d stacks back, want %d:\n%v", len(got), len(want), got)
			}
			for i := range want {
				if !slices.Equal(got[i].Frames, want[i].Frames) ||
					math.Abs(got[i].Value-want[i].Value) > 1e-9 || math.Abs(got[i].Base-want[i].Base) > 1e-9 {
					t.Errorf("stack %d came back as %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// Same names under the same parent merge; siblings come in name order.
func TestSameStacksMerge(t *testing.T) {
	tr, err := buildTree(Page{Stacks: []Stack{
		{Frames: []string{"b", "b"}, Value: 4},
		{Frames: []string{"a", "b"}, Value: 1},
		{Frames: []string{"a", "b"}, Value: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range tr.Depth {
		got = append(got, fmt.Sprintf("%d:%s=%g", tr.Depth[i], tr.Names[tr.Name[i]], tr.Self[i]))
	}
	want := []string{"0:all=0", "1:a=0", "2:b=3", "1:b=0", "2:b=4"}
	if !slices.Equal(got, want) {
		t.Errorf("tree %v, want %v", got, want)
	}
}

func TestNamesCannotBreakOut(t *testing.T) {
	p := sendProfile()
	p.Title = `</title><script>alert(1)</script>`
	p.Subtitle = `<!-- "&'`
	p.Unit = `</script>`
	page := writePage(t, p)
	// The page's own two script elements are the only ones closed.
	if n := bytes.Count(page, []byte("</script>")); n != 2 {
		t.Errorf("the page closes %d script elements, want 2", n)
	}
	for _, raw := range []string{evilName, p.Title, p.Subtitle, "<img", "<!--"} {
		if bytes.Contains(page, []byte(raw)) {
			t.Errorf("the page holds %q unescaped", raw)
		}
	}
	if !bytes.Contains(page, []byte("<h1>"+html.EscapeString(p.Title)+"</h1>")) {
		t.Error("the page lacks the escaped title")
	}
	tr := embeddedTree(t, page)
	if !slices.Contains(tr.Names, evilName) || tr.Unit != p.Unit {
		t.Errorf("names %q and unit %q did not survive the embedding", tr.Names, tr.Unit)
	}
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestWriteHTMLErrors(t *testing.T) {
	if err := WriteHTML(io.Discard, Page{Title: "empty"}); err == nil || err.Error() != "writing flame graph: no stacks" {
		t.Errorf("empty page: got error %v, want \"writing flame graph: no stacks\"", err)
	}
	for _, tc := range []struct {
		name string
		page Page
		want string
	}{
		{"zero", Page{Stacks: []Stack{{Frames: []string{"a"}}}}, "writing flame graph: all stacks have a zero value"},
		{"nan", Page{Stacks: []Stack{{Frames: []string{"a"}, Value: 1}, {Frames: []string{"b"}, Value: math.NaN()}}}, "writing flame graph: stack 1: value is NaN"},
		{"negative base", Page{Diff: true, Stacks: []Stack{{Frames: []string{"a"}, Value: 1, Base: -1}}}, "writing flame graph: stack 0: base is -1"},
	} {
		if err := WriteHTML(io.Discard, tc.page); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one starting %q", tc.name, err, tc.want)
		}
	}
	if err := WriteHTML(failingWriter{}, sendProfile()); !errors.Is(err, errDiskFull) || !strings.HasPrefix(err.Error(), "writing flame graph: ") {
		t.Errorf("failing writer: got error %v, want the writer's error wrapped", err)
	}
}

// dumpDOM opens the page in headless Chromium and returns the DOM as it stands
// once the page's script has run.
func dumpDOM(t *testing.T, page []byte, fragment string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "flame.html")
	if err := os.WriteFile(file, page, 0o644); err != nil {
		t.Fatal(err)
	}
	r := testenv.OpenPage(t, "file://"+file+fragment, browser.Options{})
	if !regexp.MustCompile(`<body[^>]*\sdata-rendered="1"`).MatchString(r.DOM) {
		t.Fatalf("the page's script did not finish rendering; the DOM:\n%s\nchromium said:\n%s", r.DOM, r.Stderr)
	}
	return r.DOM
}

type frameElem struct {
	classes []string
	attrs   map[string]string
	value   float64
}

var (
	// Serialized attribute values escape their quotes, so [^"]* spans a value
	// even when the frame's name holds < or >.
	frameTag = regexp.MustCompile(`<div((?:\s+[a-z-]+="[^"]*")*)\s*>`)
	attrPair = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
)

func framesOf(t *testing.T, dom string) []frameElem {
	t.Helper()
	var frames []frameElem
	for _, m := range frameTag.FindAllStringSubmatch(dom, -1) {
		f := frameElem{attrs: map[string]string{}}
		for _, a := range attrPair.FindAllStringSubmatch(m[1], -1) {
			f.attrs[a[1]] = html.UnescapeString(a[2])
		}
		f.classes = strings.Fields(f.attrs["class"])
		if !slices.Contains(f.classes, "frame") {
			continue
		}
		v, err := strconv.ParseFloat(f.attrs["data-value"], 64)
		if err != nil {
			t.Fatalf("frame %q: data-value: %v", f.attrs["data-name"], err)
		}
		f.value = v
		frames = append(frames, f)
	}
	if len(frames) == 0 {
		t.Fatalf("no frames in the DOM:\n%s", dom)
	}
	return frames
}

func frameNamed(t *testing.T, frames []frameElem, name string) frameElem {
	t.Helper()
	for _, f := range frames {
		if f.attrs["data-name"] == name {
			return f
		}
	}
	t.Fatalf("no frame %q drawn", name)
	return frameElem{}
}

func TestBrowserDrawsAndSearches(t *testing.T) {
	t.Parallel()
	// Escaped and in capitals, the term still finds udp_sendmsg and udp_send_skb.
	dom := dumpDOM(t, writePage(t, sendProfile()), "#search=UDP%5Fsend")
	frames := framesOf(t, dom)

	var widest []string
	byWidth := slices.Clone(frames)
	slices.SortStableFunc(byWidth, func(a, b frameElem) int { return cmp.Compare(b.value, a.value) })
	for _, f := range byWidth {
		if f.attrs["data-id"] != "0" && len(widest) < 6 {
			widest = append(widest, f.attrs["data-name"])
		}
	}
	want := []string{"entry_SYSCALL_64", "do_syscall_64", "__x64_sys_sendto", "__sys_sendto", "tcp_sendmsg", "tcp_sendmsg_locked"}
	if !slices.Equal(widest, want) {
		t.Errorf("widest frames %q, want %q", widest, want)
	}
	if v := frameNamed(t, frames, "tcp_sendmsg").value; v != 60 {
		t.Errorf("tcp_sendmsg has data-value %g, want 60", v)
	}
	if v := frameNamed(t, frames, "udp_sendmsg").value; v != 25 {
		t.Errorf("udp_sendmsg has data-value %g, want 25", v)
	}

	highlighted := 0
	for _, f := range frames {
		name := f.attrs["data-name"]
		hl := slices.Contains(f.classes, "hl")
		if hl != strings.Contains(name, "udp_send") {
			t.Errorf("frame %q has classes %q", name, f.classes)
		}
		if hl {
			highlighted++
		}
		if name == "tiny_frame" {
			t.Error("tiny_frame, far under a pixel wide, is drawn")
		}
	}
	if highlighted != 2 {
		t.Errorf("%d frames highlighted, want udp_sendmsg and udp_send_skb", highlighted)
	}
	// udp_send_skb lies inside udp_sendmsg and must not count twice.
	m := regexp.MustCompile(`<span id="matched">([^<]*)</span>`).FindStringSubmatch(dom)
	if m == nil || m[1] != "matched: 25 % of total" {
		t.Errorf("the matched figure is %q, want \"matched: 25 %% of total\"", m)
	}
	frameNamed(t, frames, evilName)
	if strings.Contains(dom, "<img") {
		t.Error("a frame name injected an element")
	}
}

// interactionScript drives the page as a user would and leaves what it saw in
// the body's data-test attribute.
const interactionScript = `<script>
(function () {
  function frame(name) { return document.querySelector('.frame[data-name="' + name + '"]'); }
  function width(el) { return el.getBoundingClientRect().width; }
  var out = {};
  var tcp = frame("tcp_sendmsg");
  tcp.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: 20, clientY: 20}));
  out.tip = document.getElementById("tip").textContent;
  out.tipShown = getComputedStyle(document.getElementById("tip")).display !== "none";
  tcp.click();
  out.chartWidth = document.getElementById("chart").clientWidth;
  out.zoomedWidth = width(frame("tcp_sendmsg"));
  out.ancestorWidth = width(frame("__sys_sendto"));
  out.ancestorClass = frame("__sys_sendto").className;
  out.udpWhileZoomed = !!frame("udp_sendmsg");
  frame("all").click();
  out.udpAfterRootClick = !!frame("udp_sendmsg");
  frame("udp_sendmsg").click();
  document.getElementById("reset").click();
  out.tcpAfterReset = !!frame("tcp_sendmsg");
  document.body.setAttribute("data-test", JSON.stringify(out));
})();
</script>
</body>`

func TestBrowserZoomAndTooltip(t *testing.T) {
	t.Parallel()
	page := strings.Replace(string(writePage(t, sendProfile())), "</body>", interactionScript, 1)
	dom := dumpDOM(t, []byte(page), "")
	m := regexp.MustCompile(`data-test="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the interaction script left no result:\n%s", dom)
	}
	var got struct {
		Tip                               string
		TipShown                          bool
		ChartWidth, ZoomedWidth           float64
		AncestorWidth                     float64
		AncestorClass                     string
		UDPWhileZoomed, UDPAfterRootClick bool
		TCPAfterReset                     bool
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &got); err != nil {
		t.Fatal(err)
	}
	if want := "tcp_sendmsg\n60 samples (60 % of total)"; got.Tip != want || !got.TipShown {
		t.Errorf("tooltip %q (shown: %v), want %q", got.Tip, got.TipShown, want)
	}
	if got.ChartWidth < 100 || math.Abs(got.ZoomedWidth-got.ChartWidth) > 1.5 || math.Abs(got.AncestorWidth-got.ChartWidth) > 1.5 {
		t.Errorf("zoomed into tcp_sendmsg: it is %g px and its ancestor %g px wide in a %g px chart, want both full width",
			got.ZoomedWidth, got.AncestorWidth, got.ChartWidth)
	}
	if !strings.Contains(got.AncestorClass, "anc") {
		t.Errorf("the zoomed frame's ancestor has classes %q, want anc among them", got.AncestorClass)
	}
	if got.UDPWhileZoomed || !got.UDPAfterRootClick || !got.TCPAfterReset {
		t.Errorf("udp_sendmsg drawn while zoomed into tcp_sendmsg: %v, after clicking the root: %v; tcp_sendmsg after reset zoom: %v",
			got.UDPWhileZoomed, got.UDPAfterRootClick, got.TCPAfterReset)
	}
}

var backgroundRGB = regexp.MustCompile(`background-color:\s*rgb\((\d+),\s*(\d+),\s*(\d+)\)`)

// diffTipScript hovers over two frames of the diff page and leaves their
// tooltips in the body's data-test attribute.
const diffTipScript = `<script>
(function () {
  var tips = [];
  ["tcp_sendmsg", "new_function"].forEach(function (name) {
    var f = document.querySelector('.frame[data-name="' + name + '"]');
    f.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: 20, clientY: 20}));
    tips.push(document.getElementById("tip").textContent);
  });
  document.body.setAttribute("data-test", JSON.stringify(tips));
})();
</script>
</body>`

func TestBrowserDrawsDiff(t *testing.T) {
	t.Parallel()
	page := strings.Replace(string(writePage(t, diffProfile())), "</body>", diffTipScript, 1)
	dom := dumpDOM(t, []byte(page), "")
	frames := framesOf(t, dom)
	for _, tc := range []struct {
		name  string
		value float64
		base  string
		red   bool
	}{
		{"tcp_sendmsg", 60, "40", true},
		{"udp_sendmsg", 25, "50", false},
		{"new_function", 10, "0", true},
	} {
		f := frameNamed(t, frames, tc.name)
		if f.value != tc.value || f.attrs["data-base"] != tc.base {
			t.Errorf("%s: data-value %g, data-base %q; want %g, %q", tc.name, f.value, f.attrs["data-base"], tc.value, tc.base)
		}
		m := backgroundRGB.FindStringSubmatch(f.attrs["style"])
		if m == nil {
			t.Fatalf("%s: no background colour in style %q", tc.name, f.attrs["style"])
		}
		r, _ := strconv.Atoi(m[1])
		b, _ := strconv.Atoi(m[3])
		if grew := r > b; grew != tc.red {
			t.Errorf("%s (%g, was %s) is coloured rgb(%s, %s, %s)", tc.name, tc.value, tc.base, m[1], m[2], m[3])
		}
	}

	m := regexp.MustCompile(`data-test="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the hovering script left no result:\n%s", dom)
	}
	var tips []string
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &tips); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tcp_sendmsg\nthis:   60 ns/packet (60 % of total)\nbase:   40 ns/packet (42.1 % of total)\nchange: +20 ns/packet (+50 %)",
		"new_function\nthis:   10 ns/packet (10 % of total)\nbase:   0 ns/packet (0 % of total)\nchange: +10 ns/packet (new)",
	}
	if !slices.Equal(tips, want) {
		t.Errorf("tooltips\n%q\nwant\n%q", tips, want)
	}
}

// The page keeps to the frames one can see: none under half a pixel wide.
func TestBrowserDrawsBigProfile(t *testing.T) {
	t.Parallel()
	frames := framesOf(t, dumpDOM(t, writePage(t, bigProfile()), ""))
	width := regexp.MustCompile(`width:\s*([0-9.]+)px`)
	for _, f := range frames {
		m := width.FindStringSubmatch(f.attrs["style"])
		if m == nil {
			t.Fatalf("frame %q: no width in style %q", f.attrs["data-name"], f.attrs["style"])
		}
		if w, _ := strconv.ParseFloat(m[1], 64); w < 0.5 {
			t.Fatalf("frame %q is drawn %g px wide", f.attrs["data-name"], w)
		}
	}
	// 41 rows of 1,200 px hold at most 41 × 2,400 frames of half a pixel; the
	// tree has 700,000.
	if len(frames) > 41*2400 {
		t.Errorf("%d frames drawn", len(frames))
	}
}

// bigProfile has 20,000 distinct stacks 40 frames deep, picked at random from
// eight functions per level: they share little beyond the first levels, which
// makes a tree of some 700,000 nodes, a worst case for the page's size.
func bigProfile() Page {
	rng := rand.New(rand.NewPCG(1, 2))
	const depth, fanout = 40, 8
	var vocabulary [depth][fanout]string
	for d := range vocabulary {
		for k := range vocabulary[d] {
			vocabulary[d][k] = fmt.Sprintf("kernel_function_%d_%d", d, k)
		}
	}
	p := Page{Title: "big", Unit: "samples"}
	for range 20000 {
		frames := make([]string, depth)
		for d := range frames {
			frames[d] = vocabulary[d][rng.IntN(fanout)]
		}
		p.Stacks = append(p.Stacks, Stack{Frames: frames, Value: float64(1 + rng.IntN(100))})
	}
	return p
}

func BenchmarkWriteHTML(b *testing.B) {
	p := bigProfile()
	var page bytes.Buffer
	for b.Loop() {
		page.Reset()
		if err := WriteHTML(&page, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(page.Len()), "page-bytes")
}
