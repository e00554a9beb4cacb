package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

var update = flag.Bool("update", false, "rewrite the fixture traces and golden outputs in testdata/")

// fixture is a small recording with everything a reader must handle: both
// address families, out-of-order arrival, a sequence gap with its loss
// record, a named namespace and the end record.
func fixture(t *testing.T, o trace.ByteOrder) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	const netns = 4026531840
	srv := tracetest.Addrs(netip.MustParseAddrPort("127.0.0.1:5201"), netip.MustParseAddrPort("0.0.0.0:0"), netns)
	cli := tracetest.Addrs(netip.MustParseAddrPort("127.0.0.1:43545"), netip.MustParseAddrPort("127.0.0.1:5201"), netns)
	v6 := tracetest.Addrs(netip.MustParseAddrPort("[::1]:43546"), netip.MustParseAddrPort("[::1]:5201"), netns)
	conn, lim := uint16(event.TypeTCPConn), uint16(event.TypeTCPSendlim)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.AppendNetns(trace.Netns{Inode: netns, Name: "lab-sender"}))
	must(w.Event(conn, tracetest.Conn(0, 1_000, 0, 0xffff88003aca5980, srv, 7, 10, 100, "iperf3")))
	must(w.Event(conn, tracetest.Conn(2, 3_000, 1, 0xffff88003cea0a40, cli, 2, 1, 0, "")))
	must(w.Event(conn, tracetest.Conn(1, 2_000, 0, 0xffff88003cea0a40, cli, 7, 2, 101, "iperf3 client")))
	must(w.Flush())
	must(w.Event(conn, tracetest.Conn(3, 4_000, 1, 0xffff88003cea1000, v6, 2, 1, 0, "")))
	must(w.Event(lim, tracetest.Sendlim(4, 1_000_004_000, 5_000, 1, 0xffff88003cea0a40, cli, uint8(event.SendlimOK), 9386, 12)))
	must(w.Event(lim, tracetest.Sendlim(5, 1_500_000_000, 1_000_004_000, 0, 0xffff88003cea0a40, cli, uint8(event.SendlimCwnd), 310, 3100)))
	must(w.AppendLoss(trace.Loss{Family: 1, CPU: 1, Count: 1, BootNs: 1_600_000_000}))
	must(w.Event(lim, tracetest.Sendlim(7, 2_000_000_000, 1_600_000_000, 1, 0xffff88003cea0a40, cli, uint8(event.SendlimSndbuf), 77, 8)))
	must(w.AppendEnd(trace.End{NextSeq: 8, BootNs: 2_000_000_001}))
	must(w.Flush())
	return buf.Bytes()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestParseFixturesBothByteOrders(t *testing.T) {
	for _, c := range []struct {
		file  string
		order trace.ByteOrder
	}{{"fixture-le.trace", binary.LittleEndian}, {"fixture-be.trace", binary.BigEndian}} {
		data := fixture(t, c.order)
		golden(t, c.file, data) // the committed files are what readers of older versions must keep reading
		for _, asJSON := range []bool{false, true} {
			var out, errs bytes.Buffer
			if err := parseTrace(bytes.NewReader(data), &out, &errs, &event.Filter{}, asJSON); err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			name := "fixture.txt"
			if asJSON {
				name = "fixture.jsonl"
			}
			golden(t, name, out.Bytes())
			summary := errs.String()
			for _, want := range []string{"7 events read, 7 printed", "lost 1", "1 sequence number missing in 1 gap"} {
				if !strings.Contains(summary, want) {
					t.Errorf("%s summary %q lacks %q", c.file, summary, want)
				}
			}
		}
	}
}

func TestParseFilters(t *testing.T) {
	data := fixture(t, binary.LittleEndian)
	cases := []struct {
		filter event.Filter
		want   int
	}{
		{event.Filter{Port: 43545}, 5},
		{event.Filter{Addr: netip.MustParseAddr("::1")}, 1},
		{event.Filter{NetnsName: "lab-sender"}, 7},
		{event.Filter{Netns: 4026531840, HasNetns: true, Port: 5201}, 7},
	}
	for _, c := range cases {
		var out, errs bytes.Buffer
		if err := parseTrace(bytes.NewReader(data), &out, &errs, &c.filter, false); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out.String(), "\n"); got != c.want {
			t.Errorf("filter %+v printed %d lines, want %d:\n%s", c.filter, got, c.want, out.String())
		}
	}
}

