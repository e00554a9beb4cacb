package doctor

import (
	"net/netip"
	"slices"
	"strings"
)

func (e *Evidence) sysctl(netns, name string) string {
	if ns := e.NamespaceNamed(netns); ns != nil {
		return ns.Sysctls[name]
	}
	return ""
}

// deviceNetns names the observed namespace that holds a device.
func (e *Evidence) deviceNetns(dev string) string {
	for _, ns := range e.Namespaces {
		if e.DeviceNamed(ns.Name, dev) != nil {
			return ns.Name
		}
	}
	return ""
}

// sentThrough sums the TCP rates sent through a device by the observed
// flows whose local address it holds.
func (e *Evidence) sentThrough(netns, dev string) (tx float64) {
	for i := range e.Flows {
		if f := &e.Flows[i]; f.Netns == netns && f.Dev == dev {
			tx += f.SendBps()
		}
	}
	return tx
}

// bulkThrough sums the TCP rates sent and received through a device by the
// observed flows whose local address it holds, when they are bulk: all of
// them from bulkBps together, else those streaming; 0 for none.
func (e *Evidence) bulkThrough(netns, dev string) (tx, rx float64) {
	var allTx, allRx float64
	for i := range e.Flows {
		if f := &e.Flows[i]; f.Netns == netns && f.Dev == dev {
			allTx += f.SendBps()
			allRx += f.RecvBps()
			if e.streaming(f.SendBps(), f) {
				tx += f.SendBps()
			}
			if e.streaming(f.RecvBps(), e.peerFlow(f)) {
				rx += f.RecvBps()
			}
		}
	}
	if allTx >= bulkBps {
		tx = allTx
	}
	if allRx >= bulkBps {
		rx = allRx
	}
	return tx, rx
}

// streaming says whether a flow below bulkBps still moves bulk: at least
// minBulkBps while its sender, observed with a recording, waited on its
// application less than half the time (held by the network), or did so on
// a saturated CPU (an application that cannot write faster is CPU-bound,
// not paced). An emulated NIC's whole stream runs at 3-150 Mbit/s, astride
// any fixed bar; the offload rules want 1000 skbs besides.
func (e *Evidence) streaming(rate float64, sender *Flow) bool {
	if rate < minBulkBps || sender == nil || sender.LimitShares == nil {
		return false
	}
	if sender.LimitShares["app"] < 0.5 {
		return true
	}
	c := busiest(e)
	return c != nil && c.Busy() >= cpuBusy
}

// lostRetrans are a flow's retransmissions less its share of those its
// namespace's receivers proved needless (DSACK), or took as needless with
// them (splitRetrans): reordering, not loss, and TCP undoes the window cuts
// they caused.
func (ev *Evidence) lostRetrans(f *Flow) uint64 {
	ns := ev.NamespaceNamed(f.Netns)
	if ns == nil || f.Retrans == 0 {
		return uint64(f.Retrans)
	}
	s := ev.splitRetrans(ns, ev.locatedLoss())
	if s.retrans <= 0 || s.lost() >= s.retrans {
		return uint64(f.Retrans)
	}
	return uint64(float64(f.Retrans) * float64(s.lost()) / float64(s.retrans))
}

// dsackSegs is how many retransmitted segments the receiver reported as
// duplicates: TCPDSACKRecvSegs (5.10 and later), else one per DSACK.
func dsackSegs(c map[string]int64) int64 {
	if n, ok := c["TcpExt.TCPDSACKRecvSegs"]; ok {
		return n
	}
	return c["TcpExt.TCPDSACKRecv"]
}

// lowerOf finds a tunnel's underlay: the device it is bound to, or else the
// one device of the namespace that received more packets than the tunnel.
func (ns *Namespace) lowerOf(t *Device) *Device {
	var best *Device
	for i := range ns.Devices {
		d := &ns.Devices[i]
		if t.LowerIndex != 0 && d.Index == t.LowerIndex {
			return d
		}
		if t.LowerIndex == 0 && !tunnel(d) && d.Name != "lo" && d.Recv != nil && (best == nil || d.Recv.Skbs > best.Recv.Skbs) {
			best = d
		}
	}
	return best
}

func tunnel(d *Device) bool { return d.Kind == "vxlan" || d.Kind == "geneve" }

// physical says whether the device is a NIC with a link speed: veth reports
// a nominal 10000 Mbit/s that limits nothing.
func (d *Device) physical() bool {
	return d != nil && d.Kind == "device" && d.SpeedMbps > 0
}

func (d *Device) featureOff(names ...string) bool {
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			return true
		}
	}
	return false
}

// locked says whether every named feature that is off is one ethtool -K
// cannot turn on: fixed, or held off by another.
func (d *Device) locked(names ...string) bool {
	found := false
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			if !slices.Contains(d.Fixed, n) && !slices.Contains(d.Held, n) {
				return false
			}
			found = true
		}
	}
	return found
}

func (d *Device) offList(names ...string) string {
	var off []string
	for _, n := range names {
		if on, ok := d.Features[n]; ok && !on {
			off = append(off, n)
		}
	}
	return strings.Join(off, " and ")
}

// holds says whether the device has the address.
func (d *Device) holds(a netip.Addr) bool {
	for _, p := range d.Addrs {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

func (d *Device) rxBytesPerPacket() float64 {
	if d.Stats.RxPackets == 0 {
		return 0
	}
	return float64(d.Stats.RxBytes) / float64(d.Stats.RxPackets)
}

func (d *Device) txBytesPerPacket() float64 {
	if d.Stats.TxPackets == 0 {
		return 0
	}
	return float64(d.Stats.TxBytes) / float64(d.Stats.TxPackets)
}

// ErrorStatsClean says whether no driver trouble counter moved.
func (d *Device) ErrorStatsClean() bool {
	for _, v := range d.ErrorStats {
		if v > 0 {
			return false
		}
	}
	return d.Stats.RxErrors == 0 && d.Stats.TxErrors == 0 && d.Stats.RxDropped == 0
}

// smallSkbs says whether skbs averaged less than 16 KB: one segment per skb
// only costs where segments are small (not on loopback's 64 KB MTU).
func (d *DirUse) smallSkbs() bool {
	return d.Skbs > 0 && d.Bytes/d.Skbs < 16<<10
}
