package timeline

import (
	"math"
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var (
	sender   = netip.MustParseAddrPort("10.0.0.1:40000")
	receiver = netip.MustParseAddrPort("10.0.0.2:5201")
)

const t0 = int64(1_700_000_000_000_000_000)

func sendlim(begin, end int64, reason event.SendlimReason, sent uint32) *event.Event {
	ev := &event.Event{Type: event.TypeTCPSendlim, Time: t0 + end, Begin: t0 + begin}
	ev.Sendlim = event.TCPSendlim{Socket: event.Socket{Sock: 1, Local: sender, Peer: receiver, Netns: 7},
		Reason: reason, Begin: t0 + begin, SentPkts: sent, MSS: 1000, Cwnd: 10, InFlight: 8}
	return ev
}

func TestSendLimitSharesAndBands(t *testing.T) {
	b := NewBuilder(t0)
	// 800 ms waiting for send-buffer space, then 200 ms sending freely.
	b.Add(sendlim(0, 800e6, event.SendlimSndbuf, 800))
	b.Add(sendlim(800e6, 1000e6, event.SendlimOK, 200))
	tl := b.Build(func(uint32) string { return "blue" })
	if len(tl.Flows) != 1 {
		t.Fatalf("flows = %d, want 1", len(tl.Flows))
	}
	f := tl.Flows[0]
	if f.Netns != "blue" || f.Local != sender {
		t.Errorf("flow = %s", f.Label())
	}
	if math.Abs(f.LimitShare["sndbuf"]-0.8) > 0.01 || math.Abs(f.LimitShare["ok"]-0.2) > 0.01 {
		t.Errorf("shares = %v, want sndbuf 0.8, ok 0.2", f.LimitShare)
	}
	if len(f.Limits) != 2 || f.Limits[0].Reason != "sndbuf" || f.Limits[1].Reason != "ok" {
		t.Fatalf("bands = %+v, want one sndbuf then one ok", f.Limits)
	}
	if math.Abs(f.Limits[0].To-0.8) > tl.BinSeconds {
		t.Errorf("the sndbuf band ends at %.3f s, want 0.8", f.Limits[0].To)
	}
	if f.Bytes != 1000*1000 {
		t.Errorf("bytes = %.0f, want 1e6 (1000 segments of 1000 bytes)", f.Bytes)
	}
	var sum float64
	for _, p := range f.Throughput {
		sum += p.V / 8 * tl.BinSeconds
	}
	if math.Abs(sum-1e6) > 1 {
		t.Errorf("throughput integrates to %.0f bytes, want 1e6", sum)
	}
}

func TestBinsStayBoundedOverTenMinutes(t *testing.T) {
	b := NewBuilder(t0)
	reasons := []event.SendlimReason{event.SendlimCwnd, event.SendlimOK, event.SendlimSndbuf}
	const step = int64(1e6)
	for i := int64(0); i < 600_000; i++ {
		b.Add(sendlim(i*step, (i+1)*step, reasons[i%3], 10))
	}
	tl := b.Build(nil)
	f := tl.Flows[0]
	if len(f.Throughput) > MaxBins || len(f.Cwnd) > MaxBins {
		t.Errorf("%d throughput points, %d cwnd points; at most %d", len(f.Throughput), len(f.Cwnd), MaxBins)
	}
	if tl.BinSeconds < 600.0/MaxBins {
		t.Errorf("bins of %.3f s cannot cover 600 s in %d bins", tl.BinSeconds, MaxBins)
	}
	for _, r := range []string{"cwnd", "ok", "sndbuf"} {
		if math.Abs(f.LimitShare[r]-1.0/3) > 0.01 {
			t.Errorf("share of %s = %.3f, want a third", r, f.LimitShare[r])
		}
	}
}

func TestDropsOfDataAndAcksJoinTheFlow(t *testing.T) {
	b := NewBuilder(t0)
	b.Add(sendlim(0, 100e6, event.SendlimCwnd, 100))
	data := &event.Event{Type: event.TypeSkbDrop, Time: t0 + 50e6, Socket: event.Socket{Local: sender, Peer: receiver}}
	data.Drop.Cnt = 3
	ack := &event.Event{Type: event.TypeSkbDrop, Time: t0 + 50e6, Socket: event.Socket{Local: receiver, Peer: sender}}
	ack.Drop.Cnt = 2
	other := &event.Event{Type: event.TypeSkbDrop, Time: t0 + 50e6, Socket: event.Socket{Local: netip.MustParseAddrPort("10.9.9.9:1"), Peer: receiver}}
	other.Drop.Cnt = 100
	for _, ev := range []*event.Event{data, ack, other} {
		b.Add(ev)
	}
	tl := b.Build(nil)
	var n uint64
	for _, m := range tl.Flows[0].Drops {
		n += m.N
	}
	if n != 5 {
		t.Errorf("drops on the flow = %d, want 5 (3 of its data, 2 of its ACKs, none of another flow)", n)
	}
}

func TestSocketSamplesGiveThroughputAndRTT(t *testing.T) {
	b := NewBuilder(t0)
	// 1 MB acknowledged every 100 ms for a second: 80 Mbit/s.
	for i := int64(0); i <= 10; i++ {
		b.AddSocketSample(t0+i*100e6, 7, sender, receiver, uint64(i)*1_000_000, 20, 15, 300)
	}
	// A socket that never moves data is not a sender; one that sends a
	// few requests is left out beside a bulk stream, and counted.
	b.AddSocketSample(t0, 7, receiver, sender, 0, 10, 0, 100)
	control := netip.MustParseAddrPort("10.0.0.1:40001")
	b.AddSocketSample(t0, 7, control, receiver, 0, 10, 1, 100)
	b.AddSocketSample(t0+500e6, 7, control, receiver, 300, 10, 1, 100)
	tl := b.Build(nil)
	if len(tl.Flows) != 1 || tl.OtherFlows != 1 {
		t.Fatalf("flows = %d (%d left out), want only the bulk sender, the control connection left out", len(tl.Flows), tl.OtherFlows)
	}
	f := tl.Flows[0]
	if f.Bytes != 10e6 {
		t.Errorf("bytes = %.0f, want 10e6", f.Bytes)
	}
	mid := f.Throughput[len(f.Throughput)/2].V
	if math.Abs(mid-80e6) > 1e6 {
		t.Errorf("throughput mid-run = %.0f bit/s, want 80e6", mid)
	}
	if len(f.SRTT) == 0 || f.SRTT[0].V != 300 {
		t.Errorf("srtt = %v, want 300 µs", f.SRTT)
	}
}

func TestCPUSharesFromProcStatAndFromSoftirq(t *testing.T) {
	b := NewBuilder(t0)
	b.AddCPUSample(t0+100e6, 0, CPUTicks{User: 3, System: 1, Softirq: 1, Idle: 5})
	soft := &event.Event{Type: event.TypeSoftirq, CPU: 1, Begin: t0, Time: t0 + 100e6}
	soft.Softirq.Vec, soft.Softirq.TimeNs = 3, 25e6
	b.Add(soft)
	tl := b.Build(nil)
	if len(tl.CPUs) != 2 {
		t.Fatalf("cpus = %d, want 2", len(tl.CPUs))
	}
	c0, c1 := tl.CPUs[0], tl.CPUs[1]
	if !c0.FromProcStat || len(c0.User) != 1 || c0.User[0].V != 0.3 || c0.Idle[0].V != 0.5 {
		t.Errorf("cpu 0 = %+v, want user 30%%, idle 50%%", c0)
	}
	if c1.FromProcStat || len(c1.Softirq) == 0 {
		t.Fatalf("cpu 1 = %+v, want softirq shares from the trace", c1)
	}
	for _, p := range c1.Softirq {
		if math.Abs(p.V-0.25) > 1e-9 {
			t.Errorf("cpu 1 softirq share %.3f at %.3f s, want 0.25", p.V, p.T)
		}
	}
}

// The legend's shares are stat's: whole runs, also the part of a run
// before the timeline began, which the bins leave out.
func TestLimitSharesCountWholeRunsAsStatDoes(t *testing.T) {
	b := NewBuilder(t0)
	// A run that began 3 s before the timeline, then 1 s sending freely.
	b.Add(sendlim(-3000e6, 1000e6, event.SendlimSndbuf, 800))
	b.Add(sendlim(1000e6, 2000e6, event.SendlimOK, 200))
	f := b.Build(func(uint32) string { return "blue" }).Flows[0]
	if math.Abs(f.LimitShare["sndbuf"]-0.8) > 0.001 || math.Abs(f.LimitShare["ok"]-0.2) > 0.001 {
		t.Errorf("shares = %v, want stat's sndbuf 0.8 and ok 0.2 of the 5 s of runs", f.LimitShare)
	}
}

// A tcp_stage interval's waits land in the bins it spans, as each stage's
// mean over the bytes timed.
func TestStagesAreMeansOverTheBytesTimed(t *testing.T) {
	b := NewBuilder(t0)
	b.Add(sendlim(0, 1000e6, event.SendlimCwnd, 1000))
	st := &wire.TcpStageEvent{}
	for k, us := range []uint64{80_000, 5_000, 2, 40} {
		st.Stage[k].Count, st.Stage[k].SumNs = 10, 10*us*1000
	}
	b.Add(&event.Event{Type: event.TypeTCPStage, Begin: t0, Time: t0 + 1000e6, Stage: st,
		Socket: event.Socket{Sock: 1, Local: sender, Peer: receiver, Netns: 7}})
	tl := b.Build(func(uint32) string { return "blue" })
	if len(tl.Flows) != 1 || len(tl.Flows[0].StageUs) == 0 {
		t.Fatalf("flows %+v", tl.Flows)
	}
	for _, p := range tl.Flows[0].StageUs {
		if math.Abs(p.Us[0]-80_000) > 1 || math.Abs(p.Us[1]-5_000) > 1 || math.Abs(p.Us[3]-40) > 0.01 {
			t.Fatalf("bin at %.3f s: %v, want 80000, 5000, 2, 40 us", p.T, p.Us)
		}
	}
}
