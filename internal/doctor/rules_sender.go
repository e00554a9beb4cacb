package doctor

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

func rwndLimited(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, f := range ev.senders() {
		share, source := limitEvidence(f, "swnd", f.RwndLimitedUs)
		// A reader that stops leaves the window shut for long stretches, long
		// enough for probes to go unanswered; a CPU-bound reader reopens it
		// within milliseconds, a capped buffer within a round trip. A busy
		// CPU is the other explanation of long stalls (one thread that both
		// sends and reads, as iperf3 --bidir).
		stall := time.Duration(f.LimitMeanRunUs["swnd"]) * time.Microsecond
		c := busiest(ev)
		idle := c == nil || c.Busy() < readerCPUBusy
		// Long runs of window waits alone do not make a stopped reader: a
		// sender held by a small buffer 98 % of its time waits in runs of
		// 20-75 ms while its reader takes each byte within 15 us (the lab's
		// rwnd-limited), which its rx_queue stage shows.
		stopped := f.ZeroWindowProbed > 0 || idle && stall >= max(stoppedReaderRun, 4*time.Duration(f.MinRTTus)*time.Microsecond) && !readerPrompt(ev.peerFlow(f), stall)
		// The share of a stopped reader is a lower bound: the silence after
		// a shut window's last decision counts for no reason.
		if share < limitShare && !(stopped && share >= stoppedReaderShare) {
			out = append(out, acksHeldByReader(ev, f)...)
			continue
		}
		window := fmt.Sprintf(", peer's advertised window %s", units.Bytes(uint64(f.SndWnd)))
		if f.FromRecording {
			window = ""
		}
		evidence := []string{
			fmt.Sprintf("the sender waited for the receiver's window %s of the time (%s)", pct(share), source),
			fmt.Sprintf("throughput %s%s, srtt %d us", units.Bits(f.SendBps()), window, f.RTTus),
		}
		remedy := []string{}
		rmemNs := ""
		p := ev.peerFlow(f)
		// What the receiver set, read on its socket and route, before the
		// sysctl: the window is held where it is set (rules_window.go).
		need := windowTarget(ev, f, share)
		lim := receiverWindowLimit(ev, f, p, need)
		// A reader whose pace holds the window outranks the buffer it also
		// set: raising the buffer alone changes nothing.
		if wait, windowBps, paced := readerPaced(ev, f, p); paced && !stopped {
			out = append(out, readerPaceFinding(ev, f, p, share, source, evidence, wait, windowBps, lim))
			continue
		}
		if lim != nil {
			fd := windowLimitFinding(f, p, share, source, evidence, lim)
			heldGain(ev, f, &fd)
			out = append(out, fd)
			continue
		}
		if p != nil {
			rmemNs = p.Netns
			if !p.FromRecording {
				evidence = append(evidence, fmt.Sprintf("the receiver (%s in netns %s) sized its buffer to %s (tcp_info rcv_space)", p.Local, p.Netns, units.Bytes(uint64(p.RcvSpace))))
			}
			if st := p.Stage("rx_queue"); st != nil && st.Samples >= minStageSamples {
				evidence = append(evidence, fmt.Sprintf("received bytes waited %s at the median (p99 %s) for its reader (tcp_stage rx_queue, %d timed)",
					units.Duration(us(st.P50Us)), units.Duration(us(st.P99Us)), st.Samples))
			}
		}
		rmem := ev.sysctl(rmemNs, "net.ipv4.tcp_rmem")
		if rmemNs != "" && rmem != "" {
			evidence = append(evidence, fmt.Sprintf("net.ipv4.tcp_rmem = %s in the receiver's netns %s", rmem, rmemNs))
		}
		want := int(need.Bytes)
		severity, confidence := finding.Warning, measured(source)
		explanation := "The receiver advertises how many bytes it can still buffer; the sender may not exceed it. A small " +
			"receive buffer (tcp_rmem) or an application that reads slowly keeps that window below bandwidth x RTT."
		// The socket's real buffer outranks the sysctl: a window below a
		// default socket's initial one is the socket's own (SO_RCVBUF locks
		// it) or a reader that does not drain it.
		// The largest window read, where kept: the last reading of a
		// closing socket is small whatever its buffer was.
		wnd := f.SndWnd
		if f.MaxSndWnd > 0 {
			wnd = f.MaxSndWnd
		}
		capped := wnd > 0 && wnd < smallWindow && maxOf(rmem) > smallWindow
		if capped {
			evidence = append(evidence, fmt.Sprintf("the advertised window stayed at or below %s, far below the %s that tcp_rmem allows", units.Bytes(uint64(wnd)), units.Bytes(uint64(maxOf(rmem)))))
			explanation += " Here the window never grew toward what tcp_rmem allows: the receiving socket's buffer is capped " +
				"(an SO_RCVBUF set by the application fixes it and turns autotuning off) or its reader does not keep up."
			remedy = append(remedy, fmt.Sprintf("in the receiving application: drop its setsockopt(SO_RCVBUF), or set at least %d bytes", want))
			evidence = append(evidence, "the window it needs: "+need.Arithmetic)
		}
		if stopped {
			shut := fmt.Sprintf("the window stayed shut %s at a time on average (tcp_sendlim [swnd] runs)", units.Duration(stall))
			if c != nil {
				shut += fmt.Sprintf(" while the busiest CPU was %s busy", pct(c.Busy()))
			}
			if f.ZeroWindowProbed > 0 {
				shut += fmt.Sprintf("; %d times the sender probed it and got no opening", f.ZeroWindowProbed)
			}
			evidence = append(evidence, shut)
			explanation += " Here the window stayed shut for long stretches, and no CPU held the reader back: the receiving " +
				"application stopped reading, so a larger buffer only delays the stall."
			remedy = append(remedy, "in the receiving application: find why it stops reading (blocked on a lock, disk or another socket; a pause in its loop) and read from a thread that does nothing else")
		}
		if maxOf(rmem) >= 1<<20 && !physicalPath(ev, f) && !capped && !stopped {
			// A roomy buffer that still fills over veth or loopback: the
			// reader copies as fast as its CPU allows, the expected limit.
			severity, confidence = finding.Info, finding.Possible
			if c := busiest(ev); c != nil {
				evidence = append(evidence, fmt.Sprintf("busiest CPU %d: %s busy (%s)", c.CPU, pct(c.Busy()), cpuSplit(c)))
			}
			explanation += " Here the buffer may grow to " + fmt.Sprint(maxOf(rmem)) + " bytes and the path is a virtual device: " +
				"the reader is CPU-bound, as expected."
		}
		// The sysctl only where its maximum is below what the flow needs:
		// a larger one changes nothing.
		if maxOf(rmem) < want {
			remedy = append(remedy, "on the receiver: "+nsPrefix(rmemNs)+fmt.Sprintf("sysctl -w net.ipv4.tcp_rmem=\"%s\"", tripleWithMax(rmem, want)))
			if !capped {
				evidence = append(evidence, "the window it needs: "+need.Arithmetic)
			}
		}
		remedy = append(remedy, "if the receiving application reads slowly (check its CPU), make it read more often or in larger chunks")
		fd := finding.Finding{ID: "rwnd-limited", Severity: severity,
			Title:       fmt.Sprintf("the receiver's window caps %s -> %s", f.Local, f.Peer),
			Evidence:    evidence,
			Explanation: explanation,
			Remedy:      remedy, Scope: flowScope(f), Impact: share, ImpactText: fmt.Sprintf("%s of the sender's time", pct(share)),
			Confidence: confidence, Confirm: []string{nsPrefix(rmemNs) + fmt.Sprintf("ss -tim src %s   (on the receiver: rcv_space and skmem rb, the receive buffer; a window that stays small)", f.Peer)}}
		// The sysctl is the limit where nothing on the socket holds the
		// window, its maximum is below what the flow needs, and the reader
		// keeps reading: its undo is the remedy the text gave.
		if rmemNs != "" && rmem != "" && maxOf(rmem) < want && !capped && !stopped {
			lim := rmemLimit(rmemNs, rmem, tripleWithMax(rmem, want), need.Arithmetic, p)
			fd.Limit = &lim
			fd.Evidence = append(fd.Evidence, lim.Describe())
			fd.Remedy = append(lim.Remedy(), remedy[1:]...)
		}
		// A reader that stops is the limit: its pauses, not a size, shut
		// the window (a larger buffer only delays the stall).
		if stopped && severity >= finding.Warning {
			lim := readPaceLimit(ev, p, fmt.Sprintf("stops reading: the window stays shut %s at a time", units.Duration(stall)),
				"find why it stops reading (blocked on a lock, disk or another socket; a pause in its loop) and read from a thread that does nothing else",
				fmt.Sprintf("the sender waited for the window %s of its time, in runs of %s on average (tcp_sendlim [swnd]), %d zero-window probes unanswered",
					pct(share), units.Duration(stall), f.ZeroWindowProbed))
			fd.Limit = lim
			fd.Evidence = append(fd.Evidence, lim.Describe())
			// Its share of the sender's time is a lower bound (the silence
			// after a shut window's last decision counts for no reason):
			// without the stops the flow runs until the CPU holds it, 83 %
			// more where the stops cost 88 % (CPUs 17 % busy).
			if gain, how, ok := cpuBoundGain(ev, f.SendBps()); ok && gain > fd.Impact {
				fd.Impact, fd.ImpactText = min(gain, stageImpactCap), "what the flow would gain reading all the time: "+how+")"
			}
			fd.Remedy = append(lim.Remedy(), slices.DeleteFunc(remedy, func(r string) bool { return strings.HasPrefix(r, "in the receiving application: find why") })...)
		}
		if !stopped {
			heldGain(ev, f, &fd)
		}
		out = append(out, fd)
	}
	return out
}

