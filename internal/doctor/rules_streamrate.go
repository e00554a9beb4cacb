package doctor

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/units"
)

// streamCopyCost is how many bytes this CPU copies in the time a TCP
// stream over veth moves one, when nothing holds it: the copies into and
// out of the socket and the stack's work around them. Measured on the
// lab's VM (kernel 6.18, 2 CPUs, 2026-11-28): the lab's own generator moved
// 29.9-34.4 Gbit/s while the CPU copied 27.3-28.4 GB/s, 6.6-7.4 bytes
// copied for each moved (7.4-8.7 with the doctor's tracing on), iperf3
// 22.9-24.3 Gbit/s beside 25.4-26.6 GB/s, 8.4-9.3. Between the two, 8 put
// every calibrated estimate of the lab's within 13 points of what the
// fault cost (7 put iperf3's three offload faults 14-15 over). Another
// CPU or kernel moves the ratio: the estimate says which it used.
const streamCopyCost = 8

// streamRate is what one TCP stream carries over virtual devices on this
// host when nothing holds it: its CPU's copy rate (Evidence.CopyRate) over
// streamCopyCost. A virtual device has no speed; its path's rate is the
// CPU's, and where a limit also raised the stream's cost per byte (a
// shaper segmenting its skbs, offloads off, an XDP program that took the
// peer's TSO and GRO) the stream's own cost in the limited run says
// little of it: a shaped stream at 188 Mbit/s kept its CPU 43 % busy.
func streamRate(ev *Evidence) (float64, string, bool) {
	if ev.CopyRate <= 0 || streamCopyCost <= 0 {
		return 0, "", false
	}
	return ev.CopyRate * 8 / streamCopyCost, fmt.Sprintf("a stream's rate over veth on this host: its CPU copies %s a second, "+
		"a stream moves a byte for every %.1f copied", units.Bytes(uint64(ev.CopyRate)), float64(streamCopyCost)), true
}

// liftedGain is the share of throughput flows at tx bits/s would gain
// without a limit that also raised their cost per byte: the larger of
// what the CPU allows at their cost now (cpuBoundGain) and what a stream
// on this host carries (streamRate). Its text is the arithmetic, left
// open for the caller's reason, as cpuBoundGain's.
func liftedGain(ev *Evidence, tx float64) (float64, string, bool) {
	gain, how, ok := cpuBoundGain(ev, tx)
	if rate, rateHow, rok := streamRate(ev); rok && tx > 0 && (!ok || 1-tx/rate > gain) {
		return max(0, 1-tx/rate), fmt.Sprintf("1 - %s / %s without it (%s", units.Bits(tx), units.Bits(rate), rateHow), true
	}
	return gain, how, ok
}

// virtualDevice says whether a device is one of the kernel's own (veth,
// bridge, vxlan ...), whose rate is the CPU's: a NIC without a link speed
// (virtio-net) is not, and keeps the estimates made from its own costs (a
// stream's rate over veth put a virtio NIC's TSO, off, above the GRO off
// that was the fault).
func virtualDevice(d *Device) bool { return d != nil && d.Kind != "device" }

// sendersOverVirtual is the sending flows' rate and whether every one of
// them leaves through the kernel's own devices with no shaper on them:
// there a stream's rate on this host bounds what they would do without a
// limit that costs CPU per byte (liftedGain). A shaper's class keeps the
// costs of the limited run (an htb at 20 Gbit/s held its stream to 12).
func (e *Evidence) sendersOverVirtual() (float64, bool) {
	var tx float64
	unshaped := true
	for _, f := range e.senders() {
		tx += f.SendBps()
		if !virtualDevice(e.DeviceNamed(f.Netns, f.Dev)) || e.deviceLimit(KindTBFRate, f.Netns, f.Dev) != nil || e.deviceLimit(KindHTBClassRate, f.Netns, f.Dev) != nil {
			unshaped = false
		}
	}
	return tx, unshaped && tx > 0
}
