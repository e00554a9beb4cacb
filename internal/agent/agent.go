// Package agent is skbtrace's long-running side: it keeps the doctor's
// families recording (per-packet ones sampled), holds the recent past (the
// trace and the host's samples) for a bounded window, and serves it over
// HTTP: Prometheus metrics, the doctor's evidence for a window (which a
// doctor at the other end of a flow joins with --peer), and the trace.
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// DefaultListen is loopback: reaching the agent from elsewhere is a choice.
const DefaultListen = "127.0.0.1:9464"

// Options configure an agent.
type Options struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN" on
	// /v1/ (and on /metrics unless OpenMetrics). A listener that is not
	// loopback-only needs one.
	Token       string
	OpenMetrics bool
	// TLSCert and TLSKey, both or neither, serve HTTPS.
	TLSCert, TLSKey string
	// Netns names the namespaces to watch (empty: this process's own and
	// every named one, also those created later).
	Netns []string
	// Window is how far back the agent keeps evidence and trace.
	Window time.Duration
	// MaxTraceBytes bounds the trace kept; older blocks go first.
	MaxTraceBytes int
	// Log receives one line per notable event (start, notes, errors).
	Log io.Writer
	// NoKernelEvents serves tcp_info, counters and settings only.
	NoKernelEvents bool
}

// Agent is a running agent.
type Agent struct {
	opts    Options
	tls     *tls.Config // nil: plain HTTP
	store   *store
	totals  *totals
	rec     *collect.Recording
	started time.Time

	mu      sync.Mutex // watch and samples
	watch   *observe.Watch
	samples []held
	socks   *sockTable // the samples' sockets
	taken   int        // samples taken, for the sockets' grid
	notes   []string
	logged  map[string]time.Time // when each note was last seen

	// traced: the recording writes into the store, so /v1/trace serves.
	traced bool
	// Slots of concurrent evidence and trace requests, apart so that slow
	// trace readers never hold up evidence.
	evidenceSlots, traceSlots chan struct{}
	stall                     time.Duration // see stallTimeout
}

// sampleEvery is how often the host is read. Sockets are kept in every sample of
// the last keepAllSockets, then every keepSocketsEvery-th: memory stays
// bounded on hosts with many sockets, recent windows start within 2 s and
// older ones within 10 s. An evidence request samples once more, so its
// window ends when it is asked.
const (
	recordEvery      = 2 * time.Second
	sampleEvery      = 2 * time.Second
	keepAllSockets   = 30 * time.Second
	keepSocketsEvery = 5
)

// held is a kept sample; grid ones keep their sockets for the window.
// socks, per namespace, is nil once the sample's sockets are given up.
type held struct {
	*observe.Sample
	grid  bool
	socks map[string][]reading
}

// CheckListen refuses a listener reachable from other hosts without a token.
func CheckListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("listening on %s without a token would let anyone who reaches it read this host's connections and traces: give --token-file, or listen on loopback", addr)
}

// Start begins recording and sampling; Serve answers requests.
func Start(o Options) (*Agent, error) {
	if o.Window <= 0 {
		o.Window = 10 * time.Minute
	}
	if o.MaxTraceBytes <= 0 {
		o.MaxTraceBytes = 64 << 20
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	a := &Agent{opts: o, started: time.Now(), watch: observe.NewWatch(o.Netns), socks: newSockTable(), stall: stallTimeout,
		evidenceSlots: make(chan struct{}, maxEvidenceRequests), traceSlots: make(chan struct{}, maxTraceRequests)}
	// Loaded before anything starts: a certificate that cannot serve would
	// otherwise fail only at the first connection.
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("loading the TLS certificate and key: %w", err)
		}
		a.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if !o.NoKernelEvents {
		var notes []string
		// Drained and sampled every 2 s: every second cost 1 % of a CPU idle.
		a.rec, notes = observe.StartRecording(false, recordEvery)
		for _, n := range notes {
			fmt.Fprintln(o.Log, "skbtrace agent: "+n)
		}
		a.notes = notes
		a.traced = a.rec != nil
	}
	// Counts scale by what the recording sampled, not by what was asked.
	var sampled []string
	share := 1.0
	if a.rec != nil {
		sampled, share = a.rec.Sampled()
	}
	a.totals = newTotals(o.Window, sampled, share)
	a.store = newStore(o.Window, o.MaxTraceBytes, a.totals)
	a.sample()
	return a, nil
}

// Run records and samples until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	var recErr chan error
	stop := make(chan struct{})
	if a.rec != nil {
		w, err := trace.NewWriter(a.store, collect.Header("skbtrace agent"))
		if err != nil {
			return err
		}
		recErr = make(chan error, 1)
		go func() {
			_, err := a.rec.Run(w, stop)
			recErr <- err
		}()
	}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-recErr:
			err = fmt.Errorf("recording kernel events: %w", err)
			break loop
		case <-t.C:
			a.sample()
		}
	}
	if a.rec != nil {
		close(stop)
		if recErr != nil && err == nil {
			err = <-recErr
		}
		a.rec.Close()
	}
	a.mu.Lock()
	a.watch.Close()
	a.mu.Unlock()
	return err
}