// heldGain bounds a window's or a send buffer's impact by what the flow
// would gain without it: the waits say more where the CPU would hold it
// soon after (a receive buffer at 67 % gained, a route window 73 %, send
// buffers 65-69 %, where the waits said 90-99 %). A small window or buffer
// also raises the cost per byte (small reads, an ACK for every few
// segments): the bound is what a stream carries here where that is more
// (liftedGain).
// Without the stream's rate (evidence from before it was measured), or on
// a NIC, the CPU's busy share alone would read a small buffer's own cost
// per byte as the CPU's limit: the waits stand.
func heldGain(ev *Evidence, f *Flow, fd *finding.Finding) {
	if _, _, known := streamRate(ev); !known || !virtualDevice(ev.DeviceNamed(f.Netns, f.Dev)) {
		return
	}
	if gain, how, ok := liftedGain(ev, f.SendBps()); ok && gain < fd.Impact {
		fd.Impact, fd.ImpactText = gain, fmt.Sprintf("%s by the waits, but what the flow would gain without the limit is %s)", pct(fd.Impact), how)
	}
}

// readerPrompt says the receiver's reader took its bytes within a tenth of
// the sender's mean wait for the window, weighted by time (tcp_stage
// rx_queue): the window waits are the buffer's, not a stopped reader's.
// Weighted by time, since a reader that stops takes most bytes at once
// between its stops: the lab's stalled python3 reader (50 ms reading, 400
// ms stopped) had its bytes' median wait at 6 us and their time-weighted
// wait at 389 ms, against window waits of 47 ms.
func readerPrompt(receiver *Flow, stall time.Duration) bool {
	if receiver == nil {
		return false
	}
	st := receiver.Stage("rx_queue")
	return st != nil && st.Samples >= minStageSamples && waitOf(st) < stall/10
}

