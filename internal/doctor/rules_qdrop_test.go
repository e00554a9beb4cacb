package doctor

import (
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

func qdropLoss(t *testing.T, ev *Evidence) *finding.Finding {
	t.Helper()
	return warningOf(t, ev, "packet-loss")
}

// warningOf is the first finding id at warning or above in ev's diagnosis.
func warningOf(t *testing.T, ev *Evidence, id string) *finding.Finding {
	t.Helper()
	rep := Diagnose(ev)
	for i := range rep.Findings {
		if f := &rep.Findings[i]; f.ID == id && f.Severity >= finding.Warning {
			return f
		}
	}
	t.Fatalf("no %s warning: %v", id, ids(rep.Findings))
	return nil
}

// The lab's packet-loss-u32-ipid: a u32 filter redirects 1 in 256 of the
// flow's skbs to an ifb that is down, and the htb counts the failures as
// its drops (QDISC_DROP). The filter is the limit, its deletion the fix.
func TestQdiscDropNamesTheFilterThatShot(t *testing.T) {
	ev := load(t, "qdrop/packet-loss-u32-ipid.json")
	f := qdropLoss(t, ev)
	if f.Limit == nil || f.Limit.Kind != KindTcFilterDrop {
		t.Fatalf("limit %+v, want %s", f.Limit, KindTcFilterDrop)
	}
	if !strings.Contains(f.Remedy[0], "tc filter del dev skbs") || !strings.HasSuffix(f.Remedy[0], "handle 800::800 u32") ||
		!strings.HasPrefix(f.Remedy[0], "ip netns exec skbtrace-") {
		t.Errorf("remedy %q", f.Remedy)
	}
	if !strings.Contains(f.Title, "tc filter") || !strings.Contains(f.Limit.Arithmetic, "skb_drop [QDISC_*] counted") {
		t.Errorf("title %q, arithmetic %q", f.Title, f.Limit.Arithmetic)
	}
}

// A queue's limit or a filter on another device than the one whose qdisc
// dropped the flows' packets is not theirs; a fifo on that device is, where
// no filter there shot packets.
func TestQdiscDropLimitOnTheDroppingDeviceOnly(t *testing.T) {
	ev := load(t, "qdrop/packet-loss-u32-ipid.json")
	i := slices.IndexFunc(ev.Limits, func(l finding.Limit) bool { return l.Kind == KindTcFilterDrop })
	filter := ev.Limits[i]
	dev := filter.Applies.Devices[0]
	fifo := finding.Limit{Kind: KindQdiscLimit, Value: "pfifo limit 2 packets", Where: filter.Where,
		Applies: finding.Scope{Devices: []string{dev}},
		Undo:    []finding.Action{finding.Command(filter.Where.Netns, "tc", "qdisc", "change", "dev", dev, "parent", "1:10", "handle", "2:", "pfifo", "limit", "1000")},
		Source:  "tc -s -j qdisc show"}
	elsewhere := fifo
	elsewhere.Applies.Devices = []string{"other0"}
	ev.Limits = slices.Delete(ev.Limits, i, i+1)
	ev.Limits = append(ev.Limits, elsewhere)
	if f := qdropLoss(t, ev); f.Limit != nil {
		t.Errorf("a fifo on another device is named: %+v", f.Limit)
	}
	ev.Limits = append(ev.Limits, fifo, filter)
	if f := qdropLoss(t, ev); f.Limit == nil || f.Limit.Kind != KindTcFilterDrop {
		t.Errorf("with a filter that shot packets beside the fifo: %+v, want the filter", f.Limit)
	}
	ev.Limits = ev.Limits[:len(ev.Limits)-1]
	if f := qdropLoss(t, ev); f.Limit == nil || f.Limit.Kind != KindQdiscLimit || !strings.Contains(f.Remedy[0], "pfifo limit 1000") {
		t.Errorf("the fifo alone: %+v", f.Limit)
	}
}

// The lab's loss-tiny-queue, as the observer read it: a 2-packet pfifo
// under an htb class dropped the flow's segments; its limit is named, and
// the fix gives it the device's txqueuelen. Its impact is what the flow
// would gain without the loss, the CPU bounding it, not what the
// retransmission rate alone would put at stake.
func TestQdiscDropNamesTheFifoThatOverflowed(t *testing.T) {
	f := qdropLoss(t, load(t, "qdrop/loss-tiny-queue.json"))
	if f.Limit == nil || f.Limit.Kind != KindQdiscLimit || !strings.HasPrefix(f.Limit.Value, "pfifo limit 2 packets") {
		t.Fatalf("limit %+v, want the pfifo's", f.Limit)
	}
	if !strings.HasSuffix(f.Remedy[0], "pfifo limit 1000") || !strings.Contains(f.Remedy[0], "tc qdisc change dev skbs") {
		t.Errorf("remedy %q", f.Remedy)
	}
	if !strings.Contains(f.ImpactText, "without the loss") {
		t.Errorf("impact %q: not from what the flow would gain", f.ImpactText)
	}
}
