package doctor

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Noise: connection churn beside a healthy stream leaves segments for
// closed connections that their TIME_WAIT absorbs (1251 drops at
// tcp_v4_rcv), and a second stream over loopback shares the CPUs. Neither
// throttles the stream: no warning.
func TestNoiseOfChurnAndALoopbackStreamIsNoWarning(t *testing.T) {
	for _, name := range []string{"noise-churn", "noise-loopback"} {
		rep := Diagnose(load(t, "lab/"+name+".json"))
		if got := top(rep); got != "" {
			t.Errorf("%s: top %q, want none; findings %v", name, got, ids(rep.Findings))
		}
	}
	// The last segment TIME_WAIT absorbed may belong to a churn connection
	// tcp_info saw: that does not make the drops loss.
	ev := load(t, "lab/noise-churn.json")
	for i := range ev.Drops {
		if d := &ev.Drops[i]; strings.HasPrefix(d.Location, "tcp_v4_rcv") {
			ev.Flows = append(ev.Flows, Flow{Netns: ev.Flows[0].Netns, Local: d.Dst, Peer: d.Src, Seconds: 0.01})
		}
	}
	if got := top(Diagnose(ev)); got != "" {
		t.Errorf("TIME_WAIT's drops tied to a churn connection: top %q, want none", got)
	}
}

// iperf3's reader, single-threaded and CPU-bound, holds a window of many
// megabytes; its last tcp_info reading, as the socket closes, shows 62 KB.
// The largest window read decides whether the buffer is capped: it is not,
// and the missing GRO is the finding.
func TestALastSmallWindowDoesNotMakeACappedBuffer(t *testing.T) {
	ev := load(t, "lab/variant-gro-off-iperf3.json")
	if got := top(Diagnose(ev)); got != "offload-disabled" {
		t.Fatalf("top %q, want offload-disabled", got)
	}
	for i := range ev.Flows {
		ev.Flows[i].MaxSndWnd = 0 // evidence that kept only the last reading
	}
	capped := false
	for _, f := range Diagnose(ev).Findings {
		capped = capped || f.ID == "rwnd-limited" && f.Severity >= finding.Warning && strings.Contains(strings.Join(f.Evidence, "\n"), "stayed at or below")
	}
	if !capped {
		t.Errorf("with the last reading alone no capped window is found: the fixture no longer shows the closing socket's small window")
	}
}

// A python3 reader that stops for 400 ms at a time over veth: the window
// stays shut for tens of milliseconds per stall while the CPUs idle. That
// is no CPU-bound reader (whose stalls last a few milliseconds here), so
// rwnd-limited stays a warning; with the stalls as short as such a reader's,
// the same evidence is lowered to info.
func TestAReaderThatStopsIsNotACPUBoundReader(t *testing.T) {
	// Another run: [swnd] only 25 % of the sender's time, the silence after
	// each shut window's last decision counted for no reason.
	if got := top(Diagnose(load(t, "lab/variant-rwnd-stalled-reader-2.json"))); got != "rwnd-limited" {
		t.Errorf("second run: top %q, want rwnd-limited", got)
	}
	ev := load(t, "lab/variant-rwnd-stalled-reader.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "rwnd-limited" {
		t.Fatalf("top %q, want rwnd-limited; findings %v", got, ids(rep.Findings))
	}
	if f := rep.Top(finding.Warning); !strings.Contains(strings.Join(f.Remedy, "\n"), "stops reading") {
		t.Errorf("the remedy does not point at the reader: %v", f.Remedy)
	} else if f.Limit == nil || f.Limit.Kind != KindReadPace || f.Limit.SetBy == nil || !strings.HasPrefix(f.Remedy[0], "in python3[") {
		t.Errorf("the reader is not the limit, named: %+v, remedy %q", f.Limit, f.Remedy)
	}
	s := flowOf(ev, true)
	s.LimitMeanRunUs["swnd"], s.ZeroWindowProbed = 4000, 0
	if got := top(Diagnose(ev)); got == "rwnd-limited" {
		t.Errorf("a reader that only falls behind (4 ms stalls) still convicts the window")
	}
}

