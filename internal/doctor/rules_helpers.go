package doctor

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/units"
)

// ackClockSlowed says a flow's round trip grew far beyond its minimum: its
// packets wait in a queue somewhere, or its ACKs come late.
func ackClockSlowed(f *Flow) bool {
	return f.RTTus >= 4*f.MinRTTus && time.Duration(f.RTTus-f.MinRTTus)*time.Microsecond >= pathQueueDelay
}

// readerBehind counts the zero windows the flow's observed receiver had to
// advertise (its namespace's counters) when the sender met a shut window
// itself: an application that stops reading. A receiver's lone zero window
// (a slow start, a close) says nothing of this flow. Such a receiver also
// holds its ACKs back (it acknowledges at once only when the window can
// move), which slows the sender's ACK clock like a queue.
func readerBehind(ev *Evidence, f *Flow) int64 {
	if f.LimitShares["swnd"] < 0.02 {
		return 0
	}
	p := ev.peerFlow(f)
	if p == nil {
		return 0
	}
	ns := ev.NamespaceNamed(p.Netns)
	if ns == nil {
		return 0
	}
	return ns.Counters["TcpExt.TCPToZeroWindowAdv"] + ns.Counters["TcpExt.TCPWantZeroWindowAdv"]
}

// queueDropsOf are the drops of a flow's packets by a full queue. Such a
// queue is what slows the flow's ACK clock: a receiver's zero windows beside
// them are the out-of-order data the loss left in its buffer, not a reader
// holding its ACKs back.
func queueDropsOf(ev *Evidence, f *Flow) []Drop {
	var out []Drop
	for _, d := range ev.Drops {
		if strings.HasPrefix(d.Reason, "QDISC_") && ev.sentBy(&d) == f {
			out = append(out, d)
		}
	}
	return out
}

// benign says whether a drop follows from normal operation.
func benign(d *Drop) bool { return event.RoutineDrop(d.Reason, d.Location) }

// unobserved says so of a device that no observed namespace holds.
func unobserved(ev *Evidence, dev string) string {
	if dev == "" || ev.deviceNetns(dev) != "" {
		return ""
	}
	return " (a namespace the doctor does not observe)"
}

func topLimit(f *Flow) (string, float64) {
	best, share := "", 0.0
	for r, s := range f.LimitShares {
		if s > share {
			best, share = r, s
		}
	}
	return best, share
}

func flowScope(f *Flow) string {
	return fmt.Sprintf("socket %s -> %s (netns %s)", f.Local, f.Peer, f.Netns)
}

func physicalPath(ev *Evidence, f *Flow) bool {
	return ev.DeviceNamed(f.Netns, f.Dev).physical()
}

func busiest(ev *Evidence) *CPUUse {
	var b *CPUUse
	for i := range ev.CPUs {
		if b == nil || ev.CPUs[i].Busy() > b.Busy() {
			b = &ev.CPUs[i]
		}
	}
	return b
}

func cpuSplit(c *CPUUse) string {
	return fmt.Sprintf("user %s, system %s, softirq %s, irq %s", pct(c.User), pct(c.System), pct(c.Softirq), pct(c.IRQ))
}

// nsPrefix runs a command in the namespace it concerns.
func nsPrefix(netns string) string {
	if netns == "" || netns == "host" || netns == "init" {
		return ""
	}
	return "ip netns exec " + netns + " "
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func pct(v float64) string { return units.Percent(v) }

func sortBy[T any](s []T, key func(T) float64) {
	sort.SliceStable(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
}
