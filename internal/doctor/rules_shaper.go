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

// Limit kinds of shapers (docs/findings.md#limits), read by the observer
// (observe/limits_qdisc.go).
const (
	KindTBFRate      = "tbf_rate"
	KindHTBClassRate = "htb_class_rate"
	// KindTBFLimit is a tbf's queue limit, which qdisc-bloat names: the
	// observer reads it with the rate (tbf_rate's value).
	KindTBFLimit = "tbf_limit"
)

// ShaperObject is where a shaper is set: its device and its handle (a
// qdisc's, or an htb class's classid), as rate-shaped finds it in the
// device's qdiscs.
func ShaperObject(dev, handle string) string {
	return "dev " + dev + " handle " + handle
}

// shaperLimit is the limit the observer read for the shaper q on device
// dev of namespace netns; nil where it read none (an evidence from before
// limits, or netlink refused).
func shaperLimit(ev *Evidence, netns, dev, handle string) *finding.Limit {
	obj := ShaperObject(dev, handle)
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if (l.Kind == KindTBFRate || l.Kind == KindHTBClassRate) && l.Where.Layer == finding.LayerDevice &&
			l.Where.Netns == netns && l.Where.Object == obj && slices.Contains(l.Applies.Devices, dev) {
			c := *l
			c.Undo = append([]finding.Action{}, l.Undo...)
			return &c
		}
	}
	return nil
}

// burstNeed is the bucket a tbf needs for a TSO/GSO flow: the bursts TCP
// small queues lets one flow put in front of the device at once (two skbs
// of up to 64 KiB), or the rate's worth of a millisecond where that is more.
func burstNeed(rateBytes uint64) (uint64, string) {
	const tsoBurst = 2 * 65536
	ms := rateBytes / 1000
	if ms > tsoBurst {
		return ms, fmt.Sprintf("burst: a millisecond at %d bytes/s = %d bytes (more than two 64 KiB TSO skbs)", rateBytes, ms)
	}
	return tsoBurst, fmt.Sprintf("burst: two 64 KiB TSO skbs (TCP small queues keeps two per flow at the qdisc) = %d bytes, more than a millisecond at %d bytes/s (%d)", uint64(tsoBurst), rateBytes, ms)
}

// shaperFinding names the shaper's limit in a rate-shaped finding: the
// evidence describes it, and the remedy is rendered from it. A tbf whose
// bucket holds the flow below its rate gets, after its removal, the change
// of its bucket computed from the rate.
func shaperFinding(out *finding.Finding, lim *finding.Limit, q qdiscRate, bucketBound bool) {
	if bucketBound && lim.Kind == KindTBFRate && len(lim.Undo) > 0 && len(lim.Undo[0].Argv) > 0 {
		burst, how := burstNeed(q.RateBps)
		del := lim.Undo[0]
		// tc qdisc change ... takes the same place as del.
		argv := append([]string{"tc", "qdisc", "change"}, del.Argv[3:]...)
		argv = append(argv, "tbf", "rate", fmt.Sprintf("%dbit", q.RateBps*8), "burst", fmt.Sprint(burst), "latency", "20ms")
		lim.Undo = append(lim.Undo[:1:1], append([]finding.Action{finding.Command(del.Netns, argv...)}, lim.Undo[1:]...)...)
		lim.Arithmetic = how
	}
	out.Evidence = append(out.Evidence, lim.Describe())
	if lim.Arithmetic != "" {
		out.Evidence = append(out.Evidence, "the bucket it needs: "+lim.Arithmetic)
	}
	out.Limit = lim
	out.Remedy = lim.Remedy()
}

// qdiscRate is what shaperFinding needs of a shaper.
type qdiscRate struct {
	RateBps uint64
}

// maxShaperImpact bounds a shaper's impact on a virtual device.
const maxShaperImpact = 0.9

