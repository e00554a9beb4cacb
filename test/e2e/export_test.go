package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// TestExportOfALabTrace: a fresh lab run's trace exported to Perfetto holds
// the sender's send-buffer waits as sndbuf slices, and DuckDB's per-flow
// bytes from the Parquet tables equal stat --json's.
func TestExportOfALabTrace(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	dir := t.TempDir()
	if out, err := exec.Command(binary, "lab", "run", "sndbuf-limited", "--trace-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("lab run --trace-dir: %v\n%s", err, out)
	}
	tr := filepath.Join(dir, "sndbuf-limited.trace")
	pf, pq := filepath.Join(dir, "run.json"), filepath.Join(dir, "tables")
	if out, err := exec.Command(binary, "export", tr, "--perfetto", pf, "--parquet", pq).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Ph   string  `json:"ph"`
			Tid  int     `json:"tid"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("the Perfetto export is not JSON: %v", err)
	}
	perThread := map[int]map[string]float64{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "X" {
			if perThread[e.Tid] == nil {
				perThread[e.Tid] = map[string]float64{}
			}
			perThread[e.Tid][e.Name] += e.Dur
		}
	}
	best := 0.0
	for _, reasons := range perThread {
		var total float64
		for _, d := range reasons {
			total += d
		}
		best = max(best, reasons["sndbuf"]/total)
	}
	if best < 0.5 {
		t.Errorf("no connection's slices are mostly sndbuf (best %.2f): %v", best, perThread)
	}

	statOut, err := exec.Command(binary, "stat", "-i", tr, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var stat struct {
		Connections []struct {
			Local         string  `json:"local"`
			Peer          string  `json:"peer"`
			BytesAcked    float64 `json:"bytes_acked"`
			BytesReceived float64 `json:"bytes_received"`
		} `json:"connections"`
	}
	if err := json.Unmarshal(statOut, &stat); err != nil {
		t.Fatal(err)
	}
	py := testenv.Tool(t, "python3")
	out, err := exec.Command(py, "-c", `import duckdb, json, sys
rows = duckdb.sql(f"select local, peer, bytes_acked, bytes_received from '{sys.argv[1]}/flows.parquet'").fetchall()
print(json.dumps({f"{l} {p}": [a, r] for l, p, a, r in rows}))`, pq).CombinedOutput()
	if err != nil {
		t.Fatalf("duckdb: %v\n%s", err, out)
	}
	var duck map[string][2]float64
	if err := json.Unmarshal(out, &duck); err != nil {
		t.Fatalf("duckdb said %s: %v", out, err)
	}
	if len(duck) != len(stat.Connections) || len(duck) == 0 {
		t.Errorf("duckdb has %d flows, stat %d", len(duck), len(stat.Connections))
	}
	for _, c := range stat.Connections {
		if got, ok := duck[c.Local+" "+c.Peer]; !ok || got != [2]float64{c.BytesAcked, c.BytesReceived} {
			t.Errorf("flow %s -> %s: duckdb %v bytes acked and received, stat %v and %v", c.Local, c.Peer, got, c.BytesAcked, c.BytesReceived)
		}
	}
}
