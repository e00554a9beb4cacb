package lab

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

// NIC lists the device faults built on real drivers: run with
// RunOptions.Wire on two NICs cabled to each other (make nics does, in QEMU
// guests with two emulated NICs of one model on a hub). Each undoes its
// changes to the NICs when it ends (Pair.restore): they outlive the
// namespaces.
var NIC = []*Scenario{
	{
		Name: "nic-baseline",
		Fault: "none: one iperf3 stream paced at 10 Mbit/s over the wire, both runs alike (an emulated NIC's full " +
			"speed is CPU-bound, which the doctor rightly names)",
		Families: []string{"tcp_conn", "tcp_sendlim", "dev_xmit", "dev_recv"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		Workload: iperf3("-b", "10M"),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("runs at %s and %s", units.Bits(c.Load.Bps), units.Bits(f.Load.Bps)),
				c.Load.Bps > 8e6 && f.Load.Bps > 8e6
		},
	},
	{
		Name:     "nic-tso-off",
		Fault:    "TSO and GSO off on the sender's NIC (control: the driver's defaults)",
		Expect:   "offload-disabled",
		Families: []string{"tcp_conn", "dev_xmit"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		Prepare: func(p *Pair) error {
			if err := needChangeable(p.Sender, p.SenderDev, "tx-tcp-segmentation", "tx-generic-segmentation"); err != nil {
				return err
			}
			// A receiver whose LRO passes GRO by (vmxnet3) is a warning of
			// its own in both runs, which ranked first once the CPUs were
			// not saturated: the fault is the sender's.
			return receiveThroughGRO(p)
		},
		Inject: func(p *Pair) error { return setFeatures(p, p.Sender, p.SenderDev, "tso", "off", "gso", "off") },
		Fix:    func(p *Pair) error { return setFeatures(p, p.Sender, p.SenderDev, "tso", "on", "gso", "on") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			on, off := c.device(p.SenderDev).Xmit.SegsPerSkb(), f.device(p.SenderDev).Xmit.SegsPerSkb()
			return fmt.Sprintf("dev_xmit %.1f segments per skb, against %.1f with TSO/GSO; throughput %s", off, on, change(c, f)),
				on > 1.5 && off < 1.1
		},
	},
	{
		Name:   "nic-gro-off",
		Fault:  "GRO off on the receiver's NIC, the sender's TSO off in both runs so the wire carries TCP segments (control: GRO on)",
		Expect: "offload-disabled",
		// The sender's TSO, off in both runs (GSO on), is reported too, after it.
		ExpectOn: func(p *Pair) string { return p.ReceiverDev },
		Families: []string{"tcp_conn", "dev_recv"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		Prepare: func(p *Pair) error {
			if err := needChangeable(p.Receiver, p.ReceiverDev, "rx-gro"); err != nil {
				return err
			}
			if err := receiveThroughGRO(p); err != nil {
				return err
			}
			return setFeatures(p, p.Sender, p.SenderDev, "tso", "off")
		},
		Inject: func(p *Pair) error { return setFeatures(p, p.Receiver, p.ReceiverDev, "gro", "off") },
		Fix:    func(p *Pair) error { return setFeatures(p, p.Receiver, p.ReceiverDev, "gro", "on") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			on, off := c.device(p.ReceiverDev).Recv.SegsPerSkb(), f.device(p.ReceiverDev).Recv.SegsPerSkb()
			return fmt.Sprintf("dev_recv %.1f segments per skb, against %.1f with GRO; throughput %s", off, on, change(c, f)),
				on > 1.2 && off < 1.05
		},
	},
	{
		Name: "nic-irq-one-cpu",
		Fault: "the receiver's interrupts and receive processing (IRQ affinity, RPS) on CPU 0, the sender's CPU and its NIC's, " +
			"which then does both hosts' network work (control: the receiver's own CPU 1)",
		Expect:   "cpu-saturated",
		Families: []string{"tcp_conn", "softirq", "napi_poll"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		// Each host's NIC on its own CPU, as its processes are: left where
		// the kernel put them, the sender's landed on CPU 1 and the fault
		// swapped the hosts' work between the CPUs instead of piling it on one.
		Prepare: func(p *Pair) error {
			if err := pinIRQs(p, p.Sender, p.SenderDev, 0); err != nil {
				return err
			}
			return pinIRQs(p, p.Receiver, p.ReceiverDev, 1)
		},
		Inject: func(p *Pair) error {
			if err := pinIRQs(p, p.Receiver, p.ReceiverDev, 0); err != nil {
				return err
			}
			return steerRPS(p, p.Receiver, p.ReceiverDev, "1")
		},
		// The fault is work piled on one CPU beside one with time to spare
		// for it. Under QEMU's single TCG thread a guest CPU with a runnable
		// task counts busy while the other runs: the receiver's CPU, left
		// only its reader, read 88 % busy there, and no placement was wrong.
		Unbuilt: func(c, f *Measurement, p *Pair) string {
			for cpu := 1; cpu < len(f.CPU); cpu++ {
				if f.cpuBusy(cpu) < doctor.SpareBusy {
					return ""
				}
			}
			return fmt.Sprintf("no CPU had time to spare for CPU 0's receive work: CPU 1 was %.0f %% busy in the fault run (%.0f %% in the control), "+
				"at least the %.0f %% beside which the doctor calls work misplaced", f.cpuBusy(1)*100, c.cpuBusy(1)*100, doctor.SpareBusy*100)
		},
		// Where the work went is the proof: both CPUs were busy before.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("%s took %.0f %% of its interrupts on CPU 0 (control %.0f %%), CPU 0 busy %.0f %% (control %.0f %%), CPU 1 %.0f %% (control %.0f %%); throughput %s",
					p.ReceiverDev, f.interruptShare(0)*100, c.interruptShare(0)*100, f.cpuBusy(0)*100, c.cpuBusy(0)*100,
					f.cpuBusy(1)*100, c.cpuBusy(1)*100, change(c, f)),
				f.interruptShare(0) >= 0.9 && c.interruptShare(0) <= 0.1 && f.cpuBusy(0) >= cpuSaturated
		},
	},
	{
		Name: "nic-mtu-mismatch",
		Fault: "the receiver's NIC (MTU 1500) advertises a jumbo MSS (route advmss 8960) to a sender at MTU 9000 with TSO off: " +
			"seed 002's jumbo frames meeting a NIC that takes 1500 (control: MSS negotiated from the MTUs)",
		Expect:   "mtu-mismatch",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		Prepare: func(p *Pair) error {
			if err := setMTU(p, p.Sender, p.SenderDev, 9000); err != nil {
				return err
			}
			return setFeatures(p, p.Sender, p.SenderDev, "tso", "off", "gso", "off")
		},
		Inject: func(p *Pair) error {
			_, err := p.Receiver.Run("ip", "route", "change", ReceiverAddr.Masked().String(), "dev", p.ReceiverDev, "advmss", "8960")
			return err
		},
		Fix: func(p *Pair) error { return setMTU(p, p.Sender, p.SenderDev, 1500) },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			// The receiving NIC discards frames above its MTU before any skb
			// exists (a driver counter, no skb_drop): a black hole the
			// sender's retransmissions show.
			var retrans uint64
			if s := f.sender(); s != nil {
				retrans = s.RetransSegs
			}
			return fmt.Sprintf("%d segments retransmitted by the sender; throughput %s", retrans, change(c, f)),
				retrans > 0 && f.Load.Bps < 0.1*c.Load.Bps
		},
		// virtio-net's mergeable receive buffers take frames of any size:
		// anything short of the black hole's collapse got its frames through
		// (a retransmission or two happen on a busy guest either way).
		Unbuilt: func(c, f *Measurement, p *Pair) string {
			if f.Load.Bps >= 0.1*c.Load.Bps {
				var retrans uint64
				if s := f.sender(); s != nil {
					retrans = s.RetransSegs
				}
				return fmt.Sprintf("%s took the jumbo frames despite its MTU 1500: %d segments retransmitted, %s against %s (the doctor says so, as mtu-mismatch at warning)",
					p.ReceiverDev, retrans, units.Bits(f.Load.Bps), units.Bits(c.Load.Bps))
			}
			return ""
		},
	},
	{
		Name: "nic-rx-csum-off",
		Fault: "receive checksum offload off on the receiver's NIC (ethtool -K rx off), the sender's TSO off in both runs " +
			"so the wire carries TCP segments (control: rx on)",
		Expect: "offload-disabled",
		// The sender's TSO, off in both runs (GSO on), is reported too, after it.
		ExpectOn:         func(p *Pair) string { return p.ReceiverDev },
		Families:         []string{"tcp_conn", "dev_recv", "softirq"},
		CountRxChecksums: true,
		Load:             load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		// The control has the device check checksums: e1000 leaves it off.
		Prepare: func(p *Pair) error {
			if err := needChangeable(p.Receiver, p.ReceiverDev, "rx-checksum"); err != nil {
				return err
			}
			if err := receiveThroughGRO(p); err != nil {
				return err
			}
			if err := setFeatures(p, p.Receiver, p.ReceiverDev, "rx", "on"); err != nil {
				return err
			}
			return setFeatures(p, p.Sender, p.SenderDev, "tso", "off")
		},
		Inject: func(p *Pair) error { return setFeatures(p, p.Receiver, p.ReceiverDev, "rx", "off") },
		Fix:    func(p *Pair) error { return setFeatures(p, p.Receiver, p.ReceiverDev, "rx", "on") },
		// A device that verifies nothing with rx on either offers a setting
		// without an effect: no fault to build.
		Unbuilt: func(c, f *Measurement, p *Pair) string {
			if c.RxChecksums.Packets() >= 1000 && c.RxChecksums.NoneShare() > 0.9 {
				return fmt.Sprintf("%s handed GRO %.0f %% of %d packets unverified with rx on too: the device does not check receive checksums",
					p.ReceiverDev, c.RxChecksums.NoneShare()*100, c.RxChecksums.Packets())
			}
			return ""
		},
		// The proof is the driver handing the packets over unverified. The
		// cost is not: under QEMU it drowns in the emulation's swings
		// (iperf3 within 7 % either way on vmxnet3), and with --doctor only
		// the fault run carries the doctor's own cost.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("%s handed GRO %.0f %% of %d packets unverified (CHECKSUM_NONE), against %.0f %% of %d with rx on; throughput %s",
					p.ReceiverDev, f.RxChecksums.NoneShare()*100, f.RxChecksums.Packets(),
					c.RxChecksums.NoneShare()*100, c.RxChecksums.Packets(), change(c, f)),
				f.RxChecksums.Packets() >= 1000 && c.RxChecksums.Packets() >= 1000 &&
					f.RxChecksums.NoneShare() >= 0.9 && c.RxChecksums.NoneShare() <= 0.1
		},
	},
	{
		Name: "nic-coalescing",
		Fault: "the receiver's NIC waits 10 ms after a packet before it interrupts (ethtool -C rx-usecs 10000) under " +
			"request/response of 100 bytes (control: the driver's setting)",
		Expect:   "irq-coalescing",
		Families: []string{"tcp_conn", "tcp_sendlim"},
		Load:     load.Options{Mode: load.RR, Duration: 3 * time.Second, Size: 100, Writes: 1, NoDelay: true, CC: "cubic"},
		Prepare:  func(p *Pair) error { return needCoalescing(p.Receiver, p.ReceiverDev) },
		Inject:   func(p *Pair) error { return setRxUsecs(p, p.Receiver, p.ReceiverDev, 10000) },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("%.0f transactions/s against %.0f, %.1f ms each against %.1f",
					f.Load.OpsPerSec, c.Load.OpsPerSec, f.Load.AvgRTTus/1000, c.Load.AvgRTTus/1000),
				f.Load.OpsPerSec > 0 && f.Load.OpsPerSec*2 < c.Load.OpsPerSec
		},
	},
	{
		Name: "nic-ring-overflow",
		Fault: "the receiver's RX ring at the smallest size its driver accepts (ethtool -G), its interrupts and two busy " +
			"processes on CPU 1 (control: the driver's ring, the same processes)",
		Expect:   "cpu-saturated",
		Also:     []string{"packet-loss"},
		Families: []string{"tcp_conn", "tcp_retrans", "napi_poll"},
		Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
		Prepare:  func(p *Pair) error { return pinIRQs(p, p.Receiver, p.ReceiverDev, 1) },
		Inject:   func(p *Pair) error { return smallestRxRing(p, p.Receiver, p.ReceiverDev) },
		During:   hog,
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("%d packets missed by %s's ring (ethtool -S), %d in the control; throughput %s",
					f.RingMissed, p.ReceiverDev, c.RingMissed, change(c, f)),
				f.RingMissed > c.RingMissed && f.RingMissed >= 10
		},
		// QEMU's emulated NICs (e1000e, virtio-net) hold frames while the
		// guest's ring is full, slowing the sender, rather than drop them.
		Unbuilt: func(c, f *Measurement, p *Pair) string {
			if f.RingMissed > 0 {
				return ""
			}
			var retrans uint64
			if s := f.sender(); s != nil {
				retrans = s.RetransSegs
			}
			return fmt.Sprintf("no ring counter of %s moved with its smallest ring under a busy CPU (%d segments retransmitted, lost outside the guest's NIC): "+
				"the device holds frames for a full ring instead of dropping them, as QEMU's emulated NICs do", p.ReceiverDev, retrans)
		},
	},
}

