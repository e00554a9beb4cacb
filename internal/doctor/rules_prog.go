package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// Limit kinds of the programs and steering masks on a device's path, as the
// observer reads them (observe/limits_prog.go).
const (
	kindXDP = "xdp_program"
	kindTC  = "tc_bpf_program"
	kindRPS = "rps_cpus"
	kindIRQ = "irq_affinity"
)

// xdpOn is the XDP program attached to a device, nil for none.
func (e *Evidence) xdpOn(netns, dev string) *finding.Limit {
	for i := range e.Limits {
		l := &e.Limits[i]
		if l.Kind == kindXDP && l.Where.Netns == netns && slices.Contains(l.Applies.Devices, dev) {
			return l
		}
	}
	return nil
}

// progLabel is a program limit as titles name it: "prog 42 NAME (native)".
func progLabel(l *finding.Limit) string {
	if _, after, ok := strings.Cut(l.Where.Object, " xdp "); ok {
		return after
	}
	return l.Value
}

// nativeXDP says whether an XDP program runs in the driver: on a veth that
// is what makes its peer hand it linear, single-segment frames.
func nativeXDP(l *finding.Limit) bool {
	return l != nil && strings.Contains(l.Where.Object, "(native)")
}

// peerXDP is the native XDP program on a veth's peer: the kernel turns the
// veth's TSO (and every software GSO type) off [fixed] while its peer has
// one, since the program must see whole frames (veth_fix_features).
func (e *Evidence) peerXDP(ns *Namespace, d *Device) (*Device, *finding.Limit) {
	if d.Kind != "veth" {
		return nil, nil
	}
	pns, p := e.vethPeer(ns, d)
	if p == nil {
		return nil, nil
	}
	if l := e.xdpOn(pns.Name, p.Name); nativeXDP(l) {
		return p, l
	}
	return nil, nil
}

// withPrograms wraps the offload and loss rules: where a program on the
// device's path is what turned the offload off or dropped the packets, the
// finding names it as its limit and its remedy detaches it.
func withPrograms(rule func(*Evidence) []finding.Finding) func(*Evidence) []finding.Finding {
	return func(ev *Evidence) []finding.Finding {
		fs := rule(ev)
		for i := range fs {
			switch fs[i].ID {
			case "offload-disabled":
				offloadByProgram(ev, &fs[i])
			case "packet-loss":
				lossByProgram(ev, &fs[i])
			}
		}
		return fs
	}
}

// findingDevice is the device an offload finding's scope names.
func findingDevice(ev *Evidence, scope string) (*Namespace, *Device) {
	rest, ok := strings.CutPrefix(scope, "device ")
	if !ok {
		return nil, nil
	}
	dev, nsPart, ok := strings.Cut(rest, " (netns ")
	if !ok {
		return nil, nil
	}
	ns := ev.NamespaceNamed(strings.TrimSuffix(nsPart, ")"))
	if ns == nil {
		return nil, nil
	}
	d := ev.DeviceNamed(ns.Name, dev)
	if d == nil {
		return nil, nil
	}
	return ns, d
}