// Noise: a second, slow flow beside a healthy stream. Under CI's load the
// stream waited for send-buffer space 33-46 % of its time with its round
// trip 27-89 times its minimum (544 us against 20 here): the buffer's bytes
// queued at the busy receiver, and a larger buffer would only lengthen that
// queue. No warning; nor for 39 % at 7x under a limit 16 times what is in
// flight; the same waits under a limit no larger than that are one, and the
// buffer-capped fault stays one, at 4-6x and at 20x (a loaded host) alike:
// its sender waits most of its time (73-99 %).
func TestNoiseOfASecondFlowWithAStandingQueueIsNoSendBufferWarning(t *testing.T) {
	ev := load(t, "lab/noise-second-slow-flow.json")
	var stream *Flow
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.LimitShares["tsq"] > 0.1 {
			stream = f
		}
	}
	stream.LimitShares = map[string]float64{"app": 0.47, "cwnd": 0.01, "ok": 0.01, "sndbuf": 0.33, "tsq": 0.17}
	stream.RTTus, stream.MinRTTus = 544, 20
	rep := Diagnose(ev)
	if got := top(rep); got != "" {
		t.Fatalf("top %q, want none; findings %v", got, ids(rep.Findings))
	}
	if !slices.Contains(ids(rep.Findings), "sndbuf-limited/info") {
		t.Errorf("the waits are not reported at all: %v", ids(rep.Findings))
	}
	// CI-like noise on this host: 39 % waiting at 7 times the minimum round
	// trip, under a 4 MB limit 16 times what the stream kept in flight.
	stream.RTTus, stream.MinRTTus = 134, 19
	stream.LimitShares = map[string]float64{"app": 0.41, "cwnd": 0.02, "ok": 0.02, "sndbuf": 0.39, "tsq": 0.16}
	if got := top(Diagnose(ev)); got != "" {
		t.Errorf("39 %% waits well below a 4 MB limit: top %q, want none", got)
	}
	// The same waits under a limit no larger than what is in flight.
	stream.RTTus, stream.MinRTTus = 110, 20
	inFlight := int(stream.SendBps() / 8 * 110e-6)
	ns := ev.NamespaceNamed(stream.Netns)
	ns.Sysctls["net.ipv4.tcp_wmem"] = fmt.Sprintf("4096 %d %d", inFlight/2, inFlight)
	if got := top(Diagnose(ev)); got != "sndbuf-limited" {
		t.Errorf("the same waits with srtt 110 us against 20 under a %d-byte limit: top %q, want sndbuf-limited", inFlight, got)
	}
	capped := load(t, "lab/sndbuf-limited.json")
	if got := top(Diagnose(capped)); got != "sndbuf-limited" {
		t.Errorf("the buffer-capped fault: top %q, want sndbuf-limited", got)
	}
	// The same fault on a loaded host: held 95 %, srtt 471 us against 23.
	for i := range capped.Flows {
		if f := &capped.Flows[i]; f.LimitShares["sndbuf"] > 0.5 {
			f.RTTus, f.MinRTTus = 471, 23
		}
	}
	if got := top(Diagnose(capped)); got != "sndbuf-limited" {
		t.Errorf("the buffer-capped fault behind a queue: top %q, want sndbuf-limited", got)
	}
}

// Noise: iperf3 --bidir, one thread reading and writing both directions on
// CPUs busy 89-97 %. The slower direction's sender waits on a window its
// busy reader reopens in bursts (35 ms shut at a time): the ends hold it,
// not the path, and the reader is CPU-bound. No warning; were the same
// sender held by its congestion window, the asymmetry would be the path's.
// The second run's receiving end measured the slow direction a little
// faster than its sender did: the sender must still be found.
func TestNoiseOfABidirectionalIperf3IsNoWarning(t *testing.T) {
	if got := top(Diagnose(load(t, "lab/noise-iperf3-bidir-2.json"))); got != "" {
		t.Errorf("second run: top %q, want none", got)
	}
	ev := load(t, "lab/noise-iperf3-bidir.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "" {
		t.Fatalf("top %q, want none; findings %v", got, ids(rep.Findings))
	}
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.LimitShares["swnd"] > 0.5 {
			f.LimitShares["cwnd"], f.LimitShares["swnd"] = f.LimitShares["swnd"], f.LimitShares["cwnd"]
		}
	}
	if got := top(Diagnose(ev)); got != "asymmetric-path" {
		t.Errorf("a slow direction held by its congestion window: top %q, want asymmetric-path", got)
	}
}