// rmemLimit is a namespace's net.ipv4.tcp_rmem as the limit of a flow's
// receive window, undone by raising its maximum to what the flow needs.
func rmemLimit(netns, value, raised, arithmetic string, receiver *Flow) finding.Limit {
	l := finding.Limit{Kind: "tcp_rmem", Value: value,
		Where:      finding.Place{Layer: finding.LayerSysctl, Netns: netns, Object: "net.ipv4.tcp_rmem"},
		Undo:       []finding.Action{finding.Command(netns, "sysctl", "-w", "net.ipv4.tcp_rmem="+raised)},
		Arithmetic: arithmetic, Source: "/proc/sys/net/ipv4/tcp_rmem in the namespace"}
	if receiver != nil {
		l.Applies.Flows = []string{receiver.Local.String() + " " + receiver.Peer.String()}
	}
	return l
}

// acksHeldByReader finds a receiver whose application stopped reading while
// its buffer still had room: the window never closes, but the receiver
// acknowledges at once only when the window can move, so its ACKs wait for
// the delayed-ACK timer, and the sender, waiting for its congestion window,
// crawls at the pace of those ACKs.
func acksHeldByReader(ev *Evidence, f *Flow) []finding.Finding {
	reason, share := topLimit(f)
	zero := readerBehind(ev, f)
	if reason != "cwnd" || share < 0.5 || zero == 0 || !ackClockSlowed(f) || len(queueDropsOf(ev, f)) > 0 {
		return nil
	}
	p := ev.peerFlow(f)
	fd := finding.Finding{ID: "rwnd-limited", Severity: finding.Warning,
		Title: fmt.Sprintf("the receiving application falls behind on %s -> %s and holds its ACKs back", f.Local, f.Peer),
		Evidence: []string{
			fmt.Sprintf("the receiver's netns %s advertised or wanted a zero window %d times (TcpExt.TCPToZeroWindowAdv, TCPWantZeroWindowAdv)", p.Netns, zero),
			fmt.Sprintf("srtt %s against a minimum of %s: the ACKs come late", units.Duration(time.Duration(f.RTTus)*time.Microsecond), units.Duration(time.Duration(f.MinRTTus)*time.Microsecond)),
			fmt.Sprintf("the sender waited for its congestion window %s of the time (tcp_sendlim [cwnd]): it sends as the late ACKs allow; throughput %s", pct(share), units.Bits(f.SendBps())),
		},
		Explanation: "A receiver acknowledges at once only when its window can move forward; while its application does not " +
			"read, the window cannot, so ACKs wait for the delayed-ACK timer. The window need not close for this: a large " +
			"buffer fills slowly while the sender, clocked by those late ACKs, crawls.",
		Remedy: []string{
			"in the receiving application: find why it stops reading (blocked on a lock, disk or another socket; a pause in its loop) and read from a thread that does nothing else",
			nsPrefix(p.Netns) + fmt.Sprintf("ss -tim src %s   (Recv-Q grows while the application stalls)", p.Local),
		},
		Scope: flowScope(f), Impact: share / 2, ImpactText: fmt.Sprintf("%s of the sender's time waiting on late ACKs", pct(share)), Confidence: finding.Likely,
		Confirm: []string{nsPrefix(p.Netns) + fmt.Sprintf("ss -tin src %s, a few times during the transfer: a Recv-Q that stays high", p.Local)}}
	// The reader is the limit, as where it shuts the window: the lab's
	// stalled python3 reader took this path in one run of four (its buffer
	// had room left, 6 zero windows), and without a limit its remedy was
	// the scenario's own.
	lim := readPaceLimit(ev, p, fmt.Sprintf("falls behind: its ACKs wait for the delayed-ACK timer (srtt %s against a minimum of %s)",
		units.Duration(time.Duration(f.RTTus)*time.Microsecond), units.Duration(time.Duration(f.MinRTTus)*time.Microsecond)),
		"find why it stops reading (blocked on a lock, disk or another socket; a pause in its loop) and read from a thread that does nothing else",
		fmt.Sprintf("the sender waited for its congestion window %s of its time (tcp_sendlim [cwnd]), %d zero windows at the receiver", pct(share), zero))
	fd.Limit = lim
	fd.Evidence = append(fd.Evidence, lim.Describe())
	fd.Remedy = append(lim.Remedy(), fd.Remedy[1:]...)
	// Reading all the time, the flow runs until the CPU holds it (as a
	// reader that shuts the window).
	if gain, how, ok := cpuBoundGain(ev, f.SendBps()); ok && gain > fd.Impact {
		fd.Impact, fd.ImpactText = min(gain, stageImpactCap), "what the flow would gain reading all the time: "+how+")"
	}
	return []finding.Finding{fd}
}