// smallestRxRing shrinks a NIC's receive ring to the least the driver
// takes, trying sizes upwards, and registers the old size's return.
func smallestRxRing(p *Pair, ns *host.Netns, dev string) error {
	d, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	if d.RxRing == 0 {
		return &NotBuildable{fmt.Sprintf("%s (driver %s) reports no ring sizes (ethtool -g)", dev, d.Driver)}
	}
	for _, n := range []uint32{32, 48, 64, 80, 128} {
		if n >= d.RxRing {
			break
		}
		if _, err := ns.Run("ethtool", "-G", dev, "rx", fmt.Sprint(n)); err != nil {
			continue
		}
		was := d.RxRing
		p.restore(func() error {
			_, err := ns.Run("ethtool", "-G", dev, "rx", fmt.Sprint(was))
			return err
		})
		return nil
	}
	return &NotBuildable{fmt.Sprintf("%s (driver %s) takes no RX ring smaller than %d (ethtool -G)", dev, d.Driver, d.RxRing)}
}

// pinIRQs sends every interrupt of a NIC (its PCI function's MSI vectors)
// to one CPU, and registers the old affinities' return.
func pinIRQs(p *Pair, ns *host.Netns, dev string, cpu int) error {
	d, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	if len(d.IRQs) == 0 {
		return &NotBuildable{fmt.Sprintf("%s (driver %s) has no MSI interrupts to pin", dev, d.Driver)}
	}
	for _, irq := range d.IRQs {
		path := fmt.Sprintf("/proc/irq/%d/smp_affinity_list", irq)
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading the affinity of %s's interrupt %d: %w", dev, irq, err)
		}
		if err := os.WriteFile(path, []byte(fmt.Sprint(cpu)), 0o644); err != nil {
			return fmt.Errorf("pinning %s's interrupt %d to CPU %d: %w", dev, irq, cpu, err)
		}
		was := strings.TrimSpace(string(b))
		p.restore(func() error { return os.WriteFile(path, []byte(was), 0o644) })
	}
	return nil
}