func offloadByProgram(ev *Evidence, f *finding.Finding) {
	ns, d := findingDevice(ev, f.Scope)
	if d == nil {
		return
	}
	switch {
	case !d.Features[featTSO] && slices.Contains(d.Fixed, featTSO):
		// A veth that cannot segment because its peer runs XDP.
		p, l := ev.peerXDP(ns, d)
		if l == nil {
			return
		}
		lim := *l
		f.Title = fmt.Sprintf("%s cannot segment: the XDP program %s on its peer %s holds its TSO off", d.Name, progLabel(&lim), p.Name)
		f.Evidence = append(f.Evidence, lim.Describe(),
			fmt.Sprintf("a veth whose peer runs a native XDP program hands it single frames: the kernel turns %s's segmentation off [fixed] while the program is attached", d.Name))
		f.Explanation += fmt.Sprintf(" Here nothing about %s's driver refuses segmentation: the XDP program on %s does, for as long as it is attached.", d.Name, p.Name)
		f.Remedy = lim.Remedy()
		f.Confirm = []string{nsPrefix(ns.Name) + fmt.Sprintf("ethtool -k %s | grep tcp-segmentation (off [fixed] while the program is attached)", d.Name),
			"detach it for one run and compare: " + f.Remedy[0]}
		f.Limit = &lim
	case strings.HasPrefix(f.Title, "GRO is off"):
		// A veth with a native XDP program receives single frames (its
		// peer cannot segment): GRO off then leaves each to the stack.
		l := ev.xdpOn(ns.Name, d.Name)
		if d.Kind != "veth" || !nativeXDP(l) {
			return
		}
		lim := *l
		f.Title = fmt.Sprintf("%s receives single segments: its XDP program %s holds its peer's TSO off, and GRO is off", d.Name, progLabel(&lim))
		f.Evidence = append(f.Evidence, lim.Describe(),
			fmt.Sprintf("a native XDP program on a veth must see whole frames: its peer may not segment, so %s receives one skb per segment", d.Name))
		f.Explanation += fmt.Sprintf(" Without the program %s's peer would hand it whole 64 KB skbs, GRO or not.", d.Name)
		// Detaching the program is what restores the large skbs; GRO
		// merges after the program where it must stay.
		f.Remedy = append(lim.Remedy(), f.Remedy...)
		f.Limit = &lim
	}
}

// xdpDropSite says whether a drop's location is in an XDP path: the
// program's verdict (veth_xdp_rcv*, xdp_do_*, a program's own code, generic
// XDP), or, on a veth whose program made it queue frames in a ring for its
// NAPI, that ring overflowing (veth_xmit) or the verdict where 5.10 inlines
// veth_xdp_rcv_skb into veth_poll.
func xdpDropSite(location string, native bool) bool {
	for _, p := range []string{"veth_xdp_rcv", "xdp_do_", "bpf_prog_", "do_xdp_generic", "netif_receive_generic_xdp", "bpf_xdp_", "xdp_"} {
		if strings.HasPrefix(location, p) {
			return true
		}
	}
	return native && (strings.HasPrefix(location, "veth_xmit") || strings.HasPrefix(location, "veth_poll"))
}

