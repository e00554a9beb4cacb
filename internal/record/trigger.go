package record

import (
	"fmt"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Trigger is one --trigger expression, ready to test events against.
type Trigger struct {
	Expr   string
	kind   triggerKind
	reason string              // drop: the drop reason's kernel name ("" any)
	dev    string              // drop: the device ("" any)
	limit  event.SendlimReason // sendlim: the reason
	over   time.Duration       // srtt, sendlim: the least that fires
}

type triggerKind uint8

const (
	triggerRTO triggerKind = iota + 1
	triggerDrop
	triggerSRTT
	triggerZeroWindow
	triggerReset
	triggerSendlim
)

// TriggerHelp lists the expressions ParseTrigger reads, for --help and errors.
const TriggerHelp = "rto, drop[:REASON][@DEV], srtt>DURATION, zero-window, reset, sendlim:REASON>DURATION"

// ParseTrigger reads one trigger expression:
//
//	rto                    a retransmission timeout: entry into Loss (tcp_cong) or a [rto] send-limit run
//	drop[:REASON][@DEV]    a drop (skb_drop), of this kernel reason (NETFILTER_DROP), on this device;
//	                       without a reason, not the routine ones (event.RoutineDrop)
//	srtt>DURATION          a tcp_rtt sample with srtt above DURATION
//	zero-window            the peer's window shut: a [swnd] run or a tcp_rtt sample with snd_wnd 0
//	reset                  a connection reset, sent or received (tcp_reset)
//	sendlim:REASON>DURATION  a send-limit run of REASON (cwnd, swnd, sndbuf, ...) longer than DURATION
func ParseTrigger(expr string) (Trigger, error) {
	t := Trigger{Expr: expr}
	s := strings.TrimSpace(expr)
	bad := func(why string) (Trigger, error) {
		return Trigger{}, fmt.Errorf("trigger %q: %s (triggers: %s)", expr, why, TriggerHelp)
	}
	switch {
	case s == "rto":
		t.kind = triggerRTO
	case s == "zero-window":
		t.kind = triggerZeroWindow
	case s == "reset":
		t.kind = triggerReset
	case s == "drop" || strings.HasPrefix(s, "drop:") || strings.HasPrefix(s, "drop@"):
		t.kind = triggerDrop
		rest := strings.TrimPrefix(s, "drop")
		if i := strings.IndexByte(rest, '@'); i >= 0 {
			t.dev = rest[i+1:]
			rest = rest[:i]
			if t.dev == "" || len(t.dev) > 15 || strings.ContainsAny(t.dev, " /:@") {
				return bad(fmt.Sprintf("%q is not a device name", t.dev))
			}
		}
		if rest != "" {
			t.reason = strings.ToUpper(strings.TrimPrefix(rest, ":"))
			if t.reason == "" || strings.ContainsAny(t.reason, " :@>") {
				return bad("the drop reason is empty or malformed")
			}
		}
	case strings.HasPrefix(s, "srtt>"):
		t.kind = triggerSRTT
		d, err := time.ParseDuration(strings.TrimPrefix(s, "srtt>"))
		if err != nil || d <= 0 {
			return bad("srtt> wants a positive duration such as 50ms")
		}
		t.over = d
	case strings.HasPrefix(s, "sendlim:"):
		t.kind = triggerSendlim
		name, dur, ok := strings.Cut(strings.TrimPrefix(s, "sendlim:"), ">")
		if !ok {
			return bad("sendlim: wants REASON>DURATION, such as sendlim:swnd>200ms")
		}
		r, known := event.ParseSendlimReason(name)
		if !known || r == event.SendlimOK {
			return bad(fmt.Sprintf("%q is not a send-limit reason (cwnd, swnd, nagle, pacing, tsq, sndbuf, app, cork, xmit_fail, rto)", name))
		}
		d, err := time.ParseDuration(dur)
		if err != nil || d <= 0 {
			return bad("sendlim: wants a positive duration such as 200ms")
		}
		t.limit, t.over = r, d
	default:
		return bad("unknown trigger")
	}
	return t, nil
}

// kernelNames names what events hold as numbers, as the recording kernel does.
type kernelNames interface {
	dropReason(uint32) string
	location(addr uint64) string
}

// Match says whether ev fires the trigger, and if so what it was, in a few words.
func (t *Trigger) Match(ev *event.Event, names kernelNames) (string, bool) {
	switch t.kind {
	case triggerRTO:
		switch {
		case ev.Type == event.TypeTCPCong && event.TCPCaState(ev.Cong.State).String() == "Loss":
			return fmt.Sprintf("tcp_cong Loss %s -> %s", ev.Socket.Local, ev.Socket.Peer), true
		case ev.Type == event.TypeTCPSendlim && ev.Sendlim.Reason == event.SendlimRTO:
			return fmt.Sprintf("tcp_sendlim [rto] %s -> %s", ev.Sendlim.Local, ev.Sendlim.Peer), true
		}
	case triggerDrop:
		if ev.Type != event.TypeSkbDrop {
			return "", false
		}
		reason := names.dropReason(ev.Drop.Reason)
		dev, _, _ := ev.Device()
		if t.reason != "" && reason != t.reason || t.dev != "" && string(dev) != t.dev {
			return "", false
		}
		// A reason named is wanted whatever it is; otherwise a busy host's
		// closing connections would open a window every few seconds.
		if t.reason == "" && event.RoutineDrop(reason, names.location(ev.Drop.Location)) {
			return "", false
		}
		return fmt.Sprintf("skb_drop [%s] on %s, %d packets", reason, dev, ev.Drop.Cnt), true
	case triggerSRTT:
		if ev.Type == event.TypeTCPRTT && time.Duration(ev.RTT.SrttUs)*time.Microsecond > t.over {
			return fmt.Sprintf("tcp_rtt srtt %s %s -> %s", units.Duration(time.Duration(ev.RTT.SrttUs)*time.Microsecond), ev.Socket.Local, ev.Socket.Peer), true
		}
	case triggerZeroWindow:
		switch {
		case ev.Type == event.TypeTCPSendlim && ev.Sendlim.Reason == event.SendlimSwnd && ev.Sendlim.SndWnd == 0:
			return fmt.Sprintf("tcp_sendlim [swnd] snd_wnd=0 %s -> %s", ev.Sendlim.Local, ev.Sendlim.Peer), true
		case ev.Type == event.TypeTCPRTT && ev.RTT.SndWnd == 0:
			return fmt.Sprintf("tcp_rtt snd_wnd=0 %s -> %s", ev.Socket.Local, ev.Socket.Peer), true
		}
	case triggerReset:
		if ev.Type == event.TypeTCPReset {
			return fmt.Sprintf("tcp_reset %s %s -> %s", event.ResetDir(ev.Reset.Dir), ev.Socket.Local, ev.Socket.Peer), true
		}
	case triggerSendlim:
		if ev.Type == event.TypeTCPSendlim && ev.Sendlim.Reason == t.limit && time.Duration(ev.Time-ev.Sendlim.Begin) > t.over {
			return fmt.Sprintf("tcp_sendlim [%s] for %s %s -> %s", t.limit, units.Duration(time.Duration(ev.Time-ev.Sendlim.Begin)),
				ev.Sendlim.Local, ev.Sendlim.Peer), true
		}
	}
	return "", false
}