// limitEvidence is a send-limit reason's share of the sender's time: from the
// recording when there is one, else from tcp_info's busy/limited times.
func limitEvidence(f *Flow, reason string, limitedUs uint64) (float64, string) {
	if share, ok := f.LimitShares[reason]; ok && len(f.LimitShares) > 0 {
		return share, "tcp_sendlim [" + reason + "]"
	}
	if len(f.LimitShares) == 0 && f.BusyUs > 0 {
		return float64(limitedUs) / float64(f.BusyUs+limitedUs), "tcp_info"
	}
	return 0, ""
}

// measured grades a send-limit finding by its source: the kernel's
// decisions for the flow, or tcp_info's clocks.
func measured(source string) finding.Confidence {
	if strings.HasPrefix(source, "tcp_sendlim") {
		return finding.Strong
	}
	return finding.Likely
}

// bufferTarget is a buffer size that covers twice the bandwidth-delay product
// of the flow's device, or four times the current maximum where the device
// has no speed, and never less than Linux's 4 MiB default maximum.
func bufferTarget(ev *Evidence, f *Flow, triple string) int {
	want := 4 << 20
	rtt := float64(max(f.MinRTTus, f.RTTus, 100)) / 1e6
	if d := ev.DeviceNamed(f.Netns, f.Dev); d.physical() {
		want = max(want, int(2*float64(d.SpeedMbps)*1e6/8*rtt))
	} else if fields := strings.Fields(triple); len(fields) == 3 {
		if cur, err := strconv.Atoi(fields[2]); err == nil {
			want = max(want, 4*cur)
		}
	}
	return want
}

