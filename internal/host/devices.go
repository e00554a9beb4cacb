package host

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Device is a network device's settings and counters, as netlink and the
// ethtool ioctls report them in its namespace.
type Device struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	Kind  string `json:"kind"` // netlink's link type: veth, vxlan, bridge, device ...
	MTU   int    `json:"mtu"`
	// PeerIndex is a veth's peer (IFLA_LINK) and PeerNetnsID the peer's
	// namespace id as this namespace knows it (-1 when in the same one).
	PeerIndex   int `json:"peer_index,omitempty"`
	PeerNetnsID int `json:"peer_netns_id,omitempty"`
	// LowerIndex is a VXLAN device's underlay device, 0 when unbound.
	LowerIndex int            `json:"lower_index,omitempty"`
	Addrs      []netip.Prefix `json:"addrs,omitempty"`
	Stats      LinkStats      `json:"stats"`
	Driver     string         `json:"driver,omitempty"`
	Firmware   string         `json:"firmware,omitempty"`
	BusInfo    string         `json:"bus_info,omitempty"`
	// PCI ids from sysfs when the bus is PCI ("0x8086", "0x15b9").
	Vendor   string `json:"vendor,omitempty"`
	DeviceID string `json:"device_id,omitempty"`
	// SpeedMbps is the link speed; 0 when the device has none (virtual devices).
	SpeedMbps int             `json:"speed_mbps,omitempty"`
	Features  map[string]bool `json:"features,omitempty"`
	// Fixed are the offload features off and [fixed] in ethtool -k (the
	// device or its backend lacks them); Held those requested yet held off
	// by a feature they need (GSO without scatter-gather). ethtool -K turns
	// on neither.
	Fixed []string `json:"fixed_features,omitempty"`
	Held  []string `json:"held_features,omitempty"`
	// Ring sizes (RX/TX descriptors) and channels, when the driver reports
	// them, with the largest the driver accepts.
	RxRing           uint32 `json:"rx_ring,omitempty"`
	TxRing           uint32 `json:"tx_ring,omitempty"`
	RxRingMax        uint32 `json:"rx_ring_max,omitempty"`
	CombinedChannels uint32 `json:"combined_channels,omitempty"`
	RxChannels       uint32 `json:"rx_channels,omitempty"`
	MaxChannels      uint32 `json:"max_channels,omitempty"`
	// Coalesce is the NIC's receive interrupt coalescing (ethtool -c), when
	// the driver reports it: how long it may hold a received packet before
	// it interrupts.
	Coalesce *Coalesce `json:"coalesce,omitempty"`
	// ErrorStats are the driver's `ethtool -S` counters that count trouble
	// (drops, errors, misses, FIFO overruns).
	ErrorStats map[string]uint64 `json:"error_stats,omitempty"`
	// IRQs are the NIC's interrupts, and Interrupts their counts per CPU
	// (/proc/interrupts): where its receive work starts.
	IRQs       []int    `json:"irqs,omitempty"`
	Interrupts []uint64 `json:"interrupts_per_cpu,omitempty"`
	Qdiscs     []Qdisc  `json:"qdiscs,omitempty"`
	Notes      []string `json:"notes,omitempty"`
}

// Coalesce is a NIC's receive interrupt coalescing. RxUsecs is the
// driver's value as ethtool shows it: e1000 and e1000e take 0-4 as modes
// (off, dynamic ...), microseconds from 10.
type Coalesce struct {
	RxUsecs    uint32 `json:"rx_usecs"`
	RxFrames   uint32 `json:"rx_frames,omitempty"`
	AdaptiveRx bool   `json:"adaptive_rx,omitempty"`
}

// LinkStats are the kernel's per-device counters.
type LinkStats struct {
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
	RxErrors  uint64 `json:"rx_errors"`
	TxErrors  uint64 `json:"tx_errors"`
}

// UnmarshalJSON reads this version's keys and those of versions that wrote
// the field names (RxPackets ...).
func (s *LinkStats) UnmarshalJSON(b []byte) error {
	type plain LinkStats
	return unmarshalSnake(b, (*plain)(s))
}

// Sub is the change since an earlier reading.
func (s LinkStats) Sub(o LinkStats) LinkStats {
	return LinkStats{s.RxPackets - o.RxPackets, s.TxPackets - o.TxPackets, s.RxBytes - o.RxBytes, s.TxBytes - o.TxBytes,
		s.RxDropped - o.RxDropped, s.TxDropped - o.TxDropped, s.RxErrors - o.RxErrors, s.TxErrors - o.TxErrors}
}