// A tbf on an ifb device that the receiver's ingress redirects to: no socket
// sends through the ifb, so the shaper's load is the device's own counters
// (200 Mbit/s against a rate of 200, 33461 of 33498 packets over the limit).
func TestAShaperOnAnIfbIsJudgedByItsCounters(t *testing.T) {
	ev := load(t, "lab/variant-rate-ifb-ingress.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "rate-shaped" {
		t.Fatalf("top %q, want rate-shaped; findings %v", got, ids(rep.Findings))
	}
	if f := rep.Top(finding.Warning); !strings.Contains(f.Scope, "skbi") {
		t.Errorf("the finding names %s, not the ifb", f.Scope)
	}
}

// A router namespace whose link to the receiver has MTU 1400 while nftables
// drops its "fragmentation needed" replies; both ends have MTU 1500. The
// flow stalls in retransmission timeouts (90 % of its time) after 17
// segments: few retransmissions, few drops, never a healthy run. The drops
// of its packets as too big on a device the doctor does not observe, with
// the ICMP to the sender dropped, name the black hole; the stall alone is
// packet-loss.
func TestAPathMTUBlackHoleBeyondTheEndsIsNamed(t *testing.T) {
	ev := load(t, "lab/variant-mtu-pmtu-blackhole.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "mtu-mismatch" {
		t.Fatalf("top %q, want mtu-mismatch; findings %v", got, ids(rep.Findings))
	}
	if f := rep.Top(finding.Warning); f.Severity != finding.Critical || !strings.Contains(strings.Join(f.Evidence, "\n"), "does not observe") {
		t.Errorf("the black hole is %s: %v", f.Severity, f.Evidence)
	}
	var drops []Drop
	for _, d := range ev.Drops {
		if d.Reason != "PKT_TOO_BIG" {
			drops = append(drops, d)
		}
	}
	ev.Drops = drops
	if got := top(Diagnose(ev)); got != "packet-loss" {
		t.Errorf("a flow stalled in timeouts with no drops seen: top %q, want packet-loss", got)
	}
	flowOf(ev, true).BytesAcked = 0 // stalled from its first segment
	if got := top(Diagnose(ev)); got != "packet-loss" {
		t.Errorf("a flow stalled before anything was acknowledged: top %q, want packet-loss", got)
	}
}

// A router namespace the doctor does not observe shapes to 200 Mbit/s with
// tbf. The flow waits for its congestion window 99 % of the time with an
// srtt of 20.6 ms against a minimum of 52 us: the queue of a hop elsewhere.
// Its one queue drop is the symptom. The same flow with an srtt near its
// minimum is random loss, not a shaper.
func TestAShaperOnAnUnobservedHopIsFoundByItsQueue(t *testing.T) {
	ev := load(t, "lab/variant-rate-router-tbf.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "rate-shaped" {
		t.Fatalf("top %q, want rate-shaped; findings %v", got, ids(rep.Findings))
	}
	flowOf(ev, true).RTTus = 180
	for _, f := range Diagnose(ev).Findings {
		if f.ID == "rate-shaped" {
			t.Errorf("a flow without a queue is called shaped: %v", f.Evidence)
		}
	}
}

