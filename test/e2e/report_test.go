package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/report/browser"
	"github.com/skbtrace/skbtrace/internal/report/htmlreport"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// openOffline loads a page in headless Chromium with no network.
func openOffline(t *testing.T, file string) *browser.Result {
	t.Helper()
	r := testenv.OpenPage(t, "file://"+file, browser.Options{Offline: true})
	if len(r.Console) > 0 {
		t.Errorf("%s: console messages:\n%s", filepath.Base(file), strings.Join(r.Console, "\n"))
	}
	return r
}

// firstFinding is the id of the first finding in a doctor page.
func firstFinding(dom string) string {
	m := regexp.MustCompile(`<article class="finding (warning|critical)" data-id="([a-z-]+)"`).FindStringSubmatch(dom)
	if m == nil {
		return ""
	}
	return m[2]
}

// bandShare is a reason's share of the first flow's send-limit band.
func bandShare(dom, reason string) float64 {
	i := strings.Index(dom, `class="sendlim"`)
	if i < 0 {
		return 0
	}
	band := dom[i:]
	band = band[:strings.Index(band, "</svg>")]
	var mine, total float64
	for _, m := range regexp.MustCompile(`data-key="([a-z_]+)" x="\d+" y="\d+" width="(\d+)"`).FindAllStringSubmatch(band, -1) {
		w, _ := strconv.ParseFloat(m[2], 64)
		total += w
		if m[1] == reason {
			mine += w
		}
	}
	if total == 0 {
		return 0
	}
	return mine / total
}

// TestDoctorPagesOfLabRuns: the doctor's page of three lab faults, opened
// offline in Chromium, lists the expected finding first and draws the
// send-buffer wait as the sndbuf colour.
func TestDoctorPagesOfLabRuns(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "nft")
	dir := t.TempDir()
	out, err := exec.Command(binary, "lab", "run", "sndbuf-limited", "nagle-delay", "packet-loss", "--doctor", "--html-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("skbtrace lab run --html-dir: %v\n%s", err, out)
	}
	for _, name := range []string{"sndbuf-limited", "nagle-delay", "packet-loss"} {
		file := filepath.Join(dir, name+".html")
		page, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := openOffline(t, file)
		if got := firstFinding(r.DOM); got != name {
			t.Errorf("%s: the page's first finding is %q", name, got)
		}
		for _, section := range []string{`id="flows"`, `id="cpus"`, `id="devices"`, `id="settings"`, `class="sendlim"`} {
			if !strings.Contains(r.DOM, section) {
				t.Errorf("%s: the page has no %s", name, section)
			}
		}
		if name == "sndbuf-limited" {
			if share := bandShare(r.DOM, "sndbuf"); share < 0.5 {
				t.Errorf("the sndbuf run's send-limit band is %.0f%% the sndbuf colour, want most of it", share*100)
			}
		}
		t.Logf("%s: %d bytes, sndbuf %.0f%% of the band, first finding %s", name, len(page), bandShare(r.DOM, "sndbuf")*100, firstFinding(r.DOM))
	}
}

// TestStatPageOfDamagedTrace: stat --html of a whole trace and of one cut
// short: the cut one fails and writes no page, unless --partial accepts it;
// then its page draws the flow read and says where the damage is.
func TestStatPageOfDamagedTrace(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	addr := loopbackServer(t)
	dir := t.TempDir()
	tr := filepath.Join(dir, "run.trace")
	out, err := exec.Command(binary, "doctor", "--trace", tr, "-o", filepath.Join(dir, "doctor.txt"), "--",
		binary, "load", "client", addr, "-d", "2", "--sndbuf", "16384").CombinedOutput()
	if err != nil {
		t.Fatalf("skbtrace doctor --trace: %v\n%s", err, out)
	}
	whole := filepath.Join(dir, "whole.html")
	if out, err := exec.Command(binary, "stat", "-i", tr, "--html", whole).CombinedOutput(); err != nil {
		t.Fatalf("skbtrace stat --html: %v\n%s", err, out)
	}
	r := openOffline(t, whole)
	if share := bandShare(r.DOM, "sndbuf"); share < 0.5 {
		t.Errorf("a 16 KB send buffer's band is %.0f%% sndbuf, want most of it", share*100)
	}
	data, err := os.ReadFile(tr)
	if err != nil {
		t.Fatal(err)
	}
	// Cut two thirds into the events, wherever they begin: the host's
	// settings before them grow with its namespaces and devices.
	first := firstEventOffset(t, data)
	cut := filepath.Join(dir, "cut.trace")
	if err := os.WriteFile(cut, data[:first+(int64(len(data))-first)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(dir, "damaged.html")
	out, err = exec.Command(binary, "stat", "-i", cut, "--html", damaged).CombinedOutput()
	if _, serr := os.Stat(damaged); err == nil || serr == nil {
		t.Errorf("stat of a cut trace without --partial: exit error %v, page written: %v; want a failure and no page:\n%s", err, serr == nil, out)
	}
	out, err = exec.Command(binary, "stat", "-i", cut, "--html", damaged, "--partial").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "warning: ") {
		t.Errorf("stat --partial of a cut trace: %v, want exit 0 and a warning:\n%s", err, out)
	}
	r = openOffline(t, damaged)
	if !strings.Contains(r.DOM, `id="damage"`) || !strings.Contains(r.DOM, "offset") {
		t.Errorf("the damaged trace's page does not say where the damage is; stat said:\n%s", out)
	}
	if !strings.Contains(r.DOM, `class="sendlim"`) {
		t.Error("the damaged trace's page does not draw the flow read before the damage")
	}
	if !strings.Contains(r.DOM, htmlreport.ReasonColors["sndbuf"]) {
		t.Error("the sndbuf colour is missing from the damaged trace's page")
	}
}

// firstEventOffset is where a trace's first kernel event record starts.
func firstEventOffset(t *testing.T, data []byte) int64 {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("no kernel event in the trace: %v", err)
		}
		if rec.Type <= 0xff {
			return rec.Offset
		}
	}
}
