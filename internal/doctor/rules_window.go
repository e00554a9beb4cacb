package doctor

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// windowNeed is the window a window-limited flow needs, computed from what
// was measured: the rate it would reach without the waits (the device's
// speed where it has one, else its rate over the share of time it was not
// waiting, at most ten times it), times its round trip, doubled for the
// kernel's share of the buffer that is not window and for headroom.
type windowNeed struct {
	Bytes      uint64
	Arithmetic string
}

// maxWithoutWaits bounds the rate a flow is credited with when it waited
// nearly all its time: 1/(1-share) grows without bound.
const maxWithoutWaits = 10

func windowTarget(ev *Evidence, f *Flow, share float64) windowNeed {
	rate := f.SendBps()
	rtt := max(f.RTTus, f.MinRTTus, 1)
	var want float64
	var how string
	if d := ev.DeviceNamed(f.Netns, f.Dev); d.physical() {
		want = float64(d.SpeedMbps) * 1e6
		how = fmt.Sprintf("the link's %s", units.Bits(want))
	} else {
		want = rate / max(1-share, 1.0/maxWithoutWaits)
		how = fmt.Sprintf("%s / (1 - %s of the time waiting) = %s without the waits", units.Bits(rate), pct(share), units.Bits(want))
	}
	bdp := want / 8 * float64(rtt) / 1e6
	need := uint64(math.Ceil(2*bdp/1024)) * 1024
	return windowNeed{Bytes: need, Arithmetic: fmt.Sprintf("%s; x srtt %s = %s in flight (bandwidth x delay); x 2 for the buffer's overhead and headroom = %d bytes",
		how, units.Duration(us(uint64(rtt))), units.Bytes(uint64(bdp)), need)}
}

// receiverWindowLimit chooses, among the limits read on the receiver of a
// window-limited flow, the one that holds its window: a window clamp on
// its socket (set by the application, or by a window metric of its route
// back to the sender, which the kernel copies into the clamp at the
// handshake), a buffer the application locked below what the flow needs.
// It returns a copy whose actions carry the numbers need computed; nil
// where none applies (then the namespace's tcp_rmem, or the reader, is
// left to explain it).
func receiverWindowLimit(ev *Evidence, f, p *Flow, need windowNeed) *finding.Limit {
	if p == nil {
		return nil
	}
	flow := p.Local.String() + " " + p.Peer.String()
	find := func(kind string, layer string) *finding.Limit {
		for i := range ev.Limits {
			l := &ev.Limits[i]
			if l.Kind == kind && l.Where.Layer == layer && l.Where.Netns == p.Netns && slices.Contains(l.Applies.Flows, flow) {
				return l
			}
		}
		return nil
	}
	// The largest window the sender saw: a clamp that holds it is at or
	// above it by less than a window-scale step.
	wnd := uint64(max(f.SndWnd, f.MaxSndWnd))
	holds := func(limit uint64) bool { return wnd == 0 || wnd <= limit+limit/8+1024 }
	clamp := find("tcp_window_clamp", finding.LayerSocket)
	if route := find("route_window", finding.LayerRoute); route != nil {
		// The clamp the metric sets at the handshake also fixes the window
		// scale the receiver announces, for the connection's life: a window
		// metric below 64 KiB announces none, and autotuning, which later
		// lifts the clamp (6.18 does), cannot lift the window past 64 KiB.
		w := scaledWindow(leadingInt(route.Value))
		if w > 0 && holds(w) && (clamp == nil || leadingInt(clamp.Value) <= w) && w < need.Bytes {
			l := *route
			l.Arithmetic = need.Arithmetic
			l.Undo = append([]finding.Action{}, route.Undo...)
			return &l
		}
	}
	if clamp != nil {
		if c := leadingInt(clamp.Value); c > 0 && holds(c) && c < need.Bytes {
			l := *clamp
			l.Arithmetic = need.Arithmetic + "; " + clamp.Arithmetic
			l.Undo = []finding.Action{finding.Change("in %s: drop its setsockopt(TCP_WINDOW_CLAMP, %d), or clamp at no less than %d bytes", ownerOf(clamp), c, need.Bytes)}
			return &l
		}
	}
	if buf := find("so_rcvbuf", finding.LayerSocket); buf != nil {
		if v := leadingInt(buf.Value); v > 0 && v < need.Bytes {
			l := *buf
			l.Arithmetic = need.Arithmetic
			l.Undo = []finding.Action{finding.Change("in %s: drop its setsockopt(SO_RCVBUF, %d) (an unset buffer is autotuned), or set at least %d bytes", ownerOf(buf), v, need.Bytes)}
			return &l
		}
	}
	return nil
}