func lossByProgram(ev *Evidence, f *finding.Finding) {
	var lim *finding.Limit
	var dev, site string
	var dropped uint64
	for _, d := range ev.Drops {
		if benign(&d) || !ev.suffered(&d) || d.Dev == "" {
			continue
		}
		netns := ev.deviceNetns(d.Dev)
		l := ev.xdpOn(netns, d.Dev)
		if l == nil || !xdpDropSite(d.Location, nativeXDP(l)) {
			continue
		}
		if lim == nil || d.Dev == dev {
			lim, dev, site = l, d.Dev, d.Location
			dropped += d.Count
		}
	}
	// A native program's XDP_DROP on a NIC frees no skb: the driver's
	// counters alone see it.
	var counted []string
	var byCounter uint64
	for ns, d := range ev.devices {
		l := ev.xdpOn(ns.Name, d.Name)
		if l == nil || lim != nil && d.Name != dev {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(d.ErrorStats)) {
			if v := d.ErrorStats[k]; v > 0 && strings.Contains(k, "xdp") && strings.Contains(k, "drop") {
				counted = append(counted, fmt.Sprintf("%s: ethtool -S %s moved by %d", d.Name, k, v))
				byCounter += v
			}
		}
		if lim == nil && byCounter > 0 {
			lim, dev = l, d.Name
		}
	}
	if lim == nil {
		lim, dev, site, dropped = tcDropper(ev)
	}
	if lim == nil || dropped < minLocatedDrops && byCounter < minLocatedDrops {
		return
	}
	l := *lim
	switch {
	case l.Kind == kindTC:
		f.Title = fmt.Sprintf("packets are dropped by the tc BPF program %s on %s (%s)", progLabel(&l), dev, site)
	case dropped >= minLocatedDrops:
		f.Title = fmt.Sprintf("packets are dropped in the XDP path of %s (%s), where the program %s runs", dev, site, progLabel(&l))
	default:
		f.Title = fmt.Sprintf("packets are dropped by the XDP program %s on %s: no skb sees them, its driver's counters do", progLabel(&l), dev)
	}
	f.Evidence = append(f.Evidence, l.Describe())
	f.Evidence = append(f.Evidence, counted...)
	if l.Kind == kindTC {
		f.Explanation += " The packets die in a tc program's verdict (TC_ACT_SHOT): the program on the path is the loss's cause, not the network."
	} else {
		f.Explanation += " The packets die where an XDP program decides their fate (XDP_DROP, or a frame the program's receive ring had no room for): " +
			"the program on the path is the loss's cause, not the network."
	}
	f.Remedy = append(l.Remedy(), "or fix the program's verdicts: bpftool prog dump xlated id "+programID(&l))
	f.Limit = &l
	// A program on a veth also takes its peer's TSO and the device's GRO:
	// without it the stream runs at what it carries here, not at what the
	// CPU allows at its cost with the program (54 % estimated so, 94 %
	// gained).
	if d := ev.DeviceNamed(ev.deviceNetns(dev), dev); virtualDevice(d) {
		var tx float64
		for _, s := range ev.senders() {
			tx += s.SendBps()
		}
		if g, how, ok := liftedGain(ev, tx); ok && g > f.Impact {
			f.Impact, f.ImpactText = min(g, maxShaperImpact), "what the flows would gain without the program: "+how+")"
		}
	}
}

// tcDropper is the tc BPF program that dropped the flows' packets: a drop
// of the tc hook's reason (TC_INGRESS, TC_EGRESS: 6.0 on) on a device
// with a program in that direction, or, before reasons (NO_REASON, the
// recorder's word for 5.10's kfree_skb), a drop without one where the hook
// runs (__netif_receive_skb_core for ingress, where
// 5.10 inlines it; __dev_queue_xmit or sch_handle_egress for egress).
func tcDropper(ev *Evidence) (lim *finding.Limit, dev, site string, dropped uint64) {
	for _, d := range ev.Drops {
		if benign(&d) || !ev.suffered(&d) || d.Dev == "" {
			continue
		}
		dir := tcHookOf(&d)
		if dir == "" {
			continue
		}
		l := ev.tcProgramOn(ev.deviceNetns(d.Dev), d.Dev, dir)
		if l == nil {
			continue
		}
		if lim == nil || d.Dev == dev {
			lim, dev, site = l, d.Dev, d.Reason+" at "+d.Location
			dropped += d.Count
		}
	}
	return lim, dev, site, dropped
}

// tcHookOf is the tc hook ("ingress", "egress") a drop happened in, "" for
// none.
func tcHookOf(d *Drop) string {
	switch {
	case d.Reason == "TC_INGRESS":
		return "ingress"
	case d.Reason == "TC_EGRESS":
		return "egress"
	case d.Reason != "NOT_SPECIFIED" && d.Reason != "NO_REASON" && d.Reason != "":
		return ""
	case strings.HasPrefix(d.Location, "__netif_receive_skb_core") || strings.HasPrefix(d.Location, "sch_handle_ingress"):
		return "ingress"
	case strings.HasPrefix(d.Location, "__dev_queue_xmit") || strings.HasPrefix(d.Location, "sch_handle_egress"):
		return "egress"
	}
	return ""
}

