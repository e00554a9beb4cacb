package agent

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

const token = "s3cret-token"

// testAgent samples this process's namespace, without kernel events.
func testAgent(t testing.TB, o Options) *Agent {
	t.Helper()
	o.Netns, o.NoKernelEvents = []string{host.SelfNetnsName}, true
	a, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	a.sample()
	return a
}

func get(t testing.TB, h http.Handler, target, auth string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestTokenGuardsEvidenceAndTrace(t *testing.T) {
	h := testAgent(t, Options{Token: token}).Handler()
	for _, c := range []struct {
		target, auth string
		code         int
	}{
		{"/v1/evidence", "", 401},
		{"/v1/evidence", "Bearer wrong", 401},
		{"/v1/evidence", "Bearer " + token + "x", 401},
		{"/v1/evidence", "Basic " + token, 401},
		{"/v1/trace", "", 401},
		{"/metrics", "", 401},
		{"/v1/evidence", "Bearer " + token, 200},
		{"/v1/trace", "Bearer " + token, 404}, // no kernel events recorded
		{"/metrics", "Bearer " + token, 200},
		{"/nothing", "Bearer " + token, 404},
	} {
		rec := get(t, h, c.target, c.auth)
		if rec.Code != c.code {
			t.Errorf("GET %s with %q: %d, want %d (%s)", c.target, c.auth, rec.Code, c.code, rec.Body)
		}
		if rec.Code != 200 && !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("GET %s: a %d without an error message: %s", c.target, rec.Code, rec.Body)
		}
	}
	if code := get(t, testAgent(t, Options{Token: token, OpenMetrics: true}).Handler(), "/metrics", "").Code; code != 200 {
		t.Errorf("--open-metrics: /metrics without a token gave %d", code)
	}
}

func TestBadRequestsGetClearErrors(t *testing.T) {
	h := testAgent(t, Options{}).Handler()
	for target, code := range map[string]int{
		"/v1/evidence?since=yesterday":                    400,
		"/v1/evidence?since=-5m":                          400,
		"/v1/evidence?flow=10.0.0.1":                      400,
		"/v1/evidence?flow=a-b":                           400,
		"/v1/evidence?since=" + strings.Repeat("9", 2000): 414,
		"/v1/evidence?since=5m&flow=10.0.0.1:5201":        200,
		"/v1/trace?since=%zz":                             400,
	} {
		if rec := get(t, h, target, ""); rec.Code != code {
			t.Errorf("GET %.60s: %d, want %d (%s)", target, rec.Code, code, rec.Body)
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/evidence", strings.NewReader("x"))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
}

func TestEvidenceCoversTheWindow(t *testing.T) {
	a := testAgent(t, Options{})
	// A flow of this process's own, on loopback, moving data between samples.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a.sample()
	if _, err := c.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	a.sample()
	local := c.LocalAddr().String()
	rec := get(t, a.Handler(), "/v1/evidence?flow="+local, "")
	if rec.Code != 200 {
		t.Fatalf("evidence: %d %s", rec.Code, rec.Body)
	}
	var r EvidenceResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Evidence.Flows) == 0 {
		t.Fatalf("no flow %s in the evidence", local)
	}
	for _, f := range r.Evidence.Flows {
		if f.Local.String() != local && f.Peer.String() != local {
			t.Errorf("flow %s -> %s passed the filter %s", f.Local, f.Peer, local)
		}
	}
	var acked uint64
	for _, f := range r.Evidence.Flows {
		acked += f.BytesAcked + f.BytesReceived
	}
	if acked < 1<<20 {
		t.Errorf("the window's flows moved %d bytes, want the 1 MB written in it", acked)
	}
}

func TestCheckListenRefusesOpenAddressWithoutToken(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:9464": true, "[::1]:9464": true, "localhost:9464": true,
		"0.0.0.0:9464": false, ":9464": false, "10.0.0.2:9464": false, "[::]:9464": false} {
		if err := CheckListen(addr, ""); (err == nil) != ok {
			t.Errorf("CheckListen(%q) without a token: %v", addr, err)
		}
		if err := CheckListen(addr, token); err != nil {
			t.Errorf("CheckListen(%q) with a token: %v", addr, err)
		}
	}
}

// TestSlowClientDoesNotStopTheAgent: a client that never finishes its
// request is cut off while others are served.
func TestSlowClientDoesNotStopTheAgent(t *testing.T) {
	a := testAgent(t, Options{})
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Config = a.Server()
	srv.Config.ReadHeaderTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	slow, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")); err != nil { // and never the blank line
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("another client while one is slow: %v %v", err, resp)
	}
	resp.Body.Close()
	if err := slow.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(slow); err != nil {
		t.Errorf("the slow client was not cut off: %v", err)
	}
}

