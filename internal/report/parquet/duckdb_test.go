package parquet

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// labTrace is `skbtrace lab run sndbuf-limited --trace-dir DIR`'s recording:
// an iperf3 sender held by a small send buffer, and its receiver.
const labTrace = "testdata/sndbuf-limited.trace"

// duckdbQueries reads the exports under the root directory argv[1]
// (one directory per host) and prints the answers as one JSON object.
const duckdbQueries = `
import json, sys
import duckdb
root = sys.argv[1]
con = duckdb.connect()
def q(sql):
    return [list(r) for r in con.execute(sql).fetchall()]
print(json.dumps({
    "version": duckdb.__version__,
    "flows": q(f"SELECT local, peer, bytes FROM '{root}/alpha/flows.parquet'"),
    "hosts": q(f"SELECT host, count(*), sum(bytes) FROM read_parquet('{root}/*/flows.parquet') GROUP BY host ORDER BY host"),
    "sendlim": q(f"SELECT host, count(*) FROM read_parquet('{root}/*/tcp_sendlim.parquet') GROUP BY host ORDER BY host"),
    "start": q(f"SELECT DISTINCT epoch_ns(recording_start)::VARCHAR FROM read_parquet('{root}/*/*.parquet', union_by_name = true)"),
    "series": q(f"""
        SELECT f.local, f.peer, f.bytes_acked, sum(s.bytes_acked), f.limit_share.sndbuf,
               sum(s.limit_ns.sndbuf) / nullif(sum(s.limit_ns.ok + s.limit_ns.cwnd + s.limit_ns.swnd + s.limit_ns.nagle
                   + s.limit_ns.pacing + s.limit_ns.tsq + s.limit_ns.sndbuf + s.limit_ns.app + s.limit_ns.cork
                   + s.limit_ns.xmit_fail + s.limit_ns.rto), 0)
        FROM '{root}/alpha/flows.parquet' f JOIN '{root}/alpha/flow_series.parquet' s USING (host, sock, local, peer)
        GROUP BY ALL ORDER BY f.local"""),
}))
`

// duckdbPython is a python3 that imports duckdb, installed with pip when
// missing. Without one the test is skipped, except in CI, where it fails.
func duckdbPython(t *testing.T) string {
	t.Helper()
	py := testenv.Tool(t, "python3")
	if exec.Command(py, "-c", "import duckdb").Run() == nil {
		return py
	}
	if out, err := exec.Command(py, "-m", "pip", "install", "--quiet", "duckdb").CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, "installing duckdb: %v\n%s", err, out)
	}
	if out, err := exec.Command(py, "-c", "import duckdb").CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, "importing duckdb after installing it: %v\n%s", err, out)
	}
	return py
}

// TestDuckDBReadsLabExport exports the lab trace as two hosts' would be and
// queries them with DuckDB: per-flow bytes are stat --json's, and the hosts
// read as one table.
func TestDuckDBReadsLabExport(t *testing.T) {
	py := duckdbPython(t)
	data, err := os.ReadFile(labTrace)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	for _, host := range []string{"alpha", "beta"} {
		// The same recording as if made on another host.
		if _, rerr, cerr := exportAs(t, data, filepath.Join(root, host), host); rerr != nil || cerr != nil {
			t.Fatalf("%s: replay: %v, close: %v", host, rerr, cerr)
		}
	}

	// What `skbtrace stat --json` prints for the trace.
	statView, sum := statOf(t, data)
	var stat bytes.Buffer
	if err := report.WriteStatJSON(&stat, statView); err != nil {
		t.Fatal(err)
	}
	var view report.StatView
	if err := json.Unmarshal(stat.Bytes(), &view); err != nil {
		t.Fatal(err)
	}
	var want [][3]any
	var total float64
	for _, c := range view.Connections {
		var b float64
		if n := c.Bytes(); n != nil {
			b = float64(*n)
		}
		want = append(want, [3]any{c.Local, c.Peer, b})
		total += b
	}
	if len(want) == 0 || total == 0 {
		t.Fatalf("the lab trace has no connection that moved bytes: %s", stat.Bytes())
	}

	cmd := exec.Command(py, "-c", duckdbQueries, root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, stderr.Bytes())
	}
	var got struct {
		Version                       string
		Flows, Hosts, Sendlim, Series [][]any
		Start                         [][]string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("duckdb's answer %s: %v", out, err)
	}
	t.Logf("duckdb %s", got.Version)

	var flows [][3]any
	for _, r := range got.Flows {
		flows = append(flows, [3]any{r[0], r[1], r[2]})
	}
	byLocal := func(a, b [3]any) int {
		return strings.Compare(a[0].(string)+a[1].(string), b[0].(string)+b[1].(string))
	}
	slices.SortFunc(flows, byLocal)
	slices.SortFunc(want, byLocal)
	if !slices.Equal(flows, want) {
		t.Errorf("duckdb's flows %v, stat --json's %v", flows, want)
	}

	wantHosts := [][]any{{"alpha", float64(len(want)), total}, {"beta", float64(len(want)), total}}
	if !jsonEqual(t, got.Hosts, wantHosts) {
		t.Errorf("flows per host %v, want %v", got.Hosts, wantHosts)
	}
	wantLim := float64(sum.ByType[event.TypeTCPSendlim])
	if wantSendlim := [][]any{{"alpha", wantLim}, {"beta", wantLim}}; wantLim == 0 || !jsonEqual(t, got.Sendlim, wantSendlim) {
		t.Errorf("tcp_sendlim rows per host %v, want %v", got.Sendlim, wantSendlim)
	}
	if len(got.Start) != 1 || got.Start[0][0] != strconv.FormatInt(sum.Header.WallAnchorNs, 10) {
		t.Errorf("recording_start %v, want the header's %d", got.Start, sum.Header.WallAnchorNs)
	}

	// Each flow's series add up to its row in flows.
	if len(got.Series) != len(want) {
		t.Fatalf("series of %d flows, want %d: %v", len(got.Series), len(want), got.Series)
	}
	for _, s := range got.Series {
		acked, summed := s[2].(float64), s[3].(float64)
		if !near(acked, summed) {
			t.Errorf("flow %v -> %v: %v bytes acked in flows, %v over its series", s[0], s[1], acked, summed)
		}
		if s[5] != nil && !near(s[4].(float64), s[5].(float64)) {
			t.Errorf("flow %v -> %v: sndbuf share %v in flows, %v over its series", s[0], s[1], s[4], s[5])
		}
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}
