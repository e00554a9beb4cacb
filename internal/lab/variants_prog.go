package lab

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
)

func init() {
	Variants = append(Variants, progVariants...)
	Noise = append(Noise, progNoise...)
}

// progVariants build faults that a program or a steering mask on the path
// causes, named by the device-side provenance the doctor reads (netlink's
// XDP attachment, BPF program info, sysfs RPS masks).
var progVariants = []*Scenario{
	{
		Name: "xdp-drop-veth",
		Mechanism: "an XDP program attached (native mode, by netlink as ip link set ... xdp does) to the receiver's veth, " +
			"dropping frames: the drops happen in the program, and attaching it took the sender's veth's TSO away",
		Fault:    "an XDP program on the receiver's veth drops 1 % of the TCP frames at random (control: none)",
		Expect:   "packet-loss",
		Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:     bulk,
		Inject:   func(p *Pair) error { return attachXDPDrop(p.Receiver, p.ReceiverDev, 100) },
		// The doctor's remedy, as it prints it.
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("ip", "link", "set", "dev", p.ReceiverDev, "xdp", "off")
			return err
		},
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, retrans := f.devDrops(p.ReceiverDev), netRetrans(f)
			return fmt.Sprintf("%d skb_drop on %s (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
					drops, p.ReceiverDev, f.dropLocation(p.ReceiverDev), c.devDrops(p.ReceiverDev), retrans, netRetrans(c), change(c, f)),
				drops > 10*(c.devDrops(p.ReceiverDev)+1) && retrans > 10*(netRetrans(c)+1)
		},
	},
	{
		Name: "rps-mask-busy-cpu",
		Mechanism: "an RPS mask (sysfs rps_cpus) on the receiver's veth steering its receive processing away from the receiver's CPU " +
			"onto CPU 0, which the sender and a busy loop already keep busy",
		Fault: "rps_cpus of the receiver's veth set to 1, CPU 0, where the sender and a shell busy loop run " +
			"(control: 2, CPU 1, the receiver's; the busy loop runs in both)",
		Expect:   "cpu-saturated",
		Families: []string{"tcp_conn", "softirq"},
		Load:     bulk,
		// The busy loop runs in every run, the calibration's too: the
		// mask is the fault, not the loop.
		Prepare: func(p *Pair) error { return p.busyLoop(0) },
		Inject:  func(p *Pair) error { return p.steerReceiver("1") },
		Fix:     func(p *Pair) error { return p.steerReceiver("2") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return fmt.Sprintf("CPU 0 busy %.0f %%, CPU 1 %.0f %% (control %.0f %%, %.0f %%); throughput %s",
					f.cpuBusy(0)*100, f.cpuBusy(1)*100, c.cpuBusy(0)*100, c.cpuBusy(1)*100, change(c, f)),
				runtime.NumCPU() >= 2 && f.cpuBusy(0) >= cpuSaturated && f.cpuBusy(1) < c.cpuBusy(1)-0.1
		},
	},
}

// busyLoop keeps a CPU busy with a shell's busy loop, pinned there, until
// the pair is closed.
func (p *Pair) busyLoop(cpu int) error {
	if runtime.NumCPU() < 2 {
		return &NotBuildable{Reason: "one CPU: nothing to steer receive work away from"}
	}
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL} // nothing outlives the lab
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting a busy loop: %w", err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(cmd.Process.Pid, &set); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("pinning the busy loop to CPU %d: %w", cpu, err)
	}
	p.undo = append(p.undo, func() error {
		cmd.Process.Kill()
		cmd.Wait()
		return nil
	})
	return nil
}

// steerReceiver sets the RPS mask of the receiver's veth's queue.
func (p *Pair) steerReceiver(mask string) error {
	_, err := p.Receiver.Run("sh", "-c", fmt.Sprintf("echo %s > /sys/class/net/%s/queues/rx-0/rps_cpus", mask, p.ReceiverDev))
	return err
}

// progNoise are the healthy controls of progVariants.
var progNoise = []*Scenario{
	{
		Name: "noise-xdp-pass-veth",
		Mechanism: "an XDP program on the path that passes every frame, on the sender's veth, where only the ACKs arrive: " +
			"its peer, the receiver's veth, loses its TSO but sends only ACKs",
		Fault:    "an XDP program attached (native mode) to the sender's veth returns XDP_PASS for every frame",
		Families: []string{"tcp_conn", "skb_drop"},
		Load:     bulk,
		Inject:   func(p *Pair) error { return attachXDPDrop(p.Sender, p.SenderDev, 0) },
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			out, err := p.Sender.Run("ip", "link", "show", "dev", p.SenderDev)
			attached := err == nil && strings.Contains(out, "prog/xdp")
			return fmt.Sprintf("XDP program attached to %s: %v; %d skb_drop there", p.SenderDev, attached, f.devDrops(p.SenderDev)), attached
		}),
	},
}

// attachXDPDrop attaches the lab's XDP program (bpf/lab/xdp_drop.bpf.c) to
// a device in native mode, dropping one TCP frame in oneIn at
// random (0: none). It is attached through netlink, not a BPF link, as ip
// link set dev DEV xdp obj does: ip link set dev DEV xdp off, the doctor's
// remedy, then detaches it; a BPF link would refuse that. The device holds
// the program until it is detached or its namespace goes.
func attachXDPDrop(ns *host.Netns, dev string, oneIn uint32) error {
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
		if err := netlink.LinkSetXdpFdWithFlags(l, objs.LabXdpDrop.FD(), unix.XDP_FLAGS_DRV_MODE); err != nil {
			return fmt.Errorf("attaching XDP to %s: %w", dev, err)
		}
		return nil
	})
}