func ownerOf(l *finding.Limit) string {
	if l.SetBy != nil {
		if s := l.SetBy.String(); s != "" {
			return s
		}
	}
	return "the receiving application"
}

// leadingInt is the number a limit's value starts with ("8192 bytes").
func leadingInt(s string) uint64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseUint(f[0], 10, 64)
	return n
}

// windowLimitFinding is rwnd-limited named by the setting that holds the
// receiver's window, its fix rendered from the limit.
func windowLimitFinding(f, p *Flow, share float64, source string, evidence []string, lim *finding.Limit) finding.Finding {
	evidence = append(evidence, lim.Describe())
	if wnd := max(f.SndWnd, f.MaxSndWnd); wnd > 0 && !f.FromRecording {
		evidence = append(evidence, fmt.Sprintf("the receiver's window never exceeded %s (the largest the sender read)", units.Bytes(uint64(wnd))))
	}
	evidence = append(evidence, "the window it needs: "+lim.Arithmetic)
	var explanation string
	switch lim.Kind {
	case "route_window":
		explanation = "The receiver's route back to the sender carries a window metric: the kernel copies it into the socket's " +
			"window clamp when the connection opens, and chooses the window scale it announces from that clamp, for the " +
			"connection's life: below 64 KiB it announces none, and the window never exceeds 64 KiB, whatever the buffer grows to."
	case "tcp_window_clamp":
		explanation = "The receiving application clamped the window its socket advertises (TCP_WINDOW_CLAMP): the sender may " +
			"keep no more than that in flight per round trip, whatever the buffer and tcp_rmem allow."
	default:
		explanation = "The receiving application set its socket's receive buffer (SO_RCVBUF), which fixes it and turns its " +
			"autotuning off: the window it advertises stays below bandwidth x RTT, whatever tcp_rmem allows."
	}
	return finding.Finding{ID: "rwnd-limited", Severity: finding.Warning,
		Title:    fmt.Sprintf("the receiver's %s caps %s -> %s", limitName(lim.Kind), f.Local, f.Peer),
		Evidence: evidence, Explanation: explanation, Limit: lim, Remedy: lim.Remedy(),
		Scope: flowScope(f), Impact: share, ImpactText: fmt.Sprintf("%s of the sender's time", pct(share)), Confidence: measured(source),
		Confirm: []string{nsPrefix(p.Netns) + fmt.Sprintf("ss -ti src %s   (on the receiver: rcv_space and the window it advertises stay small)", p.Local)}}
}

func limitName(kind string) string {
	switch kind {
	case "route_window":
		return "route window metric"
	case "tcp_window_clamp":
		return "window clamp"
	}
	return "locked receive buffer"
}

// scaledWindow is the largest window a connection can advertise when its
// clamp at the handshake was clamp: the window scale is the smallest that
// lets the 16-bit field reach the clamp (tcp_select_initial_window).
func scaledWindow(clamp uint64) uint64 {
	if clamp == 0 {
		return 0
	}
	shift := 0
	for uint64(65535)<<shift < clamp && shift < 14 {
		shift++
	}
	return 65535 << shift
}
