package doctor

import (
	"fmt"
	"time"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Bars of a reader that paces a window-limited flow: its window, reopened
// within a round trip, would carry far more than the flow did, and the
// received bytes wait for the reads many round trips.
const (
	// readerPaceShare: a flow that carried less than this share of what its
	// largest window carries per minimum round trip had its window shut
	// most of the time. The lab's python3 reader (4 KB a read, then 1 ms
	// asleep) carried 3 % of its 8.5 KiB window's 915 Mbit/s; iperf3 with
	// SO_RCVBUF 8192, reading promptly, about 80 %.
	readerPaceShare = 0.25
	// readerPaceRTTs: received bytes that wait this many minimum round
	// trips for their reads wait for the reader, not for the window's turn
	// (that reader: 2.2 ms against 76 us, 29 round trips).
	readerPaceRTTs = 4
	// readerPaceWait: below this a wait is a prompt reader's scheduling,
	// whatever the round trip (veth's is tens of microseconds).
	readerPaceWait = time.Millisecond
)

// readerPaced says what holds a window-limited flow is its reader's pace,
// not the window's size: the receiver's bytes wait for reads many round
// trips (tcp_stage rx_queue), the flow carried a small share of what its
// window allows per round trip, and no CPU was busy enough to hold the
// reader back. A larger buffer then only holds more bytes waiting.
func readerPaced(ev *Evidence, f, p *Flow) (wait time.Duration, windowBps float64, ok bool) {
	if p == nil || f.FromRecording {
		return 0, 0, false
	}
	st := p.Stage("rx_queue")
	if st == nil || st.Samples < minStageSamples {
		return 0, 0, false
	}
	if c := busiest(ev); c != nil && c.Busy() >= readerCPUBusy {
		return 0, 0, false
	}
	minRTT := time.Duration(max(f.MinRTTus, 1)) * time.Microsecond
	wnd := max(f.SndWnd, f.MaxSndWnd)
	if wnd <= 0 {
		return 0, 0, false
	}
	windowBps = float64(wnd) * 8 / minRTT.Seconds()
	wait = waitOf(st)
	ok = waitsLong(st, max(readerPaceWait, readerPaceRTTs*minRTT)) && f.SendBps() < readerPaceShare*windowBps
	return wait, windowBps, ok
}

// readerPaceFinding is rwnd-limited named by the receiving application's
// reads: what it reads per call and how often, the bytes' wait for it,
// and, where it also locked a small buffer (buffer), that as the second
// step: a prompt reader then meets it.
func readerPaceFinding(ev *Evidence, f, p *Flow, share float64, source string, evidence []string, wait time.Duration, windowBps float64, buffer *finding.Limit) finding.Finding {
	minRTT := time.Duration(max(f.MinRTTus, 1)) * time.Microsecond
	wnd := uint64(max(f.SndWnd, f.MaxSndWnd))
	value := fmt.Sprintf("received bytes wait %s for its reads, %.0f round trips", units.Duration(wait), float64(wait)/float64(minRTT))
	fix := "read as soon as data arrives (poll/epoll, a thread that only reads) and in large reads"
	perCall := ""
	if owner := readerOwner(ev, p); owner != nil {
		for _, s := range ev.SockIO {
			if int(s.Pid) == owner.PID && s.Dir == "recv" && s.Calls > 0 {
				perCall = fmt.Sprintf("%s read %s a call (%d reads)", owner, units.Bytes(s.Bytes/s.Calls), s.Calls)
				value += fmt.Sprintf(", %s a read", units.Bytes(s.Bytes/s.Calls))
				fix += fmt.Sprintf(": it reads %s a call and waits between calls", units.Bytes(s.Bytes/s.Calls))
				break
			}
		}
	}
	arithmetic := fmt.Sprintf("the largest window the sender saw, %s, per minimum round trip %s carries %s; the flow carried %s, %s of it: the window stayed shut, waiting for reads",
		units.Bytes(wnd), units.Duration(minRTT), units.Bits(windowBps), units.Bits(f.SendBps()), pct(f.SendBps()/windowBps))
	lim := readPaceLimit(ev, p, value, fix, arithmetic)
	if buffer != nil && len(buffer.Undo) > 0 {
		// Reading promptly, the flow meets the buffer next.
		then := buffer.Undo[0]
		then.Text = "then " + then.Text
		lim.Undo = append([]finding.Action{lim.Undo[0], then}, lim.Undo[1:]...)
	}
	evidence = append(evidence, fmt.Sprintf("the receiver's bytes waited %s for their reads (tcp_stage rx_queue, %d timed), %.0f times the minimum round trip of %s",
		units.Duration(wait), p.Stage("rx_queue").Samples, float64(wait)/float64(minRTT), units.Duration(minRTT)),
		lim.Arithmetic)
	if perCall != "" {
		evidence = append(evidence, "the reader: "+perCall+" (sock_io)")
	}
	if buffer != nil {
		evidence = append(evidence, "also: "+buffer.Describe()+", which a prompt reader meets next")
	}
	evidence = append(evidence, lim.Describe())
	fd := finding.Finding{ID: "rwnd-limited", Severity: finding.Warning,
		Title:    fmt.Sprintf("the receiving application's reads pace %s -> %s", f.Local, f.Peer),
		Evidence: evidence,
		Explanation: "The receiver advertises the room left in its buffer; its application frees that room only as it reads. " +
			"Here the bytes wait many round trips for each read, and the window, which would carry far more each round trip, " +
			"stays shut waiting for them: the reads' pace is the limit, and a larger buffer only holds more bytes waiting.",
		Limit: lim, Remedy: lim.Remedy(), Scope: flowScope(f),
		Impact: share, ImpactText: fmt.Sprintf("%s of the sender's time", pct(share)), Confidence: measured(source),
		Confirm: []string{nsPrefix(p.Netns) + fmt.Sprintf("ss -tim src %s   (on the receiver: Recv-Q stays near the buffer's size while the flow runs)", p.Local)}}
	// Reading all the time, the flow runs until the CPU holds it, as with a
	// reader that stops.
	if gain, how, ok := cpuBoundGain(ev, f.SendBps()); ok && gain > fd.Impact {
		fd.Impact, fd.ImpactText = min(gain, stageImpactCap), "what the flow would gain reading all the time: "+how+")"
	}
	return fd
}