// Qdisc is one queueing discipline or shaping class and its counters.
type Qdisc struct {
	Kind   string `json:"kind"`
	Handle string `json:"handle"`
	Parent string `json:"parent"`
	// RateBps is the shaping rate in bytes per second (tbf, htb classes), 0 for none.
	RateBps    uint64 `json:"rate_bytes_per_second,omitempty"`
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Requeues   uint64 `json:"requeues"`
	Backlog    uint64 `json:"backlog"`
}

// The offload features the doctor judges, by the kernel's names (ethtool -k
// shows tx-tcp-segmentation under tcp-segmentation-offload, rx-gro as
// generic-receive-offload, rx-lro as large-receive-offload).
var offloadFeatures = []string{
	"tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-generic-segmentation",
	"rx-gro", "rx-lro", "rx-gro-hw", "rx-udp-gro-forwarding",
	"rx-checksum", "tx-scatter-gather", "tx-checksum-ip-generic", "tx-checksum-ipv4",
}

// LinksHere opens netlink in the calling thread's namespace and lists its
// devices; the handle is the caller's to close.
func LinksHere() (*netlink.Handle, []netlink.Link, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, nil, fmt.Errorf("opening netlink: %w", err)
	}
	links, err := h.LinkList()
	if err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("listing network devices: %w", err)
	}
	return h, links, nil
}

// ReadDevices lists the devices of the calling thread's namespace (run it in
// Netns.Do for another), with ethtool details where the driver supports them.
func ReadDevices() ([]Device, error) {
	h, links, err := LinksHere()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	et, etErr := ethtool.NewEthtool()
	if etErr == nil {
		defer et.Close()
	}
	interrupts, _ := InterruptCounts() // none to read: no device gets counts
	var out []Device
	for _, l := range links {
		a := l.Attrs()
		d := Device{Name: a.Name, Index: a.Index, Kind: l.Type(), MTU: a.MTU}
		if l.Type() == "veth" {
			d.PeerIndex, d.PeerNetnsID = a.ParentIndex, a.NetNsID
		}
		if v, ok := l.(*netlink.Vxlan); ok {
			d.LowerIndex = v.VtepDevIndex
		}
		if s := a.Statistics; s != nil {
			d.Stats = LinkStats{s.RxPackets, s.TxPackets, s.RxBytes, s.TxBytes, s.RxDropped, s.TxDropped, s.RxErrors, s.TxErrors}
		}
		if addrs, err := h.AddrList(l, netlink.FAMILY_ALL); err == nil {
			for _, ad := range addrs {
				if p, ok := netipPrefix(ad); ok {
					d.Addrs = append(d.Addrs, p)
				}
			}
		}
		d.Qdiscs = readQdiscs(h, l)
		if etErr != nil {
			d.Notes = append(d.Notes, "ethtool unavailable: "+etErr.Error())
		} else if a.Name != "lo" {
			readEthtool(et, &d)
		}
		if d.IRQs = pciIRQs(d.BusInfo); len(d.IRQs) > 0 && interrupts != nil {
			for _, irq := range d.IRQs {
				for cpu, n := range interrupts[irq] {
					if cpu >= len(d.Interrupts) {
						d.Interrupts = append(d.Interrupts, make([]uint64, cpu+1-len(d.Interrupts))...)
					}
					d.Interrupts[cpu] += n
				}
			}
		}
		out = append(out, d)
	}
	return out, nil
}

func netipPrefix(a netlink.Addr) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok || a.IPNet == nil {
		return netip.Prefix{}, false
	}
	ones, _ := a.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones), true
}