// steerRPS sets the CPUs a NIC's first receive queue hands its packets to
// (RPS, a hex mask) and registers the old mask's return.
func steerRPS(p *Pair, ns *host.Netns, dev, mask string) error {
	path := "/sys/class/net/" + dev + "/queues/rx-0/rps_cpus"
	was, err := ns.Run("cat", path)
	if err != nil {
		return err
	}
	if _, err := ns.Run("sh", "-c", "echo "+mask+" > "+path); err != nil {
		return fmt.Errorf("steering %s to CPU mask %s: %w", dev, mask, err)
	}
	p.restore(func() error {
		_, err := ns.Run("sh", "-c", "echo "+strings.TrimSpace(was)+" > "+path)
		return err
	})
	return nil
}

// readDevice reads one device's settings in its namespace.
func readDevice(ns *host.Netns, dev string) (*host.Device, error) {
	var devs []host.Device
	if err := ns.Do(func() (err error) { devs, err = host.ReadDevices(); return err }); err != nil {
		return nil, err
	}
	for i := range devs {
		if devs[i].Name == dev {
			return &devs[i], nil
		}
	}
	return nil, fmt.Errorf("finding %s in %s: no such device", dev, ns.Name)
}

// ringMissed is what a NIC's ring-overflow counters hold (ethtool -S: the
// largest of them, as drivers count one loss in several).
func ringMissed(d *host.Device) uint64 {
	var n uint64
	for k, v := range d.ErrorStats {
		if doctor.RingCounter(k) {
			n = max(n, v)
		}
	}
	return n
}

