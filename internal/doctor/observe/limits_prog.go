package observe

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// Limit kinds this file reads (docs/findings.md#limits).
const (
	KindXDPProgram = "xdp_program"
	KindTCProgram  = "tc_bpf_program"
	KindRPSCPUs    = "rps_cpus"
	KindIRQCPUs    = "irq_affinity"
)

// deviceLimits reads, in every watched namespace, what sits on its devices'
// path: XDP programs and tc BPF classifiers (netlink, with the program's
// name from the kernel), and where their receive work is steered: RPS masks
// (the namespace's sysfs) and the IRQ affinity of their interrupts.
func deviceLimits(spaces []*watched, cpus int, notes *[]string) []finding.Limit {
	var out []finding.Limit
	for _, w := range spaces {
		if w.gone {
			continue
		}
		var progs []finding.Limit
		var devs []host.Device
		err := w.do(func() (err error) {
			progs, err = programsOnDevices(w.name)
			if err == nil {
				devs, err = host.ReadDevices()
			}
			return err
		})
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: reading the programs attached to its devices: %v", w.name, err))
			continue
		}
		out = append(out, progs...)
		masks, err := readRPSMasks(w)
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: reading its devices' RPS masks: %v", w.name, err))
		}
		out = append(out, rpsLimits(w.name, masks, cpus)...)
		out = append(out, irqLimits(w.name, devs, cpus)...)
	}
	return out
}

// programsOnDevices lists the XDP programs and tc BPF filters attached to
// the devices of the calling thread's namespace.
func programsOnDevices(netns string) ([]finding.Limit, error) {
	h, links, err := host.LinksHere()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	var out []finding.Limit
	for _, l := range links {
		a := l.Attrs()
		if x := a.Xdp; x != nil && x.Attached && x.ProgId != 0 {
			lim := xdpLimit(netns, a.Name, x.ProgId, x.AttachMode)
			xdpByLink(&lim, a.Index, x.ProgId)
			out = append(out, lim)
		}
		for _, dir := range []struct {
			name   string
			parent uint32
		}{{"ingress", netlink.HANDLE_MIN_INGRESS}, {"egress", netlink.HANDLE_MIN_EGRESS}} {
			filters, err := h.FilterList(l, dir.parent)
			if err != nil {
				continue // no clsact on the device
			}
			for _, f := range filters {
				if b, ok := f.(*netlink.BpfFilter); ok && b.Id > 0 {
					out = append(out, tcLimit(netns, a.Name, dir.name, b))
				}
			}
		}
	}
	return out, nil
}

// XDP attach modes (IFLA_XDP_ATTACHED), with the ip link keyword that
// detaches each: "xdp off" alone would not detach a generic one.
var xdpModes = map[uint32]struct{ name, keyword string }{
	xdpAttachedDrv:   {"native", "xdpdrv"},
	xdpAttachedSkb:   {"generic", "xdpgeneric"},
	xdpAttachedHw:    {"offloaded", "xdpoffload"},
	xdpAttachedMulti: {"several modes", "xdp"},
}

// IFLA_XDP_ATTACHED's values (linux/if_link.h).
const (
	xdpAttachedDrv   = 1
	xdpAttachedSkb   = 2
	xdpAttachedHw    = 3
	xdpAttachedMulti = 4
)

func xdpLimit(netns, dev string, id, mode uint32) finding.Limit {
	m, ok := xdpModes[mode]
	if !ok {
		m = xdpModes[xdpAttachedDrv]
	}
	name, tag, stats := programInfo(id)
	value := fmt.Sprintf("prog %d %s (%s)", id, name, m.name)
	return finding.Limit{Kind: KindXDPProgram, Value: value + tag + stats,
		Where:   finding.Place{Layer: finding.LayerProgram, Netns: netns, Object: fmt.Sprintf("dev %s xdp %s", dev, value)},
		Applies: finding.Scope{Devices: []string{dev}},
		Undo:    []finding.Action{finding.Command(commandNetns(netns), "ip", "link", "set", "dev", dev, m.keyword, "off")},
		Source:  "netlink (IFLA_XDP), bpf program info"}
}

func tcLimit(netns, dev, dir string, b *netlink.BpfFilter) finding.Limit {
	name, tag, stats := programInfo(uint32(b.Id))
	pref := strconv.Itoa(int(b.Attrs().Priority))
	value := fmt.Sprintf("prog %d %s (tc %s, pref %s)", b.Id, name, dir, pref)
	return finding.Limit{Kind: KindTCProgram, Value: value + tag + stats,
		Where:   finding.Place{Layer: finding.LayerProgram, Netns: netns, Object: fmt.Sprintf("dev %s tc %s bpf %s", dev, dir, value)},
		Applies: finding.Scope{Devices: []string{dev}},
		Undo:    []finding.Action{finding.Command(commandNetns(netns), "tc", "filter", "del", "dev", dev, dir, "pref", pref)},
		Source:  "netlink (tc filter, bpf), bpf program info"}
}