// readEthtool fills what the driver reports; each part it cannot read
// becomes a note, never an error: virtual devices lack most of them.
func readEthtool(et *ethtool.Ethtool, d *Device) {
	if info, err := et.DriverInfo(d.Name); err == nil {
		d.Driver, d.Firmware, d.BusInfo = info.Driver, info.FwVersion, info.BusInfo
		d.Vendor, d.DeviceID = pciIDs(info.BusInfo)
	} else {
		d.Notes = append(d.Notes, "no driver information (ethtool -i): "+errText(err))
	}
	if feats, err := et.FeaturesWithState(d.Name); err == nil {
		d.Features = map[string]bool{}
		for _, f := range offloadFeatures {
			if st, ok := feats[f]; ok {
				d.Features[f] = st.Active
				switch {
				case st.Active:
				case !st.Available:
					d.Fixed = append(d.Fixed, f)
				case st.Requested:
					d.Held = append(d.Held, f)
				}
			}
		}
	} else {
		d.Notes = append(d.Notes, "no offload features (ethtool -k): "+errText(err))
	}
	if m, err := et.CmdGetMapped(d.Name); err == nil {
		// 0xffffffff (SPEED_UNKNOWN) and 0 both mean no speed to judge against.
		if s := m["speed"]; s > 0 && s < 0xffffffff {
			d.SpeedMbps = int(s)
		}
	}
	if r, err := et.GetRing(d.Name); err == nil {
		d.RxRing, d.TxRing, d.RxRingMax = r.RxPending, r.TxPending, r.RxMaxPending
	}
	if c, err := et.GetChannels(d.Name); err == nil {
		d.CombinedChannels, d.RxChannels = c.CombinedCount, c.RxCount
		d.MaxChannels = max(c.MaxCombined, c.MaxRx)
	}
	if c, err := et.GetCoalesce(d.Name); err == nil {
		d.Coalesce = &Coalesce{RxUsecs: c.RxCoalesceUsecs, RxFrames: c.RxMaxCoalescedFrames, AdaptiveRx: c.UseAdaptiveRxCoalesce != 0}
	}
	if stats, err := et.Stats(d.Name); err == nil {
		for k, v := range stats {
			if troubleStat(k) {
				if d.ErrorStats == nil {
					d.ErrorStats = map[string]uint64{}
				}
				d.ErrorStats[k] = v
			}
		}
	}
}

func troubleStat(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"drop", "err", "miss", "fifo", "no_buf", "nobuf", "over", "timeout", "discard"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func errText(err error) string {
	if errors.Is(err, os.ErrNotExist) {
		return "not supported"
	}
	return err.Error()
}

// pciIDs reads the vendor and device ids of a PCI bus address from sysfs.
func pciIDs(bus string) (vendor, device string) {
	if bus == "" || strings.ContainsAny(bus, "/ ") {
		return "", ""
	}
	dir := filepath.Join("/sys/bus/pci/devices", bus)
	v, err1 := os.ReadFile(filepath.Join(dir, "vendor"))
	d, err2 := os.ReadFile(filepath.Join(dir, "device"))
	if err1 != nil || err2 != nil {
		return "", ""
	}
	return strings.TrimSpace(string(v)), strings.TrimSpace(string(d))
}

func readQdiscs(h *netlink.Handle, l netlink.Link) []Qdisc {
	qs, err := h.QdiscList(l)
	if err != nil {
		return nil
	}
	var out []Qdisc
	for _, q := range qs {
		a := q.Attrs()
		e := Qdisc{Kind: q.Type(), Handle: netlink.HandleStr(a.Handle), Parent: netlink.HandleStr(a.Parent)}
		if t, ok := q.(*netlink.Tbf); ok {
			e.RateBps = t.Rate
		}
		fillQueueStats(&e, (*netlink.ClassStatistics)(a.Statistics))
		out = append(out, e)
	}
	if classes, err := h.ClassList(l, 0); err == nil {
		for _, c := range classes {
			hc, ok := c.(*netlink.HtbClass)
			if !ok {
				continue
			}
			a := hc.Attrs()
			e := Qdisc{Kind: "htb class", Handle: netlink.HandleStr(a.Handle), Parent: netlink.HandleStr(a.Parent), RateBps: hc.Rate}
			fillQueueStats(&e, a.Statistics)
			out = append(out, e)
		}
	}
	return out
}

func fillQueueStats(e *Qdisc, s *netlink.ClassStatistics) {
	if s == nil {
		return
	}
	if s.Basic != nil {
		e.Packets, e.Bytes = uint64(s.Basic.Packets), s.Basic.Bytes
	}
	if s.Queue != nil {
		e.Drops, e.Overlimits, e.Requeues, e.Backlog = uint64(s.Queue.Drops), uint64(s.Queue.Overlimits),
			uint64(s.Queue.Requeues), uint64(s.Queue.Backlog)
	}
}
