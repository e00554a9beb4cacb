package agent

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// rawRequest sends req as written on a connection of its own and reads the
// answer's status and Location.
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func TestEdgeRequestsAreAnsweredAsDocumented(t *testing.T) {
	srv := httptest.NewServer(testAgent(t, Options{}).Handler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	for _, c := range []struct {
		req  string
		code int
	}{
		{"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 413},
		{"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("1000\r\n"+strings.Repeat("x", 0x1000)+"\r\n", 64) + "0\r\n\r\n", 413},
		{"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200},
		{"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 413},
		{"GET /../x HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"GET /v1/../metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"GET //metrics HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"GET /metrics/. HTTP/1.1\r\nHost: x\r\n\r\n", 404},
		{"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200},
	} {
		if code, loc := rawRequest(t, addr, c.req); code != c.code || loc != "" {
			t.Errorf("%.70q: %d (Location %q), want %d and no redirect", c.req, code, loc, c.code)
		}
	}
}

func TestAFutureSinceIsABadRequest(t *testing.T) {
	h := testAgent(t, Options{}).Handler()
	future := time.Now().Add(time.Hour)
	unix := strconv.FormatInt(future.Unix(), 10)
	for _, target := range []string{
		"/v1/evidence?since=" + future.UTC().Format(time.RFC3339),
		"/v1/evidence?since=" + unix,
		"/v1/trace?since=" + unix,
	} {
		rec := get(t, h, target, "")
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "in the future") {
			t.Errorf("GET %s: %d %s, want 400 saying the time is in the future", target, rec.Code, rec.Body)
		}
	}
	if rec := get(t, h, "/v1/evidence?since="+strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10), ""); rec.Code != 200 {
		t.Errorf("a since a minute back: %d %s", rec.Code, rec.Body)
	}
}

// Readers of the trace that stop reading hold neither evidence nor, for
// long, their slots: evidence has slots of its own, a reader beyond the
// trace's slots is told when to come back, and a stalled one is cut off.
func TestSlowTraceReadersHoldUpNeitherEvidenceNorLaterReaders(t *testing.T) {
	a := testAgent(t, Options{})
	a.traced, a.stall = true, 300*time.Millisecond
	// More than loopback's socket buffers hold, so a reader that stops
	// reading stops the writer.
	if err := <-appendBlocks(recorderTo(t, a.store), 160, 2000); err != nil {
		t.Fatal(err)
	}
	if _, n, _, _ := a.store.stats(); n < 24<<20 {
		t.Fatalf("the trace holds %d bytes, too few to stall a writer", n)
	}
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Config = a.Server()
	srv.Start()
	defer srv.Close()
	for range maxTraceRequests {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /v1/trace HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the slow readers to take every trace slot", func() bool { return len(a.traceSlots) == maxTraceRequests })
	resp, err := http.Get(srv.URL + "/v1/trace")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a trace reader beyond the slots: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if len(a.traceSlots) == maxTraceRequests {
		resp, err := http.Get(srv.URL + "/v1/evidence")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("evidence while %d trace readers stall: %d", maxTraceRequests, resp.StatusCode)
		}
	}
	waitFor(t, "the stalled readers to be cut off", func() bool { return len(a.traceSlots) == 0 })
	resp, err = http.Get(srv.URL + "/v1/trace")
	if err != nil {
		t.Fatal(err)
	}
	// Read whole first: replaying as it comes may take longer than the
	// test's stall allows.
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze.NewSummary()
	n := 0
	if err := analyze.Replay(r, &event.Filter{}, sum, func(*event.Event) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 160*2000 || !sum.Ended {
		t.Errorf("the trace after the stalled readers: %d events, ended %v; want %d, true", n, sum.Ended, 160*2000)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited 20 s for %s", what)
		}
	}
}