// interruptShare is the share of the NIC's interrupts a CPU took in a run.
func (m *Measurement) interruptShare(cpu int) float64 {
	var total uint64
	for _, n := range m.Interrupts {
		total += n
	}
	if total == 0 || cpu >= len(m.Interrupts) {
		return 0
	}
	return float64(m.Interrupts[cpu]) / float64(total)
}

// needCoalescing checks that the driver reports receive coalescing in
// microseconds that ethtool -C can change.
func needCoalescing(ns *host.Netns, dev string) error {
	d, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	if d.Coalesce == nil {
		return &NotBuildable{fmt.Sprintf("%s (driver %s) reports no interrupt coalescing (ethtool -c)", dev, d.Driver)}
	}
	return nil
}

// setRxUsecs sets a NIC's receive coalescing and registers the old value's
// return.
func setRxUsecs(p *Pair, ns *host.Netns, dev string, us uint32) error {
	d, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	if _, err := ns.Run("ethtool", "-C", dev, "rx-usecs", fmt.Sprint(us)); err != nil {
		return &NotBuildable{fmt.Sprintf("%s (driver %s) refuses rx-usecs %d: %v", dev, d.Driver, us, err)}
	}
	was := d.Coalesce.RxUsecs
	p.restore(func() error {
		_, err := ns.Run("ethtool", "-C", dev, "rx-usecs", fmt.Sprint(was))
		return err
	})
	return nil
}