func TestParseDamagedTracePrintsGoodEventsThenFails(t *testing.T) {
	data := fixture(t, binary.LittleEndian)
	bad := bytes.Clone(data)
	bad[len(bad)-5] ^= 0x40 // inside the second block
	var out, errs bytes.Buffer
	err := parseTrace(bytes.NewReader(bad), &out, &errs, &event.Filter{}, false)
	if err == nil || !strings.Contains(err.Error(), "checksum") || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("err %v, want a checksum error with its offset", err)
	}
	if got := strings.Count(out.String(), "\n"); got != 3 {
		t.Fatalf("printed %d events before the damage, want the first block's 3", got)
	}

	var out2, errs2 bytes.Buffer
	err = parseTrace(bytes.NewReader(data[:len(data)-7]), &out2, &errs2, &event.Filter{}, false)
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("err %v, want truncated", err)
	}
	if !strings.Contains(errs2.String(), "did not end normally") {
		t.Fatalf("summary %q does not warn about the missing end record", errs2.String())
	}
}

func TestMainExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.trace")
	if err := os.WriteFile(good, fixture(t, binary.LittleEndian), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.trace")
	if err := os.WriteFile(garbage, []byte("this is not a trace at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"parse", "-i", good}, 0, ""},
		{[]string{"parse", "-i", garbage}, 1, garbage + ` is text (it starts "this is not a trace at a..."), not a skbtrace trace`},
		{[]string{"parse", "-i", filepath.Join(dir, "missing")}, 1, "opening the trace"},
		{[]string{"parse", "--no-such-flag"}, 2, "unknown flag"},
		{[]string{"parse", good, "--filter-port", "70000"}, 2, `"70000" is not a port (1-65535)`},
		{[]string{"parse", good, "--filter-port", "0"}, 2, `"0" is not a port`},
		{[]string{"parse", good, "--filter-netns", "nosuch"}, 1, "--filter-netns nosuch: the trace names no such namespace (it names lab-sender)"},
		{[]string{"pcap", "-", "--mtu", "1"}, 2, "--mtu 1 is not an MTU (68-65536)"},
		{[]string{"parse", good}, 0, ""},
		{[]string{"parse", good, "-i", good}, 2, "as arguments or with -i, not both"},
		{[]string{"parse", dir}, 1, "opening the trace " + dir + ": is a directory"},
		{[]string{"stat", dir}, 1, "is a directory"},
		{[]string{"export", dir, "--perfetto", filepath.Join(dir, "x.json")}, 1, "is a directory"},
		{[]string{"export", "-i", good, "--perfetto", filepath.Join(dir, "x.json")}, 0, ""},
		{[]string{"export", good, "--parquet", "-"}, 2, "--parquet takes a directory"},
		{[]string{"pcap", dir}, 1, "opening the capture " + dir + ": is a directory"},
		{[]string{"pcap", dir, "-i", dir}, 2, "not both"},
		{[]string{"compare", dir, good}, 1, "opening the run " + dir + ": is a directory"},
		{[]string{"compare", "-", "-"}, 2, "not both"},
		{[]string{"doctor", "--trace", "-"}, 2, "--trace, the report (-o) all go to standard output"},
		{[]string{"nosuchcommand"}, 2, "unknown command"},
		{[]string{"parse", "-i", good, "--filter-addr", "not-an-ip"}, 2, "not an IP address"},
		{[]string{"record", "-d", "soon"}, 2, "not a number of seconds"},
		{[]string{"record", "--ring-size", "1000"}, 2, "power of two"},
		{[]string{"record", "-e", "nosuchfamily"}, 2, "unknown event family"},
		{[]string{"record", "--max-files", "3"}, 2, "--max-files needs --max-size"},
		{[]string{"record", "--trigger", "srtt>fast"}, 2, "srtt> wants a positive duration"},
		{[]string{"record", "--trigger", "bogus"}, 2, "unknown trigger"},
		{[]string{"record", "--pre", "5s"}, 2, "--pre goes with --trigger"},
		{[]string{"record", "--trigger", "rto", "--ring", "10K"}, 2, "below 1M"},
		{[]string{"record", "--trigger", "rto", "--trigger-limit", "0"}, 2, "at least one window"},
		{[]string{"record", "--max-size", "100K"}, 2, "below 1M"},
		{[]string{"record", "--max-size", "lots"}, 2, "is not a size"},
		{[]string{"record", "--max-size", "10M", "-o", "-"}, 2, "not -"},
		{[]string{"parse", "-i", good + ",-"}, 2, "read alone"},
		{[]string{"parse", "-i", filepath.Join(dir, "nothing.*")}, 1, "no file matches"},
		{[]string{"parse", "-i", good + "," + garbage}, 1, garbage + " is text"},
		{[]string{"stat", "-i", good + "," + garbage}, 1, garbage + " is text"},
		{[]string{"record", "-F", "tcp port"}, 2, "-F: "},
		{[]string{"record", "-F", "ether host 1:2:3:4:5:6"}, 2, "ether"},
		{[]string{"record", "-F", "host example.com"}, 2, "example.com"},
		{[]string{"live", "-F", "tcp and (port 80"}, 2, "-F: "},
		{[]string{"record", "--cpu", "3-1"}, 2, "--cpu: \"3-1\" is not a CPU list"},
		{[]string{"record", "--cpu", "5000"}, 2, "--cpu: CPU 5000 is beyond"},
		{[]string{"record", "--context", "irq"}, 2, "--context: \"irq\" is not a context"},
	}
	for _, c := range cases {
		var out, errs bytes.Buffer
		code := Main(c.args, strings.NewReader(""), &out, &errs)
		// A file that is not a trace gets no summary.
		if c.args[0] == "stat" && c.code != 0 && out.Len() > 0 {
			t.Errorf("%v: printed a summary: %q", c.args, out.String())
		}
		if c.code == 2 {
			hint := "run 'skbtrace " + c.args[0] + " --help' for usage"
			if c.args[0] == "nosuchcommand" {
				hint = "run 'skbtrace --help' for usage"
			}
			if !strings.HasSuffix(errs.String(), hint+"\n") || strings.Count(strings.TrimSpace(strings.Replace(errs.String(), hint, "", 1)), "\n") != 0 {
				t.Errorf("%v: a usage error takes one line and the hint %q: %q", c.args, hint, errs.String())
			}
		}
		if code != c.code || !strings.Contains(errs.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, code, errs.String(), c.code, c.msg)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]string{"5": "5s", "0.5": "500ms", "5s": "5s", "2m": "2m0s"} {
		d, err := parseDuration(in)
		if err != nil || d.String() != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	for _, bad := range []string{"-1", "x", "5 s"} {
		if _, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) accepted", bad)
		}
	}
}

