package doctor

import (
	"fmt"
	"math"
	"slices"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/units"
)

// SysctlTCPWmem is the send buffers' autotuning range of a namespace.
const SysctlTCPWmem = "net.ipv4.tcp_wmem"

// WmemLimit is a namespace's tcp_wmem as the limit of the send buffers of
// flows (its sockets' "local peer" pairs); sndbuf-limited renders its undo
// from what a flow needs.
func WmemLimit(netns, value string, flows []string) finding.Limit {
	return finding.Limit{Kind: "tcp_wmem", Value: value,
		Where:   finding.Place{Layer: finding.LayerSysctl, Netns: netns, Object: SysctlTCPWmem},
		Applies: finding.Scope{Flows: flows}, Source: "/proc/sys/net/ipv4/tcp_wmem in the namespace"}
}

// Sizes of the kernel's send-buffer bookkeeping on x86-64 (6.x):
// MAX_TCP_HEADER, SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) and
// SKB_DATA_ALIGN(sizeof(struct sk_buff)), which tcp_sndbuf_expand charges
// for every segment a send buffer holds.
const (
	maxTCPHeader   = 320
	skbSharedInfo  = 320
	skbStructBytes = 256
	tcpInitCwnd    = 10
)

// sendBufferNeed is the send buffer a buffer-capped flow needs, computed
// from what was measured as the kernel's autotuning sizes one
// (tcp_sndbuf_expand): twice the segments it keeps in flight (its rate
// without the waits x srtt, or its congestion window where larger), each
// charged its payload and the kernel's headers and skb, rounded up as the
// kernel does. The rate without the waits is windowTarget's.
func sendBufferNeed(ev *Evidence, f *Flow, share float64) windowNeed {
	rtt := max(f.RTTus, f.MinRTTus, 1)
	want, how := sendRateWithout(ev, f, share)
	mss := uint64(max(f.SndMSS, 536))
	inFlight := want / 8 * float64(rtt) / 1e6
	segs := uint64(math.Ceil(inFlight / float64(mss)))
	nr := max(segs, uint64(f.Cwnd), tcpInitCwnd)
	perSeg := roundUpPow2(mss+maxTCPHeader+skbSharedInfo) + skbStructBytes
	need := 2 * nr * perSeg
	return windowNeed{Bytes: need, Arithmetic: fmt.Sprintf("%s; x srtt %s = %s in flight, %d segments of %d bytes (congestion window %d); "+
		"as the kernel sizes a send buffer (tcp_sndbuf_expand): 2 x %d segments x %d bytes each (payload, headers and skb, rounded as the kernel does) = %d bytes",
		how, units.Duration(us(uint64(rtt))), units.Bytes(uint64(inFlight)), segs, mss, f.Cwnd, nr, perSeg, need)}
}

// sendRateWithout is the rate a buffer-capped sender would reach without
// its waits: the link's speed where it has one, else its rate over the
// share of time it did not wait, at most maxWithoutWaits times it.
func sendRateWithout(ev *Evidence, f *Flow, share float64) (float64, string) {
	rate := f.SendBps()
	if d := ev.DeviceNamed(f.Netns, f.Dev); d.physical() {
		want := float64(d.SpeedMbps) * 1e6
		return want, fmt.Sprintf("the link's %s", units.Bits(want))
	}
	want := rate / max(1-share, 1.0/maxWithoutWaits)
	return want, fmt.Sprintf("%s / (1 - %s of the time waiting) = %s without the waits", units.Bits(rate), pct(share), units.Bits(want))
}

func roundUpPow2(n uint64) uint64 {
	p := uint64(1)
	for p < n {
		p <<= 1
	}
	return p
}

// senderBufferLimit chooses what holds a buffer-capped sender's buffer: a
// send buffer its application locked (SO_SNDBUF; autotuning is then off,
// and tcp_wmem changes nothing), else its namespace's tcp_wmem where its
// maximum is below what the flow needs. It returns a copy whose actions
// carry need's numbers; nil where neither applies.
func senderBufferLimit(ev *Evidence, f *Flow, need windowNeed) *finding.Limit {
	flow := f.Local.String() + " " + f.Peer.String()
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if l.Kind != "so_sndbuf" || l.Where.Layer != finding.LayerSocket || l.Where.Netns != f.Netns || !slices.Contains(l.Applies.Flows, flow) {
			continue
		}
		c := *l
		c.Arithmetic = need.Arithmetic
		// The kernel doubles what setsockopt asks for (the bookkeeping's
		// share): asking for half the need gives the buffer the need.
		c.Undo = []finding.Action{finding.Change("in %s: drop its setsockopt(SO_SNDBUF, %d) (an unset buffer is autotuned), or set at least %d bytes (the kernel doubles it to %d; net.core.wmem_max caps it)",
			senderOf(l), leadingInt(l.Value), need.Bytes/2, need.Bytes)}
		return &c
	}
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if l.Kind != "tcp_wmem" || l.Where.Layer != finding.LayerSysctl || l.Where.Netns != f.Netns || !slices.Contains(l.Applies.Flows, flow) {
			continue
		}
		cur := maxOf(l.Value)
		if cur <= 0 || uint64(cur) >= need.Bytes {
			return nil
		}
		c := *l
		c.Arithmetic = need.Arithmetic
		v := tripleWithMax(l.Value, int(need.Bytes))
		c.Undo = []finding.Action{finding.Command(nsCommandArg(f.Netns), "sysctl", "-w", SysctlTCPWmem+"="+v)}
		return &c
	}
	return nil
}