// maxOf is the maximum of a "min default max" buffer triple, 0 if unknown.
func maxOf(triple string) int {
	f := strings.Fields(triple)
	if len(f) != 3 {
		return 0
	}
	n, _ := strconv.Atoi(f[2])
	return n
}

func tripleWithMax(triple string, maxBytes int) string {
	f := strings.Fields(triple)
	if len(f) != 3 {
		return fmt.Sprintf("4096 131072 %d", maxBytes)
	}
	return fmt.Sprintf("%s %s %d", f[0], f[1], maxBytes)
}

func nagleDelay(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for i := range ev.Flows {
		f := &ev.Flows[i]
		// Decisions, not time: tcp_sendlim decides when a segment arrives,
		// and a request/response flow's Nagle wait ends at the peer's
		// delayed ACK, the moment the decision is taken.
		n, share := f.LimitCounts["nagle"], decisionShare(f, "nagle")
		if n < 10 || share < 0.1 {
			continue
		}
		// In a stream of small writes Nagle holds the tail while full
		// segments go out, for a round trip on a fast path, and coalesces
		// the writes: that costs nothing. It delays the application when each
		// hold lasts as long as a delayed ACK (request/response, interactive
		// writes). Evidence without run lengths is judged by decisions alone.
		wait, measured := f.LimitMeanRunUs["nagle"]
		if measured && wait < nagleWaitUs {
			continue
		}
		evidence := []string{
			fmt.Sprintf("%d send decisions (%.0f/s, %s of all) found a small segment held back by Nagle (tcp_sendlim [nagle])",
				n, float64(n)/max(f.Seconds, 1e-9), pct(share)),
			fmt.Sprintf("throughput %s, srtt %d us", units.Bits(max(f.SendBps(), f.RecvBps())), f.RTTus),
		}
		if measured {
			evidence = append(evidence, fmt.Sprintf("each hold kept the segment waiting %.1f ms on average, %s of the sender's time",
				float64(wait)/1000, pct(f.LimitShares["nagle"])))
		}
		lim := nagleLimit(ev, f, n)
		out = append(out, finding.Finding{ID: "nagle-delay", Severity: finding.Warning, Limit: lim,
			Title:    fmt.Sprintf("Nagle's algorithm holds back small writes on %s -> %s", f.Local, f.Peer),
			Evidence: evidence,
			Explanation: "With Nagle on, TCP sends a small segment only when all earlier data is acknowledged. An application " +
				"that writes one message in several small writes waits for the peer's delayed ACK (up to 40 ms on Linux) on every message.",
			Remedy: lim.Remedy(),
			Scope:  flowScope(f), Impact: 0.9, ImpactText: "most of it: each message waits for a delayed ACK", Confidence: finding.Strong,
			Confirm: []string{"strace -f -e trace=setsockopt,write,sendto,sendmsg -p PID   (small writes, no TCP_NODELAY)",
				fmt.Sprintf("skbtrace record -e tcp_sendlim --filter-port %d -d 5, then skbtrace parse: [nagle] runs", f.Local.Port())}})
	}
	return out
}