// A flight recorder's trace prints its windows where they begin and each
// trigger before the event that fired it, as blkparse prints notify records.
func TestParsePrintsFlightWindowsAndTriggersInline(t *testing.T) {
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, binary.LittleEndian)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	cli := tracetest.Addrs(netip.MustParseAddrPort("127.0.0.1:43545"), netip.MustParseAddrPort("127.0.0.1:5201"), 4026531840)
	lim := uint16(event.TypeTCPSendlim)
	sendlim := func(seq uint64) {
		ts := 1_000_000_000 * (seq + 1)
		must(w.Event(lim, tracetest.Sendlim(seq, ts, ts-1000, 0, 0xa, cli, uint8(event.SendlimCwnd), 3, 3)))
	}
	must(w.AppendResume(trace.Resume{FirstSeq: 0, Cause: trace.ResumeWindow}))
	sendlim(0)
	must(w.AppendTrigger(trace.Trigger{Seq: 1, TimeNs: 1_700_000_002_000_000_000, Expr: "cwnd<4", What: "tcp_sendlim cwnd=3"}))
	sendlim(1)
	sendlim(2)
	must(w.Flush())
	must(w.AppendResume(trace.Resume{FirstSeq: 10, Cause: trace.ResumeWindow}))
	must(w.AppendTrigger(trace.Trigger{Seq: 11, TimeNs: 1_700_000_012_000_000_000, Suppressed: 4, Expr: "cwnd<4", What: "tcp_sendlim cwnd=3"}))
	sendlim(10)
	sendlim(11)
	must(w.AppendEnd(trace.End{NextSeq: 12}))
	must(w.Flush())

	var out, errs bytes.Buffer
	if err := parseTrace(bytes.NewReader(buf.Bytes()), &out, &errs, &event.Filter{}, false); err != nil {
		t.Fatalf("%v: %s", err, errs.String())
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, strings.Fields(line)[0]+" "+strings.Fields(line)[1])
	}
	want := []string{"# flight", "0 1700000001.000000000", "# trigger", "1 1700000002.000000000", "2 1700000003.000000000",
		"# flight", "10 1700000011.000000000", "# trigger", "11 1700000012.000000000"}
	if !slices.Equal(got, want) {
		t.Fatalf("lines begin %q, want %q:\n%s", got, want, out.String())
	}
	for _, s := range []string{"# flight window 2 begins: the time since the previous window was not recorded",
		"# trigger cwnd<4 fired on seq 11 at 1700000012.000000000: tcp_sendlim cwnd=3 (4 firings before it opened no window)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	out.Reset()
	if err := parseTrace(bytes.NewReader(buf.Bytes()), &out, &errs, &event.Filter{}, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 9 || lines[0] != `{"record":"flight_window","window":1}` || !strings.HasPrefix(lines[2], `{"record":"trigger","trigger":"cwnd<4","seq":1,`) {
		t.Fatalf("JSON lines:\n%s", out.String())
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Errorf("not JSON: %s", l)
		}
	}
}
