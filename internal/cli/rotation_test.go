package cli

import (
	"bytes"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/record"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

// A rotation's files, named by a pattern or listed, read as one recording:
// every event once, in order, nothing missing; one file alone reads too.
func TestParseAndStatReadARotationsFilesAsOneRecording(t *testing.T) {
	base := filepath.Join(t.TempDir(), "run.trace")
	rot, err := record.NewRotator(base, record.MinFileSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tracetest.NewWriter(rot, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendNetns(trace.Netns{Inode: 7, Name: "blue"}); err != nil {
		t.Fatal(err)
	}
	a := tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("10.0.0.2:5201"), 7)
	const n = 20000
	for i := range n {
		ev := tracetest.Sendlim(uint64(i), 1e9+uint64(i)*1e6, 1e9+uint64(i)*1e6-5e5, 0, 0x1000, a, uint8(event.SendlimCwnd), 1, 1)
		if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.AppendEnd(trace.End{NextSeq: n}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rot.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rot.Files) < 3 {
		t.Fatalf("%d files; the test wants a rotation", len(rot.Files))
	}
	var out, errs bytes.Buffer
	if code := Main([]string{"parse", "-i", base + ".*"}, nil, &out, &errs); code != 0 {
		t.Fatalf("parse of the pattern: exit %d: %s", code, errs.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := fmt.Sprintf("skbtrace: %d events read, %d printed", n, n)
	if len(lines) != n || !strings.HasPrefix(lines[n-1], fmt.Sprint(n-1)+" ") || !strings.Contains(errs.String(), want) ||
		!strings.Contains(errs.String(), fmt.Sprintf("in %d files", len(rot.Files))) || strings.Contains(errs.String(), "missing") {
		t.Errorf("%d lines, last %q; summary %q", len(lines), lines[len(lines)-1], errs.String())
	}
	out.Reset()
	errs.Reset()
	if code := Main([]string{"stat", "--json", "-i", strings.Join(rot.Files, ",")}, nil, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), `"netns_name": "blue"`) {
		t.Errorf("stat of the listed files: exit %d, %s %s", code, errs.String(), out.String()[:min(300, out.Len())])
	}
	out.Reset()
	errs.Reset()
	if code := Main([]string{"parse", "-i", rot.Files[1]}, nil, &out, &errs); code != 0 || strings.Contains(errs.String(), "missing") ||
		strings.Contains(errs.String(), "did not end") || !strings.Contains(out.String(), "action=tcp_sendlim") {
		t.Errorf("the second file alone: exit %d, %s", code, errs.String())
	}
	out.Reset()
	if code := Main([]string{"stat", "--json", "-i", rot.Files[2]}, nil, &out, &errs); code != 0 || !strings.Contains(out.String(), `"netns_name": "blue"`) {
		t.Errorf("the third file alone does not name its namespace: exit %d", code)
	}
}