func (a *Agent) sample() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keep(a.watch.Sample(true))
}

// keep adds a sample to the window, under a.mu.
func (a *Agent) keep(s *observe.Sample) {
	if a.logged == nil {
		a.logged = map[string]time.Time{}
	}
	logNew(a.opts.Log, s.Notes, s.Time, a.logged)
	a.totals.readSockets(s)
	a.totals.forget(s.Time)
	a.taken++
	a.samples = append(a.samples, held{s, a.taken%keepSocketsEvery == 0, a.socks.keep(s)})
	for len(a.samples) > 1 && s.Time.Sub(a.samples[0].Time) > a.opts.Window {
		a.socks.release(a.samples[0].socks)
		a.samples[0] = held{}
		a.samples = a.samples[1:]
	}
	// The sample that just aged past keepAllSockets keeps its sockets only
	// on the grid.
	for i := len(a.samples) - 1; i >= 0; i-- {
		h := a.samples[i]
		if s.Time.Sub(h.Time) <= keepAllSockets {
			continue
		}
		if !h.grid {
			a.socks.release(h.socks)
			a.samples[i].socks = nil
		}
		break
	}
	a.socks.thin(a.samples, s.Time)
}

// BPFRunTime is the recording's BPF run time.
func (a *Agent) BPFRunTime() time.Duration {
	if a.rec == nil {
		return 0
	}
	return a.rec.RunTime()
}

// socketStats says how many socket readings are held and were given up,
// without waiting on a.mu.
func (a *Agent) socketStats() (int, uint64) {
	return int(a.socks.heldNow.Load()), uint64(a.socks.lost.Load())
}

// Handler serves /metrics, /v1/evidence and /v1/trace.
func (a *Agent) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{t: a.totals, store: a.store, bpf: a.BPFRunTime, socks: a.socketStats},
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// The collector's CPU time beside the total: its share is the cost of
		// the agent's memory bound.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/(gc/total|total):`)})))
	mux := http.NewServeMux()
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 10 * time.Second})
	if !a.opts.OpenMetrics {
		metrics = a.auth(metrics)
	}
	mux.Handle("/metrics", metrics)
	mux.Handle("/v1/evidence", a.auth(limited(a.evidenceSlots, "evidence", http.HandlerFunc(a.evidence))))
	mux.Handle("/v1/trace", a.auth(limited(a.traceSlots, "trace", http.HandlerFunc(a.trace))))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpError(w, http.StatusNotFound, "no such endpoint: /metrics, /v1/evidence and /v1/trace are served")
	})
	return getOnly(mux)
}

// Server is an http.Server with limits on slow and large requests.
func (a *Agent) Server() *http.Server {
	return &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
}

