package record

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

const sec = int64(time.Second)

// flightRun records seconds of send-limit runs, perSecond of them in one
// block a second, into a flight recorder; fires says at which event times
// (ns from the start) a connection enters Loss. It returns what was written.
func flightRun(t *testing.T, o FlightOptions, seconds, perSecond int, fires func(at int64) bool) (*Flight, []byte) {
	t.Helper()
	var out bytes.Buffer
	f, err := NewFlight(&out, o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tracetest.NewWriter(f, trace.NativeOrder)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendNetns(trace.Netns{Inode: 7, Name: "blue"}); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	for s := 0; s < seconds; s++ {
		for i := 0; i < perSecond; i++ {
			at := int64(s)*sec + int64(i)*sec/int64(perSecond)
			ts := uint64(1e18 + at)
			if fires(at) {
				ev := &wire.TcpCongEvent{Sock: 0x1000, Addrs: testAddrs, Cwnd: 1, State: 4}
				ev.Hdr.Seq, ev.Hdr.TsNs, ev.Hdr.Type = seq, ts, uint16(event.TypeTCPCong)
				if err := w.Event(uint16(event.TypeTCPCong), ev); err != nil {
					t.Fatal(err)
				}
			} else if i%2 == 0 {
				ev := tracetest.Sendlim(seq, ts, ts-1000, 0, 0x1000, testAddrs, uint8(event.SendlimCwnd), 1, 1)
				if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
					t.Fatal(err)
				}
			} else {
				// The sender's samples: 1 MB acknowledged a second, steadily.
				ev := &wire.TcpRttEvent{Sock: 0x1000, Addrs: testAddrs, SrttUs: 100, MinRttUs: 50, Cwnd: 10,
					SndWnd: 65535, BytesAcked: uint64(at / 1000)}
				ev.Hdr.Seq, ev.Hdr.TsNs, ev.Hdr.Type = seq, ts, uint16(event.TypeTCPRTT)
				if err := w.Event(uint16(event.TypeTCPRTT), ev); err != nil {
					t.Fatal(err)
				}
			}
			seq++
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AppendEnd(trace.End{NextSeq: seq}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f, out.Bytes()
}

// readFlight replays a flight recorder's output: its summary and the
// seconds (from the start) that events came from.
func readFlight(t *testing.T, data []byte) (*analyze.Summary, map[int64]int) {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sum := analyze.NewSummary()
	secs := map[int64]int{}
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error {
		secs[(ev.Time-sum.Header.WallTime(1e18))/sec]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return sum, secs
}

func rtoTrigger(t *testing.T) []Trigger {
	tr, err := ParseTrigger("rto")
	if err != nil {
		t.Fatal(err)
	}
	return []Trigger{tr}
}

// A loss once in 60 s, recorded for 150 s with 5 s before and 3 s after:
// the trace holds the seconds around each, named by its trigger, and
// nothing else; no sequence number counts as missing.
func TestFlightWritesTheWindowAroundEachFiringAndLittleElse(t *testing.T) {
	o := FlightOptions{Triggers: rtoTrigger(t), Pre: 5 * time.Second, Post: 3 * time.Second, RingBytes: 8 << 20}
	f, out := flightRun(t, o, 150, 100, func(at int64) bool { return at == 30*sec || at == 90*sec })
	sum, secs := readFlight(t, out)
	if sum.Windows != 2 || len(sum.Triggers) != 2 || sum.Triggers[0].Expr != "rto" || !sum.Ended || sum.Missing != 0 {
		t.Fatalf("windows %d, triggers %+v, ended %v, missing %d; want 2 windows named rto, ended, none missing",
			sum.Windows, sum.Triggers, sum.Ended, sum.Missing)
	}
	for s := int64(0); s < 150; s++ {
		inside := s >= 25 && s <= 33 || s >= 85 && s <= 93
		if inside && secs[s] != 100 {
			t.Errorf("second %d, inside a window: %d events, want all 100", s, secs[s])
		}
		// A block (a second) on either edge may come along whole.
		if !inside && secs[s] > 0 && !(s == 24 || s == 34 || s == 84 || s == 94) {
			t.Errorf("second %d, outside the windows: %d events", s, secs[s])
		}
	}
	st := f.Stats()
	if st.Windows != 2 || st.Firings != 2 || st.Suppressed != 0 || st.Blocks > 24 {
		t.Errorf("stats %+v", st)
	}
}

// stat of a flight trace: the span, each connection's seconds and bytes
// are the windows', not the minute between them that nothing recorded.
func TestStatOfAFlightTraceLeavesTheGapsOut(t *testing.T) {
	o := FlightOptions{Triggers: rtoTrigger(t), Pre: 5 * time.Second, Post: 3 * time.Second, RingBytes: 8 << 20}
	_, out := flightRun(t, o, 150, 100, func(at int64) bool { return at == 30*sec || at == 90*sec })
	r, err := trace.NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	sum, st := analyze.NewSummary(), analyze.NewStat()
	sum.OnWindow = st.Gap
	if err := analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error { st.Add(ev); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(st.Connections) != 1 {
		t.Fatalf("%d connections", len(st.Connections))
	}
	c := st.Connections[0]
	// Each window holds 9 to 11 whole seconds (its blocks), so 18 to 22 s.
	if s := st.Seconds(); s < 17 || s > 23 {
		t.Errorf("the trace spans %.1f s; want the windows' 18-22, not the 70 from first to last event", s)
	}
	if d := c.Duration(); d < 17 || d > 23 {
		t.Errorf("the connection lasted %.1f s; want the windows' 18-22", d)
	}
	if mb := float64(c.BytesAcked) / 1e6; mb < 16 || mb > 23 {
		t.Errorf("%.1f MB acknowledged; want the windows' 17-22 at 1 MB/s, not the 70 across the gap", mb)
	}
	if rate := c.Throughput() / 1e6; rate < 0.95 || rate > 1.05 {
		t.Errorf("throughput %.2f MB/s, want 1", rate)
	}
}

// Firings within a window extend it, and it stays one window.
func TestFlightMergesOverlappingWindows(t *testing.T) {
	o := FlightOptions{Triggers: rtoTrigger(t), Pre: 2 * time.Second, Post: 2 * time.Second, RingBytes: 8 << 20}
	_, out := flightRun(t, o, 60, 10, func(at int64) bool { return at == 20*sec || at == 23*sec || at == 26*sec })
	sum, secs := readFlight(t, out)
	if sum.Windows != 1 || len(sum.Triggers) != 3 {
		t.Fatalf("windows %d, triggers %d; want 1 and 3", sum.Windows, len(sum.Triggers))
	}
	if secs[27] != 10 || secs[18] != 10 || secs[40] != 0 {
		t.Errorf("seconds 18, 27, 40: %d, %d, %d events; want 10, 10, 0", secs[18], secs[27], secs[40])
	}
}

// A trigger that fires ten times a second for two minutes: windows are
// bounded in length and in number per minute, the rest are counted, and
// most of the recording stays out.
func TestFlightRateLimitsATriggerStorm(t *testing.T) {
	o := FlightOptions{Triggers: rtoTrigger(t), Pre: time.Second, Post: time.Second, RingBytes: 8 << 20,
		MaxWindowsPerMinute: 2, MaxWindow: 10 * time.Second}
	f, out := flightRun(t, o, 120, 10, func(at int64) bool { return true })
	sum, secs := readFlight(t, out)
	st := f.Stats()
	if st.Windows > 5 || st.Suppressed == 0 || len(secs) > 5*13 {
		t.Errorf("%d windows, %d suppressed, %d seconds written of 120", st.Windows, st.Suppressed, len(secs))
	}
	var suppressed uint64
	for _, tr := range sum.Triggers {
		suppressed += tr.Suppressed
	}
	if suppressed == 0 || len(sum.Triggers) > st.Windows*16 {
		t.Errorf("the trace counts %d suppressed firings in %d trigger records", suppressed, len(sum.Triggers))
	}
}

// The ring's size bounds the past it keeps; a window that wanted more says so.
func TestFlightRingStaysWithinItsSize(t *testing.T) {
	o := FlightOptions{Triggers: rtoTrigger(t), Pre: time.Minute, Post: time.Second, RingBytes: 1 << 20}
	f, out := flightRun(t, o, 90, 2000, func(at int64) bool { return at == 80*sec })
	_, secs := readFlight(t, out)
	if st := f.Stats(); st.ShortPre != 1 || len(secs) > 12 {
		t.Errorf("short past %d, %d seconds written; want 1 and only what 1 MiB holds", st.ShortPre, len(secs))
	}
	if f.ringBytes > 1<<20+300<<10 {
		t.Errorf("the ring holds %d bytes", f.ringBytes)
	}
}

// A bare drop trigger leaves a host's routine drops alone (as the doctor
// does: closed sockets, old duplicates, what TIME_WAIT absorbs); a reason
// named, or any other drop, fires. The names come from the trace's own
// enum and symbol records, as the recorder writes them.
func TestDropTriggerLeavesRoutineDropsAlone(t *testing.T) {
	const (
		reasonNotSpecified = 2
		reasonNoSocket     = 3
		reasonNetfilter    = 8
		atTCPRcv           = 0xffffffff81000000
		atNFHook           = 0xffffffff82000000
	)
	firings := func(expr string, reason uint32, location uint64) uint64 {
		t.Helper()
		trig, err := ParseTrigger(expr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := NewFlight(io.Discard, FlightOptions{Triggers: []Trigger{trig}, Pre: time.Second, Post: time.Second,
			RingBytes: 1 << 20, MaxWindowsPerMinute: 6})
		if err != nil {
			t.Fatal(err)
		}
		w, err := tracetest.NewWriter(f, trace.NativeOrder)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AppendEnum(trace.Enum{Kind: trace.EnumDropReason, Names: map[uint32]string{
			reasonNotSpecified: "NOT_SPECIFIED", reasonNoSocket: "NO_SOCKET", reasonNetfilter: "NETFILTER_DROP"}}); err != nil {
			t.Fatal(err)
		}
		for _, s := range []trace.Symbol{{Addr: atTCPRcv, Name: "tcp_v4_rcv+0x1a4"}, {Addr: atNFHook, Name: "nf_hook_slow+0x96"}} {
			if err := w.AppendSymbol(s); err != nil {
				t.Fatal(err)
			}
		}
		ev := &wire.SkbDropEvent{Location: location, Reason: reason, Cnt: 1}
		ev.Hdr.TsNs, ev.Hdr.Type = 1e18, uint16(event.TypeSkbDrop)
		if err := w.Event(uint16(event.TypeSkbDrop), ev); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		return f.Stats().Firings
	}
	for _, c := range []struct {
		expr     string
		reason   uint32
		location uint64
		want     uint64
	}{
		{"drop", reasonNotSpecified, atTCPRcv, 0}, // a segment TIME_WAIT absorbed
		{"drop", reasonNoSocket, atTCPRcv, 0},
		{"drop", reasonNetfilter, atNFHook, 1},
		{"drop", reasonNotSpecified, atNFHook, 1}, // unnamed, but not where TIME_WAIT drops
		{"drop:NO_SOCKET", reasonNoSocket, atTCPRcv, 1},
		{"drop:NETFILTER_DROP", reasonNoSocket, atTCPRcv, 0},
	} {
		if got := firings(c.expr, c.reason, c.location); got != c.want {
			t.Errorf("%s on reason %d at %#x: %d firings, want %d", c.expr, c.reason, c.location, got, c.want)
		}
	}
}

// Malformed triggers are refused with what is wrong.
func TestParseTriggerRefusesMalformedOnes(t *testing.T) {
	for _, s := range []string{"", "rtox", "drop:", "drop@", "drop@a/b", "srtt>", "srtt>-1ms", "srtt>fast", "sendlim:cwnd", "sendlim:bogus>1s", "sendlim:ok>1s", "sendlim:swnd>0s"} {
		if _, err := ParseTrigger(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	for _, s := range []string{"rto", "drop", "drop:netfilter_drop", "drop@veth0", "drop:QDISC_DROP@eth0", "srtt>50ms", "zero-window", "reset", "sendlim:swnd>200ms"} {
		if _, err := ParseTrigger(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// BenchmarkFlightArmedNothingFiring is the flight recorder's own cost with a
// trigger armed that never fires: reading each block for its events, and
// keeping the ring. Reported per event, against writing the same blocks to
// a file as record does without --trigger (the kernel side is the same).
func BenchmarkFlightArmedNothingFiring(b *testing.B) {
	var blocks bytes.Buffer
	w, err := tracetest.NewWriter(&blocks, trace.NativeOrder)
	if err != nil {
		b.Fatal(err)
	}
	const events = 200000
	for i := 0; i < events; i++ {
		ev := tracetest.Sendlim(uint64(i), 1e18+uint64(i)*1e4, 1e18, 0, 0x1000, testAddrs, uint8(event.SendlimCwnd), 1, 1)
		if err := w.Event(uint16(event.TypeTCPSendlim), ev); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	// The writes a recording makes: the header, then its blocks.
	r, err := trace.NewReader(bytes.NewReader(blocks.Bytes()))
	if err != nil {
		b.Fatal(err)
	}
	writes := [][]byte{blocks.Bytes()[:r.Offset()]}
	for rest := blocks.Bytes()[r.Offset():]; len(rest) > 0; {
		n := 16 + int(trace.NativeOrder.Uint32(rest[4:]))
		writes = append(writes, rest[:n])
		rest = rest[n:]
	}
	trigger, err := ParseTrigger("srtt>10s")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := NewFlight(io.Discard, FlightOptions{Triggers: []Trigger{trigger}, Pre: 10 * time.Second, Post: time.Second, RingBytes: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range writes {
			if _, err := f.Write(p); err != nil {
				b.Fatal(err)
			}
		}
		if f.ringBytes > 64<<20 {
			b.Fatalf("the ring holds %d bytes", f.ringBytes)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
}