func decisionShare(f *Flow, reason string) float64 {
	var total uint64
	for _, n := range f.LimitCounts {
		total += n
	}
	if total == 0 {
		return 0
	}
	return float64(f.LimitCounts[reason]) / float64(total)
}

func cwndLimited(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, f := range ev.senders() {
		share := f.LimitShares["cwnd"]
		cong := f.CongStates["Recovery"] + f.CongStates["Loss"] + f.CongStates["CWR"]
		lossy := f.SegsOut > 0 && float64(ev.lostRetrans(f)) >= 0.001*float64(f.SegsOut)
		// Without loss, waiting for the window is how every loss-based flow
		// fills the queue at its bottleneck: the bottleneck is the finding.
		// A few recoveries at a high rate cost nothing either; only the
		// window cuts of ECN marks or local congestion (CWR) stand for loss.
		if share < 0.5 || !lossy && float64(f.CongStates["CWR"]) < max(3, f.Seconds) {
			continue
		}
		out = append(out, finding.Finding{ID: "cwnd-limited", Severity: finding.Warning,
			Title: fmt.Sprintf("the congestion window caps %s -> %s after losses", f.Local, f.Peer),
			Evidence: []string{
				fmt.Sprintf("the sender waited for its congestion window %s of the time (tcp_sendlim [cwnd])", pct(share)),
				fmt.Sprintf("%d entries into Recovery/Loss/CWR (tcp_cong), %d segments retransmitted, cwnd now %d", cong, max(uint64(f.Retrans), f.TraceRetrans), f.Cwnd),
			},
			Explanation: "After a loss or an ECN mark TCP halves its congestion window and grows it back slowly; repeated losses keep it small.",
			Remedy:      []string{"find and remove the loss (see packet-loss); with unavoidable random loss a loss-tolerant congestion control (bbr) helps"},
			Scope:       flowScope(f), Impact: share / 2, ImpactText: fmt.Sprintf("%s of the sender's time", pct(share)), Confidence: finding.Likely,
			Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -ti dst %s   (cwnd, ssthresh and retrans over a few seconds)", f.Peer),
				nsPrefix(f.Netns) + "nstat -az TcpRetransSegs TcpExtTCPLossProbes TcpExtTCPSackRecoveryFail"}})
	}
	return out
}

func appLimited(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	senders := ev.senders()
	for _, f := range senders {
		share := f.LimitShares["app"]
		if share < 0.5 {
			continue
		}
		// A connection that moved under 1 % of the busiest sender's rate
		// beside it (iperf3's control connection) is no application's pace.
		if f.SendBps() < 0.01*senders[0].SendBps() {
			continue
		}
		out = append(out, finding.Finding{ID: "app-limited", Severity: finding.Info,
			Title:    fmt.Sprintf("the application on %s offered no more data %s of the time", f.Local, pct(share)),
			Evidence: []string{fmt.Sprintf("tcp_sendlim [app] %s of the sender's time; throughput %s", pct(share), units.Bits(f.SendBps()))},
			Explanation: "TCP had room to send but nothing queued: the sending application, or what feeds it, sets the pace. " +
				"On a CPU-bound host that is the application's copying; otherwise look at the application itself.",
			Scope: flowScope(f), Impact: share / 4, ImpactText: "none that the network can recover", Confidence: finding.Strong,
			Confirm: []string{"top -H -p PID of the sender: is it busy elsewhere, or waiting on its own input?"}})
	}
	return out
}