// Serve answers on ln until ctx ends.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	srv := a.Server()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	var err error
	if a.tls != nil {
		srv.TLSConfig = a.tls
		err = srv.ServeTLS(ln, "", "")
	} else {
		err = srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ParseSince reads a window's start: RFC 3339, Unix seconds, or a duration
// back from now ("5m"); empty is the whole window. A start after now is
// refused: no window starts there.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, ok := time.Time{}, false
	if p, err := time.Parse(time.RFC3339Nano, v); err == nil {
		t, ok = p, true
	} else if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f < 1e11 {
		t, ok = time.Unix(0, int64(f*1e9)), true
	} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
		t, ok = now.Add(-d), true
	}
	if !ok {
		return time.Time{}, fmt.Errorf("since=%q: give RFC 3339 time, Unix seconds or a duration such as 5m", v)
	}
	if t.After(now) {
		return time.Time{}, fmt.Errorf("since=%q is %s in the future (the agent's clock reads %s): give a time in the past", v, t.Sub(now).Round(time.Millisecond), now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// flowFilter matches flows by "ADDR:PORT" (either end) or "A-B" (this end A,
// peer B).
type flowFilter struct{ a, b netip.AddrPort }

func parseFlow(v string) (*flowFilter, error) {
	if v == "" {
		return nil, nil
	}
	var f flowFilter
	var err error
	if left, right, ok := strings.Cut(v, "-"); ok {
		if f.a, err = netip.ParseAddrPort(left); err == nil {
			f.b, err = netip.ParseAddrPort(right)
		}
	} else {
		f.a, err = netip.ParseAddrPort(v)
	}
	if err != nil {
		return nil, fmt.Errorf("flow=%q: give ADDR:PORT or LOCAL-PEER ([v6]:port for IPv6)", v)
	}
	return &f, nil
}

func (f *flowFilter) match(fl *doctor.Flow) bool {
	eq := func(x, y netip.AddrPort) bool { return x.Addr().Unmap() == y.Addr().Unmap() && x.Port() == y.Port() }
	if f.b.IsValid() {
		return eq(fl.Local, f.a) && eq(fl.Peer, f.b)
	}
	return eq(fl.Local, f.a) || eq(fl.Peer, f.a)
}

// windowQuery reads a request's query and its since; on bad input it has
// answered 400.
func windowQuery(w http.ResponseWriter, r *http.Request) (url.Values, time.Time, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		var since time.Time
		if since, err = ParseSince(q.Get("since"), time.Now()); err == nil {
			return q, since, true
		}
	} else {
		err = fmt.Errorf("query: %w", err)
	}
	httpError(w, http.StatusBadRequest, err.Error())
	return nil, time.Time{}, false
}

// EvidenceResponse is /v1/evidence's body.
type EvidenceResponse struct {
	Host     string           `json:"host"`
	From     time.Time        `json:"from"`
	To       time.Time        `json:"to"`
	Evidence *doctor.Evidence `json:"evidence"`
}

func (a *Agent) evidence(w http.ResponseWriter, r *http.Request) {
	q, since, ok := windowQuery(w, r)
	if !ok {
		return
	}
	filter, err := parseFlow(q.Get("flow"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The window ends now: a doctor asks right after its workload ends, and
	// the recording's last per-packet sample of it is written out first.
	a.flushRecording()
	a.sample()
	a.mu.Lock()
	// The window starts at the newest sample with sockets at or before
	// since, or the oldest one.
	first := -1
	for i, h := range a.samples {
		if h.socks != nil && (first < 0 || !h.Time.After(since)) {
			first = i
		}
	}
	if first < 0 || first == len(a.samples)-1 {
		a.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(sampleEvery.Seconds())))
		httpError(w, http.StatusServiceUnavailable, "not enough samples yet: the agent reads the host every 2 s")
		return
	}
	span := a.socks.span(a.samples[first:])
	var recording io.Reader
	if a.rec != nil {
		if r, err := a.store.recording(span[0].Time); err == nil {
			recording = r
		}
	}
	ev := a.watch.Evidence(span, recording)
	a.mu.Unlock()
	before, after := span[0], span[len(span)-1]
	ev.Notes = append(ev.Notes, a.notes...)
	if filter != nil {
		kept := ev.Flows[:0]
		for i := range ev.Flows {
			if filter.match(&ev.Flows[i]) {
				kept = append(kept, ev.Flows[i])
			}
		}
		ev.Flows = kept
	}
	hostname, _ := os.Hostname()
	var body bytes.Buffer
	if err := json.NewEncoder(&body).Encode(EvidenceResponse{Host: hostname, From: before.Time, To: after.Time, Evidence: ev}); err != nil {
		httpError(w, http.StatusInternalServerError, "encoding the evidence: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := writeAnswer(w, &body, a.stall); err != nil {
		fmt.Fprintln(a.opts.Log, "skbtrace agent: serving evidence: "+err.Error())
	}
}

// flushRecording has the recorder write what it holds (it drains and writes
// every 2 s): a window that ends now would miss its last per-packet sample,
// the only one of a 2 s window whose first came before its workload.
func (a *Agent) flushRecording() {
	if a.rec == nil {
		return
	}
	if err := a.rec.Flush(); err != nil {
		fmt.Fprintln(a.opts.Log, "skbtrace agent: writing the recording out: "+err.Error())
	}
}

func (a *Agent) trace(w http.ResponseWriter, r *http.Request) {
	_, since, ok := windowQuery(w, r)
	if !ok {
		return
	}
	if !a.traced {
		httpError(w, http.StatusNotFound, "this agent records no kernel events (no privileges, or --no-kernel-events)")
		return
	}
	a.flushRecording()
	// The blocks are read in place, without the store's lock.
	tr, err := a.store.recording(since)
	if err != nil {
		httpError(w, http.StatusServiceUnavailable, "reading the trace kept: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/vnd.skbtrace.trace")
	if err := writeAnswer(w, tr, a.stall); err != nil {
		fmt.Fprintln(a.opts.Log, "skbtrace agent: serving the trace: "+err.Error())
	}
}

// logNew logs the notes not seen within noteQuiet before now and marks
// them seen: a namespace the agent may not enter is said once, not at every
// sample, and again only after it was fine for a while. (Such a namespace
// alternates: opened, then dropped when it cannot be entered.)
func logNew(w io.Writer, notes []string, now time.Time, seen map[string]time.Time) {
	for _, n := range notes {
		if last, ok := seen[n]; !ok || now.Sub(last) > noteQuiet {
			fmt.Fprintln(w, "skbtrace agent: "+n)
		}
		seen[n] = now
	}
	for n, last := range seen {
		if now.Sub(last) > noteQuiet {
			delete(seen, n)
		}
	}
}

const noteQuiet = time.Minute