// tcProgramOn is a copy of the tc BPF program limit on a device's hook.
func (e *Evidence) tcProgramOn(netns, dev, dir string) *finding.Limit {
	for i := range e.Limits {
		l := e.Limits[i]
		if l.Kind == kindTC && l.Where.Netns == netns && len(l.Applies.Devices) > 0 && l.Applies.Devices[0] == dev &&
			strings.HasPrefix(l.Where.Object, fmt.Sprintf("dev %s tc %s ", dev, dir)) {
			return &l
		}
	}
	return nil
}

// programID is a program limit's id ("prog 42 NAME ...").
func programID(l *finding.Limit) string {
	var id int
	fmt.Sscanf(l.Value, "prog %d", &id)
	return fmt.Sprint(id)
}

// steering is the RPS mask or interrupt affinity that steers a receiving
// device's work onto a saturated CPU while other CPUs have time to spare,
// with the change that moves it there (the mask of the CPUs measured below
// SpareBusy); nil when nothing steers there.
func steering(ev *Evidence, c *CPUUse) *finding.Limit {
	// The mask is the cause only where the work it steers is what fills
	// the CPU: a receiver's own application at 68 % user time on its CPU,
	// the lab's cpu-receiver-app-work, lost 60 % more when its receive
	// work was steered onto the sender's CPU as a mask remedy would.
	if c.Softirq < c.User {
		return nil
	}
	var spare []int
	var shares []string
	for _, o := range ev.CPUs {
		shares = append(shares, fmt.Sprintf("CPU %d %s busy", o.CPU, pct(o.Busy())))
		if o.CPU != c.CPU && o.Busy() < SpareBusy {
			spare = append(spare, o.CPU)
		}
	}
	if len(spare) == 0 {
		return nil
	}
	busy := map[int]bool{}
	for _, o := range ev.CPUs {
		busy[o.CPU] = o.Busy() >= cpuBusy
	}
	for i := range ev.Limits {
		l := ev.Limits[i]
		if l.Kind != kindRPS && l.Kind != kindIRQ || !slices.Contains(l.Applies.CPUs, c.CPU) || len(l.Applies.Devices) == 0 {
			continue
		}
		// Every CPU of the mask saturated: the mask, not the load, put the work there.
		if slices.ContainsFunc(l.Applies.CPUs, func(n int) bool { return !busy[n] }) {
			continue
		}
		dev := l.Applies.Devices[0]
		if _, rx := ev.bulkThrough(l.Where.Netns, dev); rx == 0 {
			continue
		}
		netns := l.Where.Netns
		if netns == "host" {
			netns = ""
		}
		switch l.Kind {
		case kindRPS:
			queue := strings.Fields(l.Where.Object)[2]
			mask := host.FormatCPUMask(spare)
			l.Undo = []finding.Action{finding.Command(netns, "sh", "-c",
				fmt.Sprintf("echo %s > /sys/class/net/%s/queues/%s/rps_cpus", mask, dev, queue))}
			l.Arithmetic = fmt.Sprintf("%s; the CPUs below %s busy: %s, mask %s", strings.Join(shares, ", "),
				pct(SpareBusy), host.FormatCPUList(spare), mask)
		case kindIRQ:
			var irq string
			fmt.Sscanf(l.Where.Object, "dev %s irq %s", new(string), &irq)
			list := host.FormatCPUList(spare)
			l.Undo = []finding.Action{finding.Command("", "sh", "-c", fmt.Sprintf("echo %s > /proc/irq/%s/smp_affinity_list", list, irq))}
			l.Arithmetic = fmt.Sprintf("%s; the CPUs below %s busy: %s", strings.Join(shares, ", "), pct(SpareBusy), list)
		}
		return &l
	}
	return nil
}

// The offload and loss rules name the program on the path where it is the
// cause; wrapped here rather than in Rules so that the rules stay as their
// own files write them.
func init() {
	for i := range Rules {
		if id := Rules[i].ID; id == "offload-disabled" || id == "packet-loss" {
			Rules[i].Check = withPrograms(Rules[i].Check)
		}
	}
}
