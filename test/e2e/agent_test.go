package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// TestDoctorPeerNamesReceiverFaults: the doctor in the sender's namespace
// sees none of the receiver's sockets; joined with the agent's evidence
// from the receiver's namespace it names the receiver-side faults (a small
// receive buffer, GRO blocked by the sender's outer headers).
func TestDoctorPeerNamesReceiverFaults(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	out, err := exec.Command(binary, "lab", "run", "rwnd-limited", "gro-blocked", "--doctor", "--with-agent", "--json").Output()
	if err != nil {
		t.Fatalf("skbtrace lab run --doctor --with-agent: %v\n%s", err, out)
	}
	var reports []struct {
		Name   string `json:"name"`
		Doctor struct {
			Agrees   bool `json:"agrees"`
			Findings []struct {
				ID       string   `json:"id"`
				Scope    string   `json:"scope"`
				Evidence []string `json:"evidence"`
			} `json:"findings"`
			Evidence struct {
				Namespaces []struct {
					Name string `json:"name"`
				} `json:"namespaces"`
				Peers []struct {
					Flows int `json:"flows"`
				} `json:"peers"`
			} `json:"evidence"`
		} `json:"doctor"`
	}
	if err := json.Unmarshal(out, &reports); err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		d := r.Doctor
		var names []string
		for _, ns := range d.Evidence.Namespaces {
			names = append(names, ns.Name)
		}
		if len(d.Evidence.Peers) != 1 || d.Evidence.Peers[0].Flows == 0 {
			t.Errorf("%s: the agent's evidence did not join (peers %+v)", r.Name, d.Evidence.Peers)
		}
		if len(names) != 2 || !strings.HasPrefix(names[1], "peer/") {
			t.Errorf("%s: namespaces %v, want the sender's and the peer's", r.Name, names)
		}
		if !d.Agrees || len(d.Findings) == 0 {
			t.Errorf("%s: the doctor's top finding is not the expected one", r.Name)
			continue
		}
		// The receiver's side is known only from the agent.
		if top := d.Findings[0]; !strings.Contains(top.Scope+strings.Join(top.Evidence, " "), "peer/") {
			t.Errorf("%s: %s is not judged from the peer's evidence: %s; %v", r.Name, top.ID, top.Scope, top.Evidence)
		}
	}
}