// shaperImpact is the share of throughput a shaper takes from the TCP
// through it (tx bits/s, under a rate of limit): 1 - tx / what the flows
// would carry without it. That is the link's speed on a NIC; on a virtual
// device, nothing but the CPU bounds them, and a flow's CPU cost per byte
// holds (it falls at higher rates: larger batches), so without the shaper
// they would run until the busiest CPU saturates: tx / its busy share.
// Other work on that CPU makes the estimate lower, never higher. It is
// held to maxShaperImpact: another limit on the flows (a late reader) is
// not in the CPU's share, and a stage's queue that holds the bytes most
// of their way (at most 0.95) ranks above the shaper it waits behind.
func shaperImpact(ev *Evidence, d *Device, tx, limit float64) (float64, string) {
	if d.physical() {
		speed := float64(d.SpeedMbps) * 1e6
		return max(0, 1-max(tx, limit)/speed), fmt.Sprintf("1 - %s / the link's %s", units.Bits(max(tx, limit)), units.Bits(speed))
	}
	gain := liftedGain
	if d != nil && !virtualDevice(d) {
		gain = cpuBoundGain // a NIC without a speed: its own costs
	}
	impact, how, ok := gain(ev, tx)
	if !ok {
		return 0.5, "half: neither the link's speed nor the CPUs are known"
	}
	return min(maxShaperImpact, impact), how + ": a virtual device has no speed, the CPU bounds them)"
}

// cpuBoundGain is the share of throughput the flows (tx bits/s) would gain
// if what holds them were lifted and only the CPU bounded them: their cost
// per byte holds (it falls at higher rates: larger batches), so they would
// run until the CPU their work weighs on most saturates, at tx / its busy
// share. Its text is the arithmetic, left open for the caller's reason.
func cpuBoundGain(ev *Evidence, tx float64) (float64, string, bool) {
	// The CPU the flows' work weighs on most: its busy share less the
	// user time of processes that made no socket call (other work, which
	// would not stand in the flows' way if they ran faster).
	var c *CPUUse
	var busy, other float64
	for i := range ev.CPUs {
		_, o := otherWorkOn(ev, ev.CPUs[i].CPU)
		if b := ev.CPUs[i].Busy() - o; c == nil || b > busy {
			c, busy, other = &ev.CPUs[i], b, o
		}
	}
	if c == nil || tx <= 0 {
		return 0, "", false
	}
	busy = max(busy, 0.01)
	without := tx / busy
	how := fmt.Sprintf("1 - %s / %s without it (the flows' rate over CPU %d's %s busy", units.Bits(tx), units.Bits(without), c.CPU, pct(busy))
	if other > 0 {
		how += fmt.Sprintf(", its %s busy less %s of other processes' user time", pct(c.Busy()), pct(other))
	}
	return max(0, 1-tx/without), how, true
}

// shaperQueue is how long a shaper's queue may be at its rate: a few
// milliseconds keep its link busy; more is only wait.
const shaperQueue = 5 * time.Millisecond

// shaperQueueLimit is a tbf's queue limit as the limit qdisc-bloat names:
// its undo changes the tbf to a queue of shaperQueue at its rate (at
// least its bucket), keeping its rate and bucket. Nil where the observer
// read no such tbf.
func shaperQueueLimit(ev *Evidence, netns, dev, handle string, rateBytes uint64) *finding.Limit {
	lim := shaperLimit(ev, netns, dev, handle)
	if lim == nil || lim.Kind != KindTBFRate || len(lim.Undo) == 0 || len(lim.Undo[0].Argv) < 5 {
		return nil
	}
	burst, limit := valueAfter(lim.Value, "burst"), valueAfter(lim.Value, "limit")
	if burst == 0 || limit == 0 {
		return nil
	}
	want := max(uint64(float64(rateBytes)*shaperQueue.Seconds()), burst)
	del := lim.Undo[0]
	argv := append(append([]string{"tc", "qdisc", "change"}, del.Argv[3:]...),
		"tbf", "rate", fmt.Sprintf("%dbit", rateBytes*8), "burst", fmt.Sprint(burst), "limit", fmt.Sprint(want))
	c := *lim
	c.Kind = KindTBFLimit
	c.Value = fmt.Sprintf("limit %d bytes (%s at its rate of %s)", limit, units.Duration(time.Duration(float64(limit)/float64(rateBytes)*float64(time.Second))), units.Bits(float64(rateBytes)*8))
	c.Arithmetic = fmt.Sprintf("%s at %d bytes/s = %d bytes (at least its bucket, %d bytes)", units.Duration(shaperQueue), rateBytes, want, burst)
	c.Undo = append([]finding.Action{finding.Command(del.Netns, argv...)}, lim.Undo[1:]...)
	return &c
}

// valueAfter is the number after word in a limit's value ("burst 65536").
func valueAfter(v, word string) uint64 {
	f := strings.Fields(v)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == word {
			n, _ := strconv.ParseUint(f[i+1], 10, 64)
			return n
		}
	}
	return 0
}