// setMTU sets a device's MTU and, on a wire, registers putting the old one back.
func setMTU(p *Pair, ns *host.Netns, dev string, mtu int) error {
	out, err := ns.Run("cat", "/sys/class/net/"+dev+"/mtu")
	if err != nil {
		return err
	}
	was := strings.TrimSpace(out)
	if _, err := ns.Run("ip", "link", "set", dev, "mtu", fmt.Sprint(mtu)); err != nil {
		return &NotBuildable{fmt.Sprintf("%s refuses MTU %d: %v", dev, mtu, err)}
	}
	p.restore(func() error {
		_, err := ns.Run("ip", "link", "set", dev, "mtu", was)
		return err
	})
	return nil
}

// NotBuildable says a scenario's fault cannot be made on the devices at
// hand (a driver that refuses the setting): the lab reports it as skipped,
// with this reason, rather than failed.
type NotBuildable struct{ Reason string }

func (e *NotBuildable) Error() string { return "cannot be built here: " + e.Reason }

// needChangeable checks that ethtool -K can switch the features both ways
// on dev: a [fixed] one cannot make the fault.
func needChangeable(ns *host.Netns, dev string, features ...string) error {
	x, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	for _, f := range features {
		if _, ok := x.Features[f]; !ok || !x.Features[f] && (slices.Contains(x.Fixed, f) || slices.Contains(x.Held, f)) {
			return &NotBuildable{fmt.Sprintf("%s on %s (driver %s) cannot be switched: %s", f, dev, x.Driver, lockedOrAbsent(x, f))}
		}
	}
	return nil
}

func lockedOrAbsent(d *host.Device, f string) string {
	if _, ok := d.Features[f]; !ok {
		return "the driver does not report it"
	}
	return "off [fixed] or held off by a feature it needs (ethtool -k)"
}

// ethtoolFeature is the kernel's name of an ethtool -K switch.
var ethtoolFeature = map[string]string{"tso": "tx-tcp-segmentation", "gso": "tx-generic-segmentation", "gro": "rx-gro", "rx": "rx-checksum", "lro": "rx-lro"}

// receiveThroughGRO turns the receiving NIC's LRO off in both runs where it
// is on: vmxnet3 then hands its packets past GRO (and QEMU's merges none),
// so GRO on or off, and the checksums GRO verifies, would change nothing.
func receiveThroughGRO(p *Pair) error {
	d, err := readDevice(p.Receiver, p.ReceiverDev)
	if err != nil {
		return err
	}
	if !d.Features["rx-lro"] {
		return nil
	}
	// A driver that refuses it ([fixed] on) makes the fault unbuildable.
	return setFeatures(p, p.Receiver, p.ReceiverDev, "lro", "off")
}

// setFeatures runs ethtool -K on a device with "switch on|off" pairs and,
// on a wire, registers putting each switch back as it was when the pair closes.
func setFeatures(p *Pair, ns *host.Netns, dev string, pairs ...string) error {
	d, err := readDevice(ns, dev)
	if err != nil {
		return err
	}
	var undo []string
	for k := 0; k+1 < len(pairs); k += 2 {
		was := "off"
		if d.Features[ethtoolFeature[pairs[k]]] {
			was = "on"
		}
		undo = append(undo, pairs[k], was)
	}
	if _, err := ns.Run("ethtool", append([]string{"-K", dev}, pairs...)...); err != nil {
		// ethtool -k lists it as changeable, yet the driver refuses (virtio-net's rx-checksum).
		return &NotBuildable{fmt.Sprintf("%s (driver %s) refuses ethtool -K %s: %v", dev, d.Driver, strings.Join(pairs, " "), err)}
	}
	p.restore(func() error {
		if _, err := ns.Run("ethtool", append([]string{"-K", dev}, undo...)...); err != nil {
			return fmt.Errorf("restoring %s on %s: %w", strings.Join(undo, " "), dev, err)
		}
		return nil
	})
	return nil
}