// programInfo names a program by its id, with its tag and its run count
// and time where the kernel keeps them (kernel.bpf_stats_enabled).
func programInfo(id uint32) (name, tag, stats string) {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return "?", "", ""
	}
	defer p.Close()
	if info, err := p.Info(); err == nil {
		name = info.Name
		if info.Tag != "" {
			tag = ", tag " + info.Tag
		}
	}
	if s, err := p.Stats(); err == nil && s.RunCount > 0 {
		stats = fmt.Sprintf(", ran %d times, %.0f ns each", s.RunCount, float64(s.Runtime.Nanoseconds())/float64(s.RunCount))
	}
	if name == "" {
		name = "?"
	}
	return name, tag, stats
}

// commandNetns is the namespace as a command takes it: none for the
// observer's own.
func commandNetns(netns string) string {
	if netns == host.SelfNetnsName {
		return ""
	}
	return netns
}

// rpsMask is one receive queue's RPS mask.
type rpsMask struct {
	dev, queue string
	cpus       []int
}

// readRPSMasks reads the RPS masks of a namespace's receive queues. sysfs
// shows the devices of the namespace that mounted it, so another
// namespace's are read by a process started in it with its own /sys
// (host.Netns.Start mounts one), as ip netns exec does.
func readRPSMasks(w *watched) ([]rpsMask, error) {
	const glob = "/sys/class/net/*/queues/rx-*/rps_cpus"
	var text []byte
	if w.ns == nil {
		paths, _ := filepath.Glob(glob)
		var b bytes.Buffer
		for _, p := range paths {
			if v, err := os.ReadFile(p); err == nil {
				fmt.Fprintf(&b, "%s:%s", p, v)
			}
		}
		text = b.Bytes()
	} else {
		out, err := w.ns.Output(exec.Command("sh", "-c", "grep -sH . "+glob+"; true"))
		if err != nil {
			return nil, err
		}
		text = out
	}
	return parseRPSMasks(text), nil
}

// parseRPSMasks parses "PATH:MASK" lines of rps_cpus files.
func parseRPSMasks(text []byte) []rpsMask {
	var out []rpsMask
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		path, mask, ok := strings.Cut(sc.Text(), ":")
		parts := strings.Split(path, "/")
		if !ok || len(parts) < 7 {
			continue
		}
		cpus, err := host.ParseCPUMask(strings.TrimSpace(mask))
		if err != nil || len(cpus) == 0 {
			continue // RPS off: the queue's work stays where it arrives
		}
		out = append(out, rpsMask{dev: parts[4], queue: parts[6], cpus: cpus})
	}
	return out
}

// rpsLimits are the masks that steer receive work to some CPUs only.
func rpsLimits(netns string, masks []rpsMask, cpus int) []finding.Limit {
	var out []finding.Limit
	for _, m := range masks {
		if cpus > 0 && len(m.cpus) >= cpus {
			continue // every CPU: steering restricts nothing
		}
		out = append(out, finding.Limit{Kind: KindRPSCPUs,
			Value:   fmt.Sprintf("CPU %s (mask %s)", host.FormatCPUList(m.cpus), host.FormatCPUMask(m.cpus)),
			Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: fmt.Sprintf("dev %s %s rps_cpus", m.dev, m.queue)},
			Applies: finding.Scope{Devices: []string{m.dev}, CPUs: m.cpus},
			Source:  fmt.Sprintf("sysfs /sys/class/net/%s/queues/%s/rps_cpus", m.dev, m.queue)})
	}
	return out
}

// irqLimits are the affinities of a NIC's interrupts that hold them to some
// CPUs only (/proc/irq/N/smp_affinity_list; interrupts are the host's, not
// a namespace's).
func irqLimits(netns string, devs []host.Device, cpus int) []finding.Limit {
	var out []finding.Limit
	for _, d := range devs {
		for _, irq := range d.IRQs {
			b, err := os.ReadFile(fmt.Sprintf("/proc/irq/%d/smp_affinity_list", irq))
			if err != nil {
				continue
			}
			list, err := host.ParseCPUList(strings.TrimSpace(string(b)))
			if err != nil || len(list) == 0 || cpus > 0 && len(list) >= cpus {
				continue
			}
			slices.Sort(list)
			out = append(out, finding.Limit{Kind: KindIRQCPUs,
				Value:   "CPU " + host.FormatCPUList(list),
				Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: fmt.Sprintf("dev %s irq %d", d.Name, irq)},
				Applies: finding.Scope{Devices: []string{d.Name}, CPUs: list},
				Source:  fmt.Sprintf("/proc/irq/%d/smp_affinity_list", irq)})
		}
	}
	return out
}
