package parquet

import (
	"math"
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
)

const seriesT0 = int64(1_700_000_000) * intervalNs

func seriesRTT(at int64, sock uint64, acked uint64) *event.Event {
	local := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(sock))
	ev := &event.Event{Type: event.TypeTCPRTT, Time: seriesT0 + at,
		Socket: event.Socket{Sock: sock, Local: local, Peer: netip.MustParseAddrPort("10.0.0.2:5201"), Netns: 1}}
	ev.RTT.BytesAcked, ev.RTT.Cwnd, ev.RTT.SrttUs = acked, 10, 100
	return ev
}

type seriesRow struct {
	sock     uint64
	interval int64
	acked    float64
}

// run feeds events and flushes as the exporter does, returning the rows and
// the most bins held at once.
func runSeries(evs []*event.Event) (rows []seriesRow, held int) {
	s := newSeries(seriesT0)
	emit := func(f *flowAcc, interval int64, b *flowBin) error {
		rows = append(rows, seriesRow{f.id.sock, interval - seriesT0/intervalNs, b.bytesAcked})
		return nil
	}
	for _, ev := range evs {
		s.add(ev)
		if s.now > s.flushed {
			s.flush(false, emit)
		}
		n := 0
		for _, f := range s.flows {
			n += len(f.bins)
		}
		held = max(held, n)
	}
	s.flush(true, emit)
	return rows, held
}

// A long trace of many flows holds a few seconds of bins per flow, not the
// trace's; every second is written once and the bytes add up.
func TestSeriesHoldOnlyOpenSeconds(t *testing.T) {
	const flows, seconds = 50, 300
	var evs []*event.Event
	for sec := int64(0); sec <= seconds; sec++ {
		for f := range uint64(flows) {
			evs = append(evs, seriesRTT(sec*intervalNs+int64(f)*1e6, f+1, uint64(sec)*1000))
		}
	}
	rows, held := runSeries(evs)
	if held > flows*3 {
		t.Errorf("%d bins held at once, want at most %d (3 per flow)", held, flows*3)
	}
	seen := map[[2]int64]bool{}
	var acked float64
	for _, r := range rows {
		k := [2]int64{int64(r.sock), r.interval}
		if seen[k] {
			t.Fatalf("flow %d second %d written twice", r.sock, r.interval)
		}
		seen[k] = true
		acked += r.acked
	}
	if want := float64(flows * seconds * 1000); math.Abs(acked-want) > 1e-3 {
		t.Errorf("%.0f bytes acknowledged in the rows, want %.0f", acked, want)
	}
	if len(rows) != flows*(seconds+1) {
		t.Errorf("%d rows, want %d", len(rows), flows*(seconds+1))
	}
}

// A socket's new life counts its bytes acknowledged from 0: the first
// sample of the new life is no delta from the old one's last.
func TestSeriesNewLifeRestartsTheTotals(t *testing.T) {
	start := &event.Event{Type: event.TypeTCPConn, Time: seriesT0 + 2e9}
	start.Conn.Socket = event.Socket{Sock: 7, Peer: netip.MustParseAddrPort("10.0.0.2:5201"), Netns: 1}
	start.Conn.Old, start.Conn.New = tcpClose, event.TCPState(2)
	rows, _ := runSeries([]*event.Event{
		seriesRTT(0, 7, 0), seriesRTT(1e9, 7, 500),
		start,
		seriesRTT(3e9, 7, 900), seriesRTT(4e9, 7, 1000),
	})
	var acked float64
	for _, r := range rows {
		acked += r.acked
	}
	if acked != 600 {
		t.Errorf("%.0f bytes acknowledged, want 600: 500 in the first life, 100 in the second", acked)
	}
}

// An event more than a second late adds a row for a second already
// written rather than losing its bytes.
func TestSeriesLateEventAddsARow(t *testing.T) {
	late := seriesRTT(1e9, 2, 0)
	rows, _ := runSeries([]*event.Event{
		seriesRTT(0, 1, 0), seriesRTT(5e9, 1, 100),
		seriesRTT(6e9, 1, 200), seriesRTT(10e9, 1, 300),
		late, seriesRTT(1.5e9, 2, 50),
	})
	var acked float64
	for _, r := range rows {
		acked += r.acked
	}
	if acked != 350 {
		t.Errorf("%.0f bytes acknowledged, want 350", acked)
	}
}

// BenchmarkSeries: allocations per event of the flows' series with 30,000
// connections sampled over time.
func BenchmarkSeries(b *testing.B) {
	const n = 30000
	s := newSeries(seriesT0)
	emit := func(*flowAcc, int64, *flowBin) error { return nil }
	ev := seriesRTT(0, 1, 0)
	b.ReportAllocs()
	for k := 0; b.Loop(); k++ {
		ev.Time = seriesT0 + int64(k)*1e5
		ev.Socket.Sock = uint64(k%n) + 1
		ev.RTT.BytesAcked = uint64(k/n) * 1000
		s.add(ev)
		if s.now > s.flushed {
			s.flush(false, emit)
		}
	}
}
