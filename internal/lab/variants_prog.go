package lab

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
)

func init() {
	Variants = append(Variants, progVariants...)
	Noise = append(Noise, progNoise...)
}

// progVariants build faults that a program on the path causes, named by
// the device-side provenance the doctor reads (netlink's XDP attachment,
// BPF program info). A steering mask has none: on two CPUs, which this
// lab's hosts have, receive work steered onto a busy CPU leaves no CPU idle
// to name as the mask's better choice (docs/lab.md).
var progVariants = []*Scenario{
	{
		Name: "xdp-drop-veth",
		Mechanism: "an XDP program attached (native mode, by netlink as ip link set ... xdp does) to the receiver's veth, " +
			"dropping frames: the drops happen in the program, and attaching it took the sender's veth's TSO away",
		Fault:    "an XDP program on the receiver's veth drops 1 % of the TCP frames at random (control: none)",
		Expect:   "packet-loss",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     bulk,
		Inject:   func(p *Pair) error { return attachXDPDrop(p.Receiver, p.ReceiverDev, 100, unix.XDP_FLAGS_DRV_MODE) },
		// The doctor's remedy, as it prints it.
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("ip", "link", "set", "dev", p.ReceiverDev, "xdp", "off")
			return err
		},
		// The retransmissions prove the loss; the skb drops are shown, not
		// required: 6.1 hands a veth's program a buffer of its own and
		// frees no skb for a dropped frame (0 skb_drop, 62 retransmitted).
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, retrans := f.devDrops(p.ReceiverDev), netRetrans(f)
			return fmt.Sprintf("%d skb_drop on %s (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, p.ReceiverDev, f.dropLocation(p.ReceiverDev), c.devDrops(p.ReceiverDev), retrans, netRetrans(c), change(c, f)),
				retrans > 10*(netRetrans(c)+1)
		},
	},
	{
		Name: "tc-bpf-drop",
		Mechanism: "a tc BPF classifier (clsact ingress, direct action, attached by netlink as tc filter add ... bpf da does) " +
			"on the receiver's veth, dropping packets: the drops happen in the program's verdict (TC_ACT_SHOT)",
		Fault:    "a tc BPF program on the receiver's veth ingress drops 1 % of the IPv4 packets at random (control: none)",
		Expect:   "packet-loss",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     bulk,
		Inject:   func(p *Pair) error { return attachTCDrop(p.Receiver, p.ReceiverDev, 100) },
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("tc", "qdisc", "del", "dev", p.ReceiverDev, "clsact")
			return err
		},
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, retrans := f.devDrops(p.ReceiverDev), netRetrans(f)
			return fmt.Sprintf("%d skb_drop on %s (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, p.ReceiverDev, f.dropLocation(p.ReceiverDev), c.devDrops(p.ReceiverDev), retrans, netRetrans(c), change(c, f)),
				drops > 0 && retrans > 10*(netRetrans(c)+1)
		},
	},
}

// progNoise are the healthy controls of progVariants.
var progNoise = []*Scenario{
	{
		Name:      "noise-tc-bpf-pass",
		Mechanism: "a tc BPF classifier on the receiver's veth ingress that passes every packet: a program on the path is no fault",
		Fault:     "a tc BPF program (clsact ingress, direct action) on the receiver's veth returns TC_ACT_OK for every packet",
		Families:  []string{"tcp_conn", "skb_drop"},
		Load:      bulk,
		Inject:    func(p *Pair) error { return attachTCDrop(p.Receiver, p.ReceiverDev, 0) },
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			out, err := p.Receiver.Run("tc", "filter", "show", "dev", p.ReceiverDev, "ingress")
			attached := err == nil && strings.Contains(out, "lab_tc_drop")
			return fmt.Sprintf("tc BPF program on %s ingress: %v; %d skb_drop there", p.ReceiverDev, attached, f.devDrops(p.ReceiverDev)), attached
		}),
	},
	{
		Name: "noise-xdp-pass-veth",
		Mechanism: "an XDP program on the path that passes every frame, on the sender's veth, where only the ACKs arrive: " +
			"its peer, the receiver's veth, loses its TSO but sends only ACKs",
		Fault:    "an XDP program attached (native mode) to the sender's veth returns XDP_PASS for every frame",
		Families: []string{"tcp_conn", "skb_drop"},
		Load:     bulk,
		Inject:   func(p *Pair) error { return attachXDPDrop(p.Sender, p.SenderDev, 0, unix.XDP_FLAGS_DRV_MODE) },
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			out, err := p.Sender.Run("ip", "link", "show", "dev", p.SenderDev)
			attached := err == nil && strings.Contains(out, "prog/xdp")
			return fmt.Sprintf("XDP program attached to %s: %v; %d skb_drop there", p.SenderDev, attached, f.devDrops(p.SenderDev)), attached
		}),
	},
}