// On Debian 13's kernel under QEMU (TCG), the lab's packet-loss fault: nft
// dropped 14 of the flow's packets, 365 of 45415 segments were retransmitted,
// and the emulated CPUs, slow to forward, let the round trip grow to 6 ms
// against a minimum of 127 us. The drops, located and with their reason,
// convict; the longer round trip must not pass for a shaper that explains
// them. Without the located drops it is a queue on the path again.
func TestLocatedDropsOutrankAQueueInferredFromTheRoundTrip(t *testing.T) {
	ev := load(t, "lab/packet-loss.json")
	s := flowOf(ev, true)
	s.RTTus, s.MinRTTus = 6039, 127
	s.LimitShares = map[string]float64{"cwnd": 0.9, "app": 0.1}
	snd := nsNamed(ev, "-snd")
	snd.Counters["Tcp.RetransSegs"], snd.Counters["Tcp.OutSegs"] = 365, 45415
	for i := range ev.Drops {
		if ev.Drops[i].Reason == "NETFILTER_DROP" {
			ev.Drops[i].Count = 14
		}
	}
	rep := Diagnose(ev)
	if got := top(rep); got != "packet-loss" {
		t.Fatalf("top %q, want packet-loss; findings %v", got, ids(rep.Findings))
	}
	ev.Drops = slices.DeleteFunc(ev.Drops, func(d Drop) bool { return d.Reason == "NETFILTER_DROP" })
	if got := top(Diagnose(ev)); got != "rate-shaped" {
		t.Errorf("retransmissions without located drops, behind a grown round trip: top %q, want rate-shaped", got)
	}
}

// Built outside the lab: a python3 stream to a reader on an unpinned CPU.
// The sender retransmitted 17623 segments and entered Recovery 633 times,
// but its receivers proved 16010 of those retransmissions needless (DSACK):
// reordering between CPUs, whose window cuts TCP undoes. Waiting for the
// congestion window (74 %) after such "losses" convicts nothing.
func TestSpuriousRetransmissionsDoNotMakeTheWindowTheLimit(t *testing.T) {
	ev := load(t, "outside/reordered-cwnd.json")
	for _, f := range Diagnose(ev).Findings {
		if f.ID == "cwnd-limited" && f.Severity >= finding.Warning {
			t.Errorf("cwnd-limited after needless retransmissions: %v", f.Evidence)
		}
	}
	snd := ev.NamespaceNamed("st-a")
	snd.Counters["TcpExt.TCPDSACKRecvSegs"] = 0
	if got := top(Diagnose(ev)); got != "cwnd-limited" && got != "packet-loss" {
		t.Errorf("the same retransmissions, not proven needless: top %q", got)
	}
}

// Built outside the lab: a reader stopped with SIGSTOP for 300 ms at a time
// behind an autotuned buffer of 26 MB. The window hardly closes, but the
// receiver acknowledges only on its delayed-ACK timer while the application
// does not read: srtt 23.6 ms against 4 us, the sender waiting for its
// congestion window 86 % of the time. That is the reader, not a hop's
// queue; without the receiver's zero-window counters it would be the path.
func TestAReaderThatHoldsItsACKsIsNotAQueueOnThePath(t *testing.T) {
	ev := load(t, "outside/stopped-reader-late-acks.json")
	rep := Diagnose(ev)
	if got := top(rep); got != "rwnd-limited" {
		t.Fatalf("top %q, want rwnd-limited; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "rate-shaped" {
			t.Errorf("the late ACKs read as a queue on the path: %v", f.Evidence)
		}
	}
	rcv := ev.NamespaceNamed("st-b")
	rcv.Counters["TcpExt.TCPToZeroWindowAdv"], rcv.Counters["TcpExt.TCPWantZeroWindowAdv"] = 0, 0
	if got := top(Diagnose(ev)); got != "rate-shaped" {
		t.Errorf("without the reader's zero windows: top %q, want rate-shaped (a queue somewhere)", got)
	}
}

