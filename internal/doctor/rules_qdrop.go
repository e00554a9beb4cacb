package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Limit kinds of the qdiscs that drop a flow's packets, read by the
// observer (observe/limits_qdrop.go).
const (
	// KindQdiscLimit is a fifo's queue limit that overflowed.
	KindQdiscLimit = "qdisc_limit"
	// KindTcFilterDrop is a tc filter whose action shot packets (a gact
	// drop, a redirect that failed), which the qdisc counts as its drops.
	KindTcFilterDrop = "tc_filter_drop"
)

// lossByQdisc names what dropped the flows' packets in a qdisc, where the
// drops are a qdisc's: on the device that counted most of them, a filter
// whose action shot packets, else a fifo whose limit overflowed. The
// qdisc's own counters say which; its drop reason does not.
func lossByQdisc(ev *Evidence, f *finding.Finding) {
	byDev := map[string]uint64{}
	var total uint64
	for _, d := range ev.Drops {
		if benign(&d) || !ev.suffered(&d) || !strings.HasPrefix(d.Reason, "QDISC_") || d.Dev == "" {
			continue
		}
		byDev[d.Dev] += d.Count
		total += d.Count
	}
	if total < minLocatedDrops {
		return
	}
	var dev string
	for d, n := range byDev {
		if dev == "" || n > byDev[dev] || n == byDev[dev] && d < dev {
			dev = d
		}
	}
	netns := ev.deviceNetns(dev)
	var chosen *finding.Limit
	for _, kind := range []string{KindTcFilterDrop, KindQdiscLimit} {
		for i := range ev.Limits {
			l := &ev.Limits[i]
			if l.Kind == kind && slices.Contains(l.Applies.Devices, dev) && l.Where.Netns == netns {
				chosen = l
				break
			}
		}
		if chosen != nil {
			break
		}
	}
	if chosen == nil {
		return
	}
	l := *chosen
	l.Undo = append([]finding.Action{}, chosen.Undo...)
	counted := fmt.Sprintf("skb_drop [QDISC_*] counted %d of the flows' packets on %s", byDev[dev], dev)
	l.Arithmetic = strings.TrimPrefix(l.Arithmetic+"; "+counted, "; ")
	switch l.Kind {
	case KindTcFilterDrop:
		f.Title = fmt.Sprintf("packets are dropped by a tc filter on %s (netns %s): %s", dev, orNone(netns), l.Value)
		f.Explanation += " A tc filter's action shoots the flow's packets in the qdisc (a drop verdict, or a redirect to a device " +
			"that cannot take them): the qdisc reports them as its drops, and deleting the filter ends the loss."
	default:
		f.Title = fmt.Sprintf("packets are dropped by a full queue on %s (netns %s): %s", dev, orNone(netns), l.Value)
		f.Explanation += " A qdisc whose queue limit is shorter than the bursts it must hold drops the rest: the limit, not the link, loses them."
	}
	f.Evidence = append(f.Evidence, l.Describe(), "how: "+l.Arithmetic)
	f.Remedy = l.Remedy()
	f.Limit = &l
}

// packet-loss names the filter or the queue that dropped where the drops
// are a qdisc's.
func init() { wrapLossWarning(lossByQdisc) }