// TestDoctorPeerDownFailsBeforeObserving: an unreachable peer ends the
// doctor before it observes, and earlier reports stay.
func TestDoctorPeerDownFailsBeforeObserving(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	if err := os.WriteFile(report, []byte("earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "doctor", "-d", "1", "--json", "-o", report, "--peer", fmt.Sprintf("http://127.0.0.1:%d", freePort(t))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot be reached") {
		t.Fatalf("doctor with its peer down: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(report); err != nil || string(b) != "earlier\n" {
		t.Errorf("the earlier report was replaced: %q, %v", b, err)
	}
}

// startAgent runs `skbtrace agent` watching one namespace and waits until
// it answers.
func startAgent(t *testing.T, netns, tokenFile string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binary, "agent", "--listen", addr, "--netns", netns, "--token-file", tokenFile, "--open-metrics", "--window", "2m")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	go io.Copy(io.Discard, stderr)
	waitListening(t, addr)
	return addr
}

// TestPrometheusScrapesTwoAgents: Prometheus (the distribution's) scrapes an
// agent per namespace of a lab pair while a flow is held by a 16 KB send
// buffer; PromQL gives that flow's sndbuf share of the sender's time.
func TestPrometheusScrapesTwoAgents(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	prom := testenv.Tool(t, "prometheus")
	pair := newPair(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("e2e-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agents := []string{startAgent(t, pair.Sender.Name, tokenFile), startAgent(t, pair.Receiver.Name, tokenFile)}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: skbtrace\n    static_configs:\n      - targets: ['%s', '%s']\n", agents[0], agents[1])
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	promLog := &syncBuffer{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	go collectLines(stderr, promLog)
	waitListening(t, promAddr)

	addr := loadServer(t, pair)
	loadClient(t, pair, addr, "-d", "8", "--sndbuf", "16384", "--cc", "cubic")
	query := `sum by (local, peer) (increase(skbtrace_flow_send_limit_seconds_total{reason="sndbuf"}[20s])) / ` +
		`sum by (local, peer) (increase(skbtrace_flow_send_limit_seconds_total[20s]))`
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got = promQuery(t, promAddr, query)
		if len(got) > 0 {
			break
		}
		time.Sleep(time.Second)
	}
	var share float64
	var flows []string
	for flow, v := range got {
		flows = append(flows, fmt.Sprintf("%s=%.2f", flow, v))
		if strings.HasPrefix(flow, lab.SenderAddr.Addr().String()+":") {
			share = max(share, v)
		}
	}
	if share < 0.5 {
		t.Errorf("PromQL: the send-buffer-bound flow's sndbuf share is %.2f, want most of its time; series: %v\nprometheus said:\n%s", share, flows, promLog.String())
	}
	up := promQuery(t, promAddr, `up{job="skbtrace"}`)
	if len(up) != 2 {
		t.Errorf("prometheus scraped %d agents, want 2: %v", len(up), up)
	}
	t.Logf("sndbuf share %.2f; series %v", share, flows)

	// The sender's agent serves its recent trace to the token only; stat reads it.
	get := func(auth string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, "http://"+agents[0]+"/v1/trace?since=1m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/trace without the token: %s", resp.Status)
	}
	resp := get("Bearer e2e-token")
	tr := filepath.Join(dir, "agent.trace")
	f, err := os.Create(tr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(f, resp.Body)
	resp.Body.Close()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("saving the agent's trace: %v", err)
	}
	out, err := exec.Command(binary, "stat", "-i", tr, "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), lab.SenderAddr.Addr().String()) {
		t.Errorf("stat of the agent's trace: %v\n%.2000s", err, out)
	}
}

// promQuery runs an instant query and returns each series' value, keyed by
// "local->peer" (or its instance).
func promQuery(t *testing.T, addr, q string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("querying prometheus: %v", err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("prometheus query %q: %v %s", q, err, r.Error)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var v float64
		if _, err := fmt.Sscan(fmt.Sprint(s.Value[1]), &v); err != nil {
			t.Fatalf("prometheus query %q: value %v: %v", q, s.Value[1], err)
		}
		key := s.Metric["local"] + "->" + s.Metric["peer"]
		if s.Metric["local"] == "" {
			key = s.Metric["instance"]
		}
		out[key] = v
	}
	return out
}

// TestAgentFollowsNamespacesThatComeAndGo: an agent watching every
// namespace picks up one created after it started, names its flows in the
// evidence, and keeps serving once it is deleted.
func TestAgentFollowsNamespacesThatComeAndGo(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(binary, "agent", "--listen", addr, "--window", "1m")
	stderr := &syncBuffer{}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }()
	go collectLines(pipe, stderr)
	waitListening(t, addr)
	evidence := func() string {
		resp, err := http.Get("http://" + addr + "/v1/evidence?since=1m")
		if err != nil {
			t.Fatalf("the agent stopped serving: %v\n%s", err, stderr)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the evidence: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("evidence: %s %s", resp.Status, b)
		}
		return string(b)
	}
	pair, err := lab.NewPair() // created after the agent started
	if err != nil {
		t.Fatal(err)
	}
	// The test removes the pair itself; a second Close would fail.
	removed := false
	t.Cleanup(func() {
		if !removed {
			if err := pair.Close(); err != nil {
				t.Errorf("removing the lab pair: %v", err)
			}
		}
	})
	addrIn := loadServer(t, pair)
	loadClient(t, pair, addrIn, "-d", "1")
	if got := evidence(); !strings.Contains(got, pair.Sender.Name) || !strings.Contains(got, lab.SenderAddr.Addr().String()) {
		t.Errorf("the evidence does not hold the new namespace %s and its flow:\n%.3000s", pair.Sender.Name, got)
	}
	sender := pair.Sender.Name
	removed = true
	if err := pair.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if got := evidence(); strings.Contains(got, `"name":"`+sender+`"`) {
		t.Errorf("the deleted namespace %s is still watched", sender)
	}
}