// In make test the router's shaper went unnamed: its receiver advertised one
// zero window (at slow start or close) and the queue was taken for a reader
// holding its ACKs. The sender never met a shut window; the queue stands.
func TestALoneZeroWindowDoesNotHideAQueueOnThePath(t *testing.T) {
	ev := load(t, "lab/variant-rate-router-tbf.json")
	nsNamed(ev, "-rcv").Counters["TcpExt.TCPToZeroWindowAdv"] = 1
	if got := top(Diagnose(ev)); got != "rate-shaped" {
		t.Errorf("top %q, want rate-shaped", got)
	}
}

// Seen here in the router tbf variant: after the tbf dropped segments, the
// out-of-order data behind them filled the receiver's buffer to one zero
// window, and the sender waited for that window 1 % of the time; from 2 % the
// queue would be taken for a reader holding its ACKs and go unnamed. The
// queue's own drops of the flow's packets convict it; without them the same
// counters still name the reader.
func TestZeroWindowsFromALossDoNotHideTheQueueThatDroppedIt(t *testing.T) {
	ev := load(t, "lab/variant-rate-router-tbf.json")
	nsNamed(ev, "-rcv").Counters["TcpExt.TCPToZeroWindowAdv"] = 1
	s := flowOf(ev, true)
	s.LimitShares = map[string]float64{"cwnd": 0.95, "swnd": 0.05}
	rep := Diagnose(ev)
	if got := top(rep); got != "rate-shaped" {
		t.Errorf("top %q, want rate-shaped", got)
	}
	for _, f := range rep.Findings {
		if f.ID == "rwnd-limited" {
			t.Errorf("the loss's zero window read as a reader holding its ACKs: %v", f.Evidence)
		}
	}
	var kept []Drop
	for _, d := range ev.Drops {
		if !strings.HasPrefix(d.Reason, "QDISC_") {
			kept = append(kept, d)
		}
	}
	ev.Drops = kept
	for _, f := range Diagnose(ev).Findings {
		if f.ID == "rate-shaped" {
			t.Errorf("no queue's drop, the receiver's zero window: still read as a queue on the path: %v", f.Evidence)
		}
	}
}

// In make test, iperf3 with 100-byte writes and reads: the receiver, making
// 274567 recv calls/s of 100 bytes, kept its window at 6 KB, so the sender
// waited for it 99 % of the time. The tiny reads are the cause; the window
// is their symptom and ranks below them.
func TestTinyReadsRankAboveTheWindowTheyKeepFull(t *testing.T) {
	ev := load(t, "lab/variant-nagle-small-writes.json")
	s := flowOf(ev, true)
	s.LimitShares = map[string]float64{"swnd": 0.99, "app": 0.01}
	s.SndWnd, s.MaxSndWnd = 6144, 6144
	rep := Diagnose(ev)
	if got := top(rep); got != "small-packet-bound" {
		t.Fatalf("top %q, want small-packet-bound; findings %v", got, ids(rep.Findings))
	}
	for _, f := range rep.Findings {
		if f.ID == "rwnd-limited" && f.Severity >= finding.Warning {
			t.Errorf("rwnd-limited stays a warning beside the tiny reads that explain it")
		}
	}
}

// In make test the python3 hog pinned to the receiver's CPU got 40 % of it
// in user space, at the bar for user time from anyone: the receiver's
// softirq work takes its share first. Per process, the hog is the only one
// there that moved no traffic: a quarter of the CPU convicts it, while the
// streams' own endpoints (iperf3 at 27 % on a loopback stream) and the
// observer itself stay the healthy limit.
func TestBusyCPUWorkOfAProcessThatMovesNoTrafficCompetes(t *testing.T) {
	ev := load(t, "lab/noise-loopback.json")
	ev.ObserverPID = 27496
	ev.Processes = []ProcessCPU{
		{PID: 30040, Comm: "iperf3", CPU: 0, User: 0.26, System: 0.2},
		{PID: 27496, Comm: "skbtrace", CPU: 0, User: 0.26},
	}
	if got := top(Diagnose(ev)); got != "" {
		t.Fatalf("the stream's own endpoint and the observer: top %q, want healthy", got)
	}
	ev.Processes = append(ev.Processes, ProcessCPU{PID: 4242, Comm: "python3", CPU: 0, User: 0.26})
	rep := Diagnose(ev)
	if got := top(rep); got != "cpu-saturated" {
		t.Fatalf("a process with no socket call at 26 %% of a busy CPU: top %q, want cpu-saturated", got)
	}
	if ev := rep.Findings[0].Evidence; !strings.Contains(strings.Join(ev, "\n"), "python3 (pid 4242) ran 26 % of CPU 0 in user space") {
		t.Errorf("the finding does not name the process: %q", ev)
	}
	ev.Processes[2].CPU, ev.CPUs[1].Idle = 1, 0.5
	if got := top(Diagnose(ev)); got != "" {
		t.Errorf("the same process on the CPU that is not saturated: top %q", got)
	}
	ev.Processes[2].CPU, ev.SockIO = 0, nil
	if got := top(Diagnose(ev)); got != "" {
		t.Errorf("without socket calls no process can be told apart: top %q", got)
	}
}