// nsCommandArg is the namespace a command runs in: none for the host's.
func nsCommandArg(netns string) string {
	if netns == "" || netns == "host" || netns == "init" {
		return ""
	}
	return netns
}

// senderOf is who set a sender's limit, as printed in its remedy.
func senderOf(l *finding.Limit) string {
	if l.SetBy != nil {
		if s := l.SetBy.String(); s != "" {
			return s
		}
	}
	return "the sending application"
}

func bufferLimitName(kind string) string {
	if kind == "so_sndbuf" {
		return "application's locked send buffer"
	}
	return "namespace's tcp_wmem maximum"
}

func sndbufLimited(ev *Evidence) []finding.Finding {
	var out []finding.Finding
	for _, f := range ev.senders() {
		share, source := limitEvidence(f, "sndbuf", f.SndbufLimitedUs)
		if share < limitShare {
			continue
		}
		evidence := []string{
			fmt.Sprintf("the sender waited for send-buffer space %s of the time (%s)", pct(share), source),
			fmt.Sprintf("throughput %s, srtt %d us", units.Bits(f.SendBps()), f.RTTus),
		}
		// A buffer caps a flow while the bytes it holds are in flight on
		// the path. When the round trip is many times its minimum, they
		// wait in a queue instead (here the receiver's backlog on a busy
		// CPU): the path is full, and a larger buffer would only lengthen
		// the queue, unless the buffer holds the sender most of its time.
		if f.MinRTTus > 0 && f.RTTus >= standingQueueRTT*f.MinRTTus && share < heldShare {
			out = append(out, finding.Finding{ID: "sndbuf-limited", Severity: finding.Info,
				Title:    fmt.Sprintf("%s -> %s waits for send-buffer space behind a queue", f.Local, f.Peer),
				Evidence: append(evidence, fmt.Sprintf("srtt %d us is %.0f times the minimum %d us: the buffer's bytes wait in a queue, not on the path", f.RTTus, float64(f.RTTus)/float64(f.MinRTTus), f.MinRTTus)),
				Explanation: "The send buffer was full of unacknowledged data, but most of its round trip was spent queued: " +
					"the path was already full, and whatever drains that queue (a busy CPU, a link), not the buffer, sets the rate.",
				Scope: flowScope(f), Impact: share / 4, ImpactText: "none that a larger buffer recovers", Confidence: measured(source),
				Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -ti dst %s   (rtt far above minrtt while the flow runs)", f.Peer)}})
			continue
		}
		wmem := ev.sysctl(f.Netns, "net.ipv4.tcp_wmem")
		// A limit many times what the flow keeps in flight (rate x srtt)
		// is not what holds a sender waiting part of its time: the buffer
		// could still grow, and raising the limit changes nothing (a noisy
		// host's healthy 15 Gbit/s stream waited 39 % under a 4 MB limit,
		// 16 times its 256 KB in flight). Held most of its time, a socket's
		// own SO_SNDBUF may cap it whatever the sysctl says.
		inFlight := f.SendBps() / 8 * float64(f.RTTus) / 1e6
		if limit := maxOf(wmem); share < heldShare && inFlight > 0 && float64(limit) >= 4*inFlight {
			out = append(out, finding.Finding{ID: "sndbuf-limited", Severity: finding.Info,
				Title: fmt.Sprintf("%s -> %s waits for send-buffer space well below its limit", f.Local, f.Peer),
				Evidence: append(evidence, fmt.Sprintf("net.ipv4.tcp_wmem = %s in netns %s: a limit of %s, %.0f times the %s in flight (rate x srtt)",
					wmem, f.Netns, units.Bytes(uint64(limit)), float64(limit)/inFlight, units.Bytes(uint64(inFlight)))),
				Explanation: "The send buffer filled part of the time, but the limit it grows to is far above what the flow keeps in flight: " +
					"the bytes waited locally (the qdisc, the device, the socket's own growth), and a larger limit would not raise the rate.",
				Scope: flowScope(f), Impact: share / 4, ImpactText: "none that a larger limit recovers", Confidence: measured(source),
				Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -tim dst %s   (skmem tb: the buffer, below net.ipv4.tcp_wmem's maximum)", f.Peer)}})
			continue
		}
		if wmem != "" {
			evidence = append(evidence, fmt.Sprintf("net.ipv4.tcp_wmem = %s in netns %s", wmem, f.Netns))
		}
		fd := finding.Finding{ID: "sndbuf-limited", Severity: finding.Warning,
			Title:    fmt.Sprintf("the send buffer caps %s -> %s", f.Local, f.Peer),
			Evidence: evidence,
			Explanation: "TCP may only keep as many unacknowledged bytes in flight as the socket's send buffer holds; " +
				"when the buffer is smaller than bandwidth x RTT the sender stops and waits for ACKs instead of sending.",
			Scope: flowScope(f), Impact: share, ImpactText: fmt.Sprintf("%s of the sender's time", pct(share)),
			Confidence: measured(source), Confirm: []string{nsPrefix(f.Netns) + fmt.Sprintf("ss -tim dst %s   (skmem tb: the send buffer; sndbuf_limited grows)", f.Peer)}}
		// What the flow would gain: 1 - its rate / the rate without the
		// waits (the share waited, held below 1 by the cap on that rate).
		if want, how := sendRateWithout(ev, f, share); want > 0 {
			fd.Impact = max(0, 1-f.SendBps()/want)
			fd.ImpactText = fmt.Sprintf("1 - %s / %s (%s)", units.Bits(f.SendBps()), units.Bits(want), how)
		}
		heldGain(ev, f, &fd)
		// What holds the buffer, read on the socket and in its namespace:
		// the application's SO_SNDBUF before the sysctl.
		need := sendBufferNeed(ev, f, share)
		if lim := senderBufferLimit(ev, f, need); lim != nil {
			fd.Title = fmt.Sprintf("the %s caps %s -> %s", bufferLimitName(lim.Kind), f.Local, f.Peer)
			if lim.Kind == "so_sndbuf" {
				fd.Explanation = "The sending application set its socket's send buffer (SO_SNDBUF), which fixes it and turns its " +
					"autotuning off: it holds fewer unacknowledged bytes than bandwidth x RTT, whatever tcp_wmem allows."
			}
			fd.Evidence = append(fd.Evidence, lim.Describe(), "the buffer it needs: "+lim.Arithmetic)
			fd.Limit, fd.Remedy = lim, lim.Remedy()
		} else {
			want := bufferTarget(ev, f, wmem)
			fd.Remedy = []string{
				nsPrefix(f.Netns) + fmt.Sprintf("sysctl -w net.ipv4.tcp_wmem=\"%s\"", tripleWithMax(wmem, want)),
				fmt.Sprintf("or, in the application, setsockopt(SO_SNDBUF) of at least %d (capped by net.core.wmem_max)", want/2),
			}
		}
		out = append(out, fd)
	}
	return out
}

// bloatedBufferLimit is what let a send queue grow beyond the kernel's
// default limit (send-queue-bloat): the application's SO_SNDBUF, else a
// raised tcp_wmem, whose undo brings the buffer back to what the flow
// keeps in flight (sendBufferNeed at its own rate). Nil where neither
// was read.
func bloatedBufferLimit(ev *Evidence, f *Flow) *finding.Limit {
	flow := f.Local.String() + " " + f.Peer.String()
	need := sendBufferNeed(ev, f, 0)
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if !slices.Contains(l.Applies.Flows, flow) || l.Where.Netns != f.Netns {
			continue
		}
		switch {
		case l.Kind == "so_sndbuf" && l.Where.Layer == finding.LayerSocket:
			c := *l
			c.Arithmetic = need.Arithmetic
			c.Undo = []finding.Action{finding.Change("in %s: drop its setsockopt(SO_SNDBUF, %d): an autotuned buffer grows to what the flow keeps in flight (about %d bytes here)",
				senderOf(l), leadingInt(l.Value), need.Bytes)}
			return &c
		case l.Kind == "tcp_wmem" && l.Where.Layer == finding.LayerSysctl && maxOf(l.Value) > defaultWmemMax && uint64(maxOf(l.Value)) > need.Bytes:
			c := *l
			c.Arithmetic = need.Arithmetic
			c.Undo = []finding.Action{finding.Command(nsCommandArg(f.Netns), "sysctl", "-w", SysctlTCPWmem+"="+tripleWithMax(l.Value, int(max(need.Bytes, defaultWmemMax))))}
			return &c
		}
	}
	return nil
}
