package agent

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/host"
)

// Every field of a socket survives its reading: a field added to
// host.TCPSocket and not to reading fails here.
func TestAReadingKeepsEverySocketField(t *testing.T) {
	var k host.TCPSocket
	v := reflect.ValueOf(&k).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.CanUint() {
			f.SetUint(uint64(i + 1))
		}
	}
	k.Local, k.Peer = netip.MustParseAddrPort("10.0.0.1:40000"), netip.MustParseAddrPort("[fd00::2]:5201")
	tab := newSockTable()
	socks := tab.keep(&observe.Sample{Namespaces: map[string]*observe.NetnsSample{"blue": {Sockets: map[[2]string]host.TCPSocket{{"a", "b"}: k}}}})
	if got := tab.socket(socks["blue"][0]); got != k {
		t.Errorf("a socket kept as a reading came back as\n%+v, want\n%+v", got, k)
	}
	tab.release(socks)
	if tab.held != 0 || len(tab.ids) != 0 {
		t.Errorf("after its only sample went: %d readings held, %d addresses named", tab.held, len(tab.ids))
	}
}

// fakeSockets is n sockets of which the first `closed` are gone by sample
// i, each reading's counters and peaks moving with i.
func fakeSockets(rng *rand.Rand, i, n, closed int) map[[2]string]host.TCPSocket {
	m := map[[2]string]host.TCPSocket{}
	for j := range n {
		if j < closed*i/8 {
			continue
		}
		k := host.TCPSocket{Local: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(20000+j)), Peer: netip.MustParseAddrPort("127.0.0.1:5201"),
			State: 1, RTTus: rng.Uint32N(1000), SndCwnd: 10, SndMSS: 1448, AdvMSS: 1448, PMTU: 65536,
			SndWnd: rng.Uint32N(1 << 20), NotSent: rng.Uint32N(1 << 16), RcvSpace: 65483,
			BytesAcked: uint64(i*1000 + j), BytesReceived: uint64(i * 10), SegsOut: uint32(i * 3), TotalRetrans: uint32(i / 3),
			BusyUs: uint64(i * 100), SndbufLimitedUs: uint64(i * j), DeliveryRate: rng.Uint64N(1e9)}
		m[[2]string{k.Local.String(), k.Peer.String()}] = k
	}
	return m
}

// windowOf makes n samples 2 s apart of this process's namespace with
// fake sockets, each namespace's counters those of one real sample.
func windowOf(t testing.TB, a *Agent, n, socks, closed int) []*observe.Sample {
	t.Helper()
	real := a.watch.Sample(false)
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now().Add(-time.Duration(n) * sampleEvery)
	var out []*observe.Sample
	for i := range n {
		s := &observe.Sample{Time: start.Add(time.Duration(i) * sampleEvery), CPUs: real.CPUs, Softnet: real.Softnet, Namespaces: map[string]*observe.NetnsSample{}}
		for name, ns := range real.Namespaces {
			c := *ns
			c.Sockets = fakeSockets(rng, i, socks, closed)
			s.Namespaces[name] = &c
		}
		out = append(out, s)
	}
	return out
}

func sortedFlows(ev *doctor.Evidence) string {
	slices.SortFunc(ev.Flows, func(a, b doctor.Flow) int { return strings.Compare(a.Local.String(), b.Local.String()) })
	b, _ := json.Marshal(ev)
	return string(b)
}

// The window's samples folded into four judge as the whole window does:
// first readings, last ones (of sockets that closed within it too) and
// peaks.
func TestEvidenceOfFoldedSamplesIsTheWindows(t *testing.T) {
	a := testAgent(t, Options{})
	samples := windowOf(t, a, 9, 40, 16)
	want := sortedFlows(a.watch.Evidence(samples, nil))
	var hs []held
	for _, s := range samples {
		hs = append(hs, held{Sample: s, socks: a.socks.keep(s)})
	}
	span := a.socks.span(hs)
	if len(span) != 4 {
		t.Fatalf("%d samples folded into %d, want 4", len(hs), len(span))
	}
	if got := sortedFlows(a.watch.Evidence(span, nil)); got != want {
		t.Errorf("folded window's evidence:\n%s\nthe window's:\n%s", got, want)
	}
	if !strings.Contains(want, `"local":"127.0.0.1:20008"`) {
		t.Error("the evidence lacks a socket that closed within the window; the test proves nothing")
	}
}