// iperf3's control connection, a few bytes beside its stream, is no
// application-limited flow of its own.
func TestControlConnectionIsNotAnAppLimitedFlow(t *testing.T) {
	ev := &Evidence{Seconds: 10, Flows: []Flow{
		{Netns: "snd", Local: netip.MustParseAddrPort("10.0.0.1:40000"), Peer: netip.MustParseAddrPort("10.0.0.2:5201"),
			Seconds: 10, BytesAcked: 1_000_000_000, LimitShares: map[string]float64{"app": 0.9, "cwnd": 0.1}},
		{Netns: "snd", Local: netip.MustParseAddrPort("10.0.0.1:39998"), Peer: netip.MustParseAddrPort("10.0.0.2:5201"),
			Seconds: 10, BytesAcked: 400, LimitShares: map[string]float64{"app": 1}},
	}}
	fs := appLimited(ev)
	if len(fs) != 1 || !strings.Contains(fs[0].Title, "10.0.0.1:40000") {
		t.Errorf("app-limited findings %v, want the stream's alone", fs)
	}
}

// The report's JSON is read, not embedded in a page: "->" stays as written.
func TestReportJSONKeepsArrows(t *testing.T) {
	var b bytes.Buffer
	if err := Diagnose(load(t, "lab/sndbuf-limited.json")).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " -> ") || strings.Contains(b.String(), `\u003e`) {
		t.Errorf("the report's JSON escapes its arrows: %.300s", b.String())
	}
}

// A lossy stream's bytes wait in its autotuned send queue while recovery
// holds its window small: 25.8 ms weighted by time, 82 % of their way, in
// the kernel matrix's 6.1 guest, with at most the 4 MiB such a buffer holds
// unsent. The loss is the fault, the queue its latency: packet-loss ranks first.
func TestALossySendersQueueDoesNotOutrankTheLoss(t *testing.T) {
	ev := load(t, "lab/packet-loss.json")
	for i := range ev.Flows {
		if f := &ev.Flows[i]; f.BytesAcked > 0 {
			f.MaxNotSent = 3_900_000
			f.Stages = []StageTime{
				{Stage: "send_queue", Samples: 105, P50Us: 11_900, P75Us: 23_380, P99Us: 48_950, MeanUs: 14_000, TimeWeightedUs: 25_840},
				{Stage: "qdisc", Samples: 105, MeanUs: 10, TimeWeightedUs: 10},
				{Stage: "driver", Samples: 105, MeanUs: 2, TimeWeightedUs: 2},
				{Stage: "ack", Samples: 105, P50Us: 2_500, P75Us: 3_500, P99Us: 9_000, MeanUs: 3_000, TimeWeightedUs: 3_500},
			}
		}
	}
	rep := Diagnose(ev)
	if got := top(rep); got != "packet-loss" {
		t.Fatalf("top %q, want packet-loss; findings %v", got, ids(rep.Findings))
	}
	if !slices.Contains(ids(rep.Findings), "send-queue-bloat/info") {
		t.Errorf("the send queue's wait is not reported for its latency: %v", ids(rep.Findings))
	}
}