// attachXDPDrop attaches the lab's XDP program (bpf/lab/xdp_drop.bpf.c) to
// a device in the mode the flags ask (XDP_FLAGS_DRV_MODE: native,
// XDP_FLAGS_SKB_MODE: generic), dropping one TCP frame in oneIn at
// random (0: none). It is attached through netlink, not a BPF link, as ip
// link set dev DEV xdp obj does: ip link set dev DEV xdp off, the doctor's
// remedy, then detaches it; a BPF link would refuse that. The device holds
// the program until it is detached or its namespace goes.
func attachXDPDrop(ns *host.Netns, dev string, oneIn uint32, mode int) error {
	spec, err := LoadXDPDrop()
	if err != nil {
		return fmt.Errorf("reading the XDP drop program: %w", err)
	}
	if err := spec.Variables["drop_one_in"].Set(oneIn); err != nil {
		return fmt.Errorf("setting the XDP drop program's rate: %w", err)
	}
	var objs XDPDropObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("loading the XDP drop program: %w", err)
	}
	defer objs.Close()
	return ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("finding %s: %w", dev, err)
		}
		if err := netlink.LinkSetXdpFdWithFlags(l, objs.LabXdpDrop.FD(), mode); err != nil {
			return fmt.Errorf("attaching XDP to %s: %w", dev, err)
		}
		return nil
	})
}

// attachTCDrop attaches the lab's tc BPF classifier (bpf/lab/tc_drop.bpf.c)
// to a device's ingress under a clsact qdisc, in direct-action mode,
// dropping one IPv4 packet in oneIn at random (0: none). It is attached
// through netlink as tc filter add dev DEV ingress bpf da obj does, so tc
// filter del, the doctor's remedy, detaches it. The filter holds the
// program until it is deleted or its namespace goes.
func attachTCDrop(ns *host.Netns, dev string, oneIn uint32) error {
	spec, err := LoadTCDrop()
	if err != nil {
		return fmt.Errorf("reading the tc drop program: %w", err)
	}
	if err := spec.Variables["drop_one_in"].Set(oneIn); err != nil {
		return fmt.Errorf("setting the tc drop program's rate: %w", err)
	}
	var objs TCDropObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("loading the tc drop program: %w", err)
	}
	defer objs.Close()
	return ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("finding %s: %w", dev, err)
		}
		clsact := &netlink.GenericQdisc{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
			Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}, QdiscType: "clsact"}
		if err := netlink.QdiscAdd(clsact); err != nil {
			return fmt.Errorf("adding clsact to %s: %w", dev, err)
		}
		filter := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index,
			Parent: netlink.HANDLE_MIN_INGRESS, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 1},
			Fd: objs.LabTcDrop.FD(), Name: "lab_tc_drop", DirectAction: true}
		if err := netlink.FilterAdd(filter); err != nil {
			return fmt.Errorf("attaching the tc program to %s ingress: %w", dev, err)
		}
		return nil
	})
}