// recorderTo writes a header into the store, as the recorder does.
func recorderTo(t *testing.T, s *store) *tracetest.Writer {
	t.Helper()
	w, err := tracetest.NewWriter(s, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// traceOf writes a block of send-limit runs of conns flows.
func traceOf(t *testing.T, w *tracetest.Writer, conns int) {
	t.Helper()
	if err := appendBlock(w, conns); err != nil {
		t.Fatal(err)
	}
}

// appendBlock is traceOf returning its error, for goroutines other than the
// test's, which may not end the test.
func appendBlock(w *tracetest.Writer, conns int) error {
	if err := w.AppendNetns(trace.Netns{Inode: 7, Name: "blue"}); err != nil {
		return err
	}
	for i := range conns {
		a := tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:40000"), netip.AddrPortFrom(netip.MustParseAddrPort("10.0.0.2:5201").Addr(), uint16(5000+i)), 7)
		ev := tracetest.Sendlim(uint64(i+1), uint64(i+1)*1e6, uint64(i)*1e6, 0, uint64(0x1000+i), a, uint8(event.SendlimSndbuf), 10, 5)
		if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
			return err
		}
	}
	return w.Flush()
}

// appendBlocks appends n blocks of conns flows in the background and sends
// the first error, or nil once all are written, on the channel it returns.
func appendBlocks(w *tracetest.Writer, n, conns int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for range n {
			if err := appendBlock(w, conns); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

func TestStoreServesAReadableTraceAndKeepsNames(t *testing.T) {
	tot := newTotals(time.Minute, nil, 1)
	s := newStore(time.Minute, 1<<20, tot)
	traceOf(t, recorderTo(t, s), 3)
	tr, err := s.recording(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(tr)
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze.NewSummary()
	n := 0
	if err := analyze.Replay(r, &event.Filter{}, sum, func(*event.Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3 || !sum.Ended || sum.Names.Netns[7] != "blue" {
		t.Errorf("served trace: %d events, ended %v, netns 7 %q; want 3, true, blue", n, sum.Ended, sum.Names.Netns[7])
	}
	if got := testutil.CollectAndCount(&collector{t: tot, store: s}, "skbtrace_flow_send_limit_seconds_total"); got != 3 {
		t.Errorf("%d send-limit series, want one per flow (3)", got)
	}
}

// A trace being served (or replayed for evidence) reads the blocks of its
// moment in place: the recorder goes on writing, and evicting, meanwhile,
// and the reader still gets the whole trace it started.
func TestATraceBeingReadHoldsUpNeitherTheRecorderNorEviction(t *testing.T) {
	s := newStore(time.Hour, 4096, newTotals(time.Hour, nil, 1))
	w := recorderTo(t, s)
	traceOf(t, w, 3)
	r, err := s.recording(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(r, first); err != nil {
		t.Fatal(err)
	}
	written := appendBlocks(w, 50, 20)
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the recorder is held up by a half-read trace")
	}
	if _, _, dropped, _ := s.stats(); dropped == 0 {
		t.Fatal("nothing was evicted; the test proves nothing")
	}
	tr, err := trace.NewReader(io.MultiReader(bytes.NewReader(first), r))
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze.NewSummary()
	n := 0
	if err := analyze.Replay(tr, &event.Filter{}, sum, func(*event.Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 3 || !sum.Ended {
		t.Errorf("the trace taken before 50 more blocks: %d events, ended %v; want 3, true", n, sum.Ended)
	}
}

func TestMetricsNameOnlyTheBusiestFlows(t *testing.T) {
	tot := newTotals(time.Minute, nil, 1)
	s := newStore(time.Minute, 1<<20, tot)
	traceOf(t, recorderTo(t, s), MaxFlowSeries+20)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{t: tot, store: s})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "skbtrace_flow_send_limit_seconds_total" {
			continue
		}
		other := 0
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "local" && l.GetValue() == "other" {
					other++
				}
			}
		}
		if len(mf.Metric) != MaxFlowSeries+1 || other != 1 {
			t.Errorf("%d series with %d 'other'; want %d named flows and one sum of the rest", len(mf.Metric), other, MaxFlowSeries)
		}
		return
	}
	t.Error("no send-limit series")
}

func TestStoreStaysWithinItsBound(t *testing.T) {
	s := newStore(time.Hour, 4096, newTotals(time.Hour, nil, 1))
	w := recorderTo(t, s)
	for range 50 {
		traceOf(t, w, 20)
	}
	_, bytes, dropped, _ := s.stats()
	if bytes > 4096+8192 || dropped == 0 {
		t.Errorf("store holds %d bytes after 50 blocks with a bound of 4096, %d evicted", bytes, dropped)
	}
}

func FuzzEvidenceQuery(f *testing.F) {
	for _, q := range []string{"since=5m", "since=2026-11-23T10:00:00Z&flow=10.0.0.1:1-10.0.0.2:2", "flow=[::1]:80", "since=1e300", "since=%00", "flow=-"} {
		f.Add(q)
	}
	a, err := Start(Options{Netns: []string{host.SelfNetnsName}, NoKernelEvents: true})
	if err != nil {
		f.Fatal(err)
	}
	a.sample()
	a.sample()
	h := a.Handler()
	f.Fuzz(func(t *testing.T, q string) {
		req, err := http.NewRequest(http.MethodGet, "/v1/evidence", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.RawQuery = q
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 414, 503:
		default:
			t.Errorf("query %q: status %d", q, rec.Code)
		}
		if rec.Code != 200 && !json.Valid(rec.Body.Bytes()) {
			t.Errorf("query %q: error body is not JSON: %s", q, rec.Body)
		}
	})
}

// BenchmarkScrape1000Flows: /metrics with 1000 live flows and sockets.
func BenchmarkScrape1000Flows(b *testing.B) {
	tot := newTotals(time.Minute, nil, 1)
	s := newStore(time.Minute, 1<<20, tot)
	w, err := tracetest.NewWriter(s, trace.NativeOrder)
	if err != nil {
		b.Fatal(err)
	}
	socks := map[[2]string]host.TCPSocket{}
	for i := range 1000 {
		a := tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:40000"), netip.AddrPortFrom(netip.MustParseAddrPort("10.0.0.2:5201").Addr(), uint16(1000+i)), 7)
		for r := range uint8(4) {
			if err := w.Event(uint16(event.TypeTCPSendlim), tracetest.Sendlim(uint64(4*i)+uint64(r)+1, uint64(i+1)*1e6, uint64(i)*1e6, 0, uint64(0x1000+i), a, r, 10, 5)); err != nil {
				b.Fatal(err)
			}
		}
		local := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(1000+i))
		socks[[2]string{local.String(), "10.0.0.2:5201"}] = host.TCPSocket{Local: local, Peer: netip.MustParseAddrPort("10.0.0.2:5201"), BytesAcked: 1e9}
	}
	tot.readSockets(&observe.Sample{Namespaces: map[string]*observe.NetnsSample{"blue": {Sockets: socks}}})
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	a := &Agent{totals: tot, store: s, socks: newSockTable()}
	h := a.Handler()
	b.ResetTimer()
	for b.Loop() {
		rec := get(b, h, "/metrics", "")
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// TestScrapesWhileRecording: the store hands events to the totals under its
// lock while scrapes read both; neither may wait on the other.
func TestScrapesWhileRecording(t *testing.T) {
	tot := newTotals(time.Minute, nil, 1)
	s := newStore(time.Minute, 1<<20, tot)
	w := recorderTo(t, s)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{t: tot, store: s})
	written := appendBlocks(w, 200, 20)
	for {
		gathered := make(chan error, 1)
		go func() { _, err := reg.Gather(); gathered <- err }()
		select {
		case err := <-gathered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a scrape waited 10 s on the recording: a lock-order deadlock")
		}
		select {
		case err := <-written:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
		}
	}
}

// A namespace a non-root agent may not enter is said once, not every two
// seconds, and again when it comes back after a quiet minute.
func TestANoteIsLoggedOnceWhileItLasts(t *testing.T) {
	var log bytes.Buffer
	denied := "netns blue: entering network namespace blue: operation not permitted"
	seen := map[string]time.Time{}
	start := time.Now()
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	for _, step := range []struct {
		s     int
		notes []string
	}{{0, []string{denied}}, {2, nil}, {4, []string{denied}}, {6, []string{denied, "netns red appeared"}}, {8, nil}, {200, []string{denied}}} {
		logNew(&log, step.notes, at(step.s), seen)
	}
	if got := strings.Count(log.String(), denied); got != 2 {
		t.Errorf("the denied namespace was logged %d times, want 2 (once, and once after a quiet minute):\n%s", got, log.String())
	}
	if got := strings.Count(log.String(), "red appeared"); got != 1 {
		t.Errorf("the other note was logged %d times, want 1", got)
	}
}