// Beyond the bound, samples give up their readings, counted, old ones
// first; the oldest and the newest stay, so the window keeps its reach.
func TestSocketReadingsStayWithinTheirBound(t *testing.T) {
	defer func(n int) { maxSocketReadings = n }(maxSocketReadings)
	maxSocketReadings = 1000
	a := testAgent(t, Options{})
	a.samples = nil
	a.socks = newSockTable()
	samples := windowOf(t, a, 120, 100, 0)
	for _, s := range samples {
		a.keep(s)
		if a.socks.held > maxSocketReadings {
			t.Fatalf("%d readings held, bound %d", a.socks.held, maxSocketReadings)
		}
	}
	var with []time.Time
	for _, h := range a.samples {
		if h.socks != nil {
			with = append(with, h.Time)
		}
	}
	if a.socks.lost.Load() == 0 || len(with) < 2 {
		t.Fatalf("%d readings given up, %d samples keep theirs", a.socks.lost.Load(), len(with))
	}
	// The first samples are thinned while recent, before the grid rule would
	// have kept one of them: the reach is the window's less that start.
	if reach := with[len(with)-1].Sub(with[0]); reach < 200*time.Second || !with[len(with)-1].Equal(samples[len(samples)-1].Time) {
		t.Errorf("samples with sockets span %s to %s (%s) of a window of %s to %s", with[0], with[len(with)-1], reach, samples[0].Time, samples[len(samples)-1].Time)
	}
	if gap := with[len(with)-1].Sub(with[len(with)-2]); gap > 2*sampleEvery {
		t.Errorf("the newest samples with sockets are %s apart: recent ones were given up first", gap)
	}
	if h, lost := a.socketStats(); h != a.socks.held || lost != uint64(a.socks.lost.Load()) {
		t.Errorf("the metrics say %d held and %d given up, the table %d and %d", h, lost, a.socks.held, a.socks.lost.Load())
	}
}

// BenchmarkHeldConnections: 20,000 held loopback connections (40,000
// sockets) sampled every 2 s for a 10-minute window; each op is an
// evidence request over the whole window. live-MB is the heap the window
// holds (trace aside), which maxSocketBytes bounds.
func BenchmarkHeldConnections(b *testing.B) {
	a := testAgent(b, Options{})
	a.samples, a.socks = nil, newSockTable()
	const n = 10 * time.Minute / sampleEvery
	real := a.watch.Sample(false)
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now().Add(-n * sampleEvery)
	for i := range int(n) {
		s := &observe.Sample{Time: start.Add(time.Duration(i) * sampleEvery), CPUs: real.CPUs, Softnet: real.Softnet, Namespaces: map[string]*observe.NetnsSample{}}
		for name, ns := range real.Namespaces {
			c := *ns
			c.Sockets = fakeSockets(rng, i, 40000, 0)
			s.Namespaces[name] = &c
		}
		a.keep(s)
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	first := slices.IndexFunc(a.samples, func(h held) bool { return h.socks != nil })
	for b.Loop() {
		if ev := a.watch.Evidence(a.socks.span(a.samples[first:]), nil); len(ev.Flows) == 0 {
			b.Fatal("no flows in the window's evidence")
		}
	}
	// Reported after the loop, which resets what was reported before it.
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "live-MB")
	b.ReportMetric(float64(a.socks.held), "readings")
	b.ReportMetric(float64(a.socks.lost.Load()), "readings-dropped")
	b.ReportMetric(a.samples[len(a.samples)-1].Time.Sub(a.samples[first].Time).Seconds(), "reach-s")
}
