package observe

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// Limit kinds of the devices' own settings and of the nftables rules that
// rewrite or drop what a flow needs (docs/findings.md#device-limits).
const (
	KindSegmentationOff = "device_segmentation_off"
	KindGROOff          = "device_gro_off"
	KindMTU             = "device_mtu"
	KindNftRewrite      = "nft_header_rewrite"
	KindNftICMPDrop     = "nft_icmp_drop"
)

// Offload features by the kernel's names (ethtool -k's long names).
const (
	featTSO    = "tx-tcp-segmentation"
	featGSO    = "tx-generic-segmentation"
	featGRO    = "rx-gro"
	featSG     = "tx-scatter-gather"
	featTxCsum = "tx-checksum-ip-generic"
)

const ethtoolSource = "ethtool -k (ETHTOOL_GFEATURES), ethtool -i"

// devLimits derives the device-side limits from the devices the
// evidence holds (their features were read by ethtool in their namespace),
// and reads each watched namespace's nftables rules that rewrite the
// headers GRO compares or drop the ICMP path-MTU discovery needs.
func devLimits(spaces []*watched, ev *doctor.Evidence, notes *[]string) []finding.Limit {
	var out []finding.Limit
	for i := range ev.Namespaces {
		ns := &ev.Namespaces[i]
		for j := range ns.Devices {
			d := &ns.Devices[j]
			if d.Name == "lo" || d.Features == nil {
				continue
			}
			if l, ok := segmentationLimit(ns.Name, d); ok {
				out = append(out, l)
			}
			if l, ok := groLimit(ns.Name, d); ok {
				out = append(out, l)
			}
			if l, ok := mtuLimit(ev, ns, d); ok {
				out = append(out, l)
			}
		}
	}
	next, via := neighbours(spaces, ev)
	defer func() {
		for _, w := range next {
			w.ns.Close()
		}
	}()
	for _, w := range append(slices.Clone(spaces), next...) {
		if w.gone {
			continue
		}
		text, err := nftRuleset(w)
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: its nftables rules were not read: %v", w.name, err))
			continue
		}
		got := nftLimits(w.name, text)
		for i := range got {
			if v := via[w.name]; v != "" {
				got[i].Source += ", in the namespace at the other end of " + v
			}
		}
		out = append(out, got...)
	}
	return out
}

// neighbours are the named namespaces at the other end of the observed
// namespaces' veths that are not observed themselves: a router between
// the ends, whose rules the flows pass. Each is found by the id the
// observed namespace gives it (the veth's link netnsid); via names the
// veth. Their handles are the caller's to close.
func neighbours(spaces []*watched, ev *doctor.Evidence) (out []*watched, via map[string]string) {
	via = map[string]string{}
	watchedName := map[string]bool{}
	for _, w := range spaces {
		watchedName[w.name] = true
	}
	for _, w := range spaces {
		ns := ev.NamespaceNamed(w.name)
		if ns == nil || w.gone {
			continue
		}
		want := map[int]string{}
		for _, d := range ns.Devices {
			if d.Kind == "veth" && d.PeerNetnsID >= 0 && !slices.Contains(slices.Collect(maps.Values(ns.NetnsIDs)), d.PeerNetnsID) {
				want[d.PeerNetnsID] = fmt.Sprintf("%s (netns %s)", d.Name, ns.Name)
			}
		}
		if len(want) == 0 {
			continue
		}
		for _, name := range host.NamedNetns() {
			if watchedName[name] || via[name] != "" {
				continue
			}
			other, err := host.OpenNetns(name)
			if err != nil {
				continue
			}
			id := -1
			_ = w.do(func() error {
				id, _ = netlink.GetNetNsIdByFd(int(other.Handle()))
				return nil
			})
			if dev, ok := want[id]; ok && id >= 0 {
				via[name] = dev
				out = append(out, &watched{name: name, ns: other})
				continue
			}
			other.Close()
		}
	}
	return out, via
}

// featureState is a feature as ethtool -k prints it: "off [fixed]", "off
// [requested on]" (held off by a feature it needs), "off" or "on".
func featureState(d *doctor.Device, name string) string {
	switch {
	case d.Features[name]:
		return "on"
	case slices.Contains(d.Fixed, name):
		return "off [fixed]"
	case slices.Contains(d.Held, name):
		return "off [requested on]"
	}
	return "off"
}

// segmentationLimit is TSO and GSO off on a device, with the ethtool
// switches that turn them on: the features they need first (GSO needs
// scatter-gather, which needs transmit checksumming), none the device
// refuses ([fixed]). A device that refuses both, or refuses what GSO needs,
// is a limit no ethtool lifts: its undo says what can.
func segmentationLimit(netns string, d *doctor.Device) (finding.Limit, bool) {
	fixed := func(n string) bool { return slices.Contains(d.Fixed, n) }
	// TSO on segments whatever GSO says; with TSO refused and GSO on,
	// the stack keeps its 64 KB skbs and nothing is left to switch.
	if _, known := d.Features[featTSO]; !known || d.Features[featTSO] || fixed(featTSO) && d.Features[featGSO] {
		return finding.Limit{}, false
	}
	var states []string
	for _, n := range []string{featTSO, featGSO, featSG, featTxCsum} {
		if _, known := d.Features[n]; known {
			states = append(states, n+" "+featureState(d, n))
		}
	}
	l := finding.Limit{Kind: KindSegmentationOff, Value: strings.Join(states, ", "),
		Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: deviceObject(d)},
		Applies: finding.Scope{Devices: []string{d.Name}}, Source: ethtoolSource}
	argv := []string{"ethtool", "-K", d.Name}
	switch {
	case fixed(featSG) || fixed(featTxCsum):
		// Without scatter-gather neither TSO nor GSO can be held on.
		l.Undo = refusedUndo(d, featSG)
		return l, true
	case fixed(featTSO) && fixed(featGSO):
		l.Undo = refusedUndo(d, featTSO)
		return l, true
	}
	for _, f := range []struct{ name, sw string }{{featTxCsum, "tx"}, {featSG, "sg"}} {
		if on, known := d.Features[f.name]; known && !on {
			argv = append(argv, f.sw, "on")
		}
	}
	if !fixed(featTSO) {
		argv = append(argv, "tso", "on")
	}
	argv = append(argv, "gso", "on")
	l.Undo = []finding.Action{finding.Command(commandNetns(netns), argv...)}
	if fixed(featTSO) {
		// GSO where scatter-gather allows it: the stack keeps its 64 KB
		// skbs and segments them just before the driver.
		l.Undo = append(l.Undo, refusedUndo(d, featTSO)...)
	}
	return l, true
}

// refusedUndo says what can lift a segmentation feature the device
// refuses: not ethtool, but the device or its backend.
func refusedUndo(d *doctor.Device, feature string) []finding.Action {
	what := map[string]string{featSG: "scatter-gather (and with it TSO and GSO)", featTSO: "TSO"}[feature]
	if d.Driver == "virtio_net" {
		return []finding.Action{finding.Change("%s refuses %s: the host gives this virtio NIC no such offload; enable it on the hypervisor's side "+
			"(a tap or vhost-net backend with vnet headers, e.g. QEMU -netdev tap,vnet_hdr=on; csum and gso on the device), then ethtool -K %s tso on gso on", d.Name, what, d.Name),
			finding.Change("until then every packet costs a trip through the stack: a larger MTU on the whole path cuts their number")}
	}
	driver := d.Driver
	if driver == "" {
		driver = d.Kind
	}
	return []finding.Action{finding.Change("%s's driver (%s) refuses %s ([fixed] in ethtool -k): ethtool cannot turn it on; a device that offers it, "+
		"or a larger MTU on the whole path to cut the packets per byte", d.Name, driver, what)}
}

// groLimit is GRO off on a device that could merge: ethtool -K gro on.
func groLimit(netns string, d *doctor.Device) (finding.Limit, bool) {
	if _, known := d.Features[featGRO]; !known || d.Features[featGRO] {
		return finding.Limit{}, false
	}
	l := finding.Limit{Kind: KindGROOff, Value: featGRO + " " + featureState(d, featGRO),
		Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: deviceObject(d)},
		Applies: finding.Scope{Devices: []string{d.Name}}, Source: ethtoolSource}
	if slices.Contains(d.Fixed, featGRO) {
		l.Undo = []finding.Action{finding.Change("%s's driver refuses GRO ([fixed] in ethtool -k): a device or driver that offers it", d.Name)}
	} else {
		l.Undo = []finding.Action{finding.Command(commandNetns(netns), "ethtool", "-K", d.Name, "gro", "on")}
	}
	return l, true
}

// mtuLimit is the larger MTU of a veth pair whose ends disagree: what it
// sends above its peer's MTU dies at the peer without an ICMP error. The
// undo gives it the peer's.
func mtuLimit(ev *doctor.Evidence, ns *doctor.Namespace, d *doctor.Device) (finding.Limit, bool) {
	if d.Kind != "veth" {
		return finding.Limit{}, false
	}
	pns, p := ev.VethPeer(ns, d)
	if p == nil || p.MTU >= d.MTU {
		return finding.Limit{}, false
	}
	return finding.Limit{Kind: KindMTU, Value: fmt.Sprintf("%d bytes", d.MTU),
		Where:      finding.Place{Layer: finding.LayerDevice, Netns: ns.Name, Object: deviceObject(d)},
		Applies:    finding.Scope{Devices: []string{d.Name, p.Name}},
		Undo:       []finding.Action{finding.Command(commandNetns(ns.Name), "ip", "link", "set", "dev", d.Name, "mtu", strconv.Itoa(p.MTU))},
		Arithmetic: fmt.Sprintf("its peer %s (netns %s) has MTU %d: a packet of up to %d bytes sent here dies there; one MTU on the link, the smaller", p.Name, pns.Name, p.MTU, d.MTU),
		Source:     "netlink (IFLA_MTU, IFLA_LINK and its link netnsid)"}, true
}

// deviceObject names a device with its driver, as the limit's place.
func deviceObject(d *doctor.Device) string {
	s := "dev " + d.Name
	switch {
	case d.Driver != "":
		s += " (driver " + d.Driver + ")"
	case d.Kind != "":
		s += " (" + d.Kind + ")"
	}
	return s
}

// nftRuleset is nft -a list ruleset in the watched namespace; "" where
// nft is not installed (then no rule can have been loaded by it either).
func nftRuleset(w *watched) (string, error) {
	path, err := exec.LookPath("nft")
	if err != nil {
		return "", nil
	}
	cmd := exec.Command(path, "-a", "list", "ruleset")
	var out []byte
	if w.ns == nil {
		out, err = cmd.Output()
	} else {
		out, err = w.ns.Output(cmd)
	}
	if err != nil {
		return "", fmt.Errorf("nft -a list ruleset: %w", err)
	}
	return string(out), nil
}

var (
	nftTable   = regexp.MustCompile(`^table (\S+) (\S+) \{`)
	nftChain   = regexp.MustCompile(`^chain (\S+) \{`)
	nftHook    = regexp.MustCompile(`type \S+ hook (\S+)`)
	nftHandle  = regexp.MustCompile(`\s+# handle (\d+)$`)
	nftCounter = regexp.MustCompile(`counter packets \d+ bytes \d+`)
	// A rule that writes a header field GRO requires equal or consecutive
	// between the packets it merges: IP ID, TOS (DSCP, ECN), TTL, IPv6's
	// traffic class and flow label.
	nftRewrite = regexp.MustCompile(`\b(ip (id|dscp|ecn|ttl) set|ip6 (dscp|ecn|flowlabel|hoplimit) set)\b`)
	// A rule that drops or rejects ICMP destination-unreachable (the
	// "fragmentation needed" path-MTU discovery waits for) or ICMPv6
	// packet-too-big, by type or by protocol.
	nftICMP = regexp.MustCompile(`icmp type [^#]*destination-unreachable|icmp code [^#]*frag-needed|icmpv6 type [^#]*packet-too-big|(ip protocol|meta l4proto) (icmp|ipv6-icmp|icmpv6)\b`)
	nftDrop = regexp.MustCompile(`\b(drop|reject)(\s|$)`)
)

// nftLimits finds in nft -a list ruleset's text the rules that rewrite
// headers GRO compares and those that drop path-MTU discovery's ICMP, each
// with the command that deletes it by its handle.
func nftLimits(netns, text string) []finding.Limit {
	var out []finding.Limit
	var family, table, chain, hook string
	sc := bufio.NewScanner(bytes.NewReader([]byte(text)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := nftTable.FindStringSubmatch(line); m != nil {
			family, table, chain, hook = m[1], m[2], "", ""
			continue
		}
		if m := nftChain.FindStringSubmatch(line); m != nil {
			chain, hook = m[1], ""
			continue
		}
		if m := nftHook.FindStringSubmatch(line); m != nil && chain != "" {
			hook = m[1]
			continue
		}
		m := nftHandle.FindStringSubmatchIndex(line)
		if m == nil || chain == "" || strings.HasPrefix(line, "table ") || strings.HasPrefix(line, "chain ") {
			continue
		}
		// The rule as set: its counter's values change as it runs.
		rule, handle := nftCounter.ReplaceAllString(line[:m[0]], "counter"), line[m[2]:m[3]]
		var kind string
		switch {
		case nftRewrite.MatchString(rule):
			kind = KindNftRewrite
		case nftICMP.MatchString(rule) && nftDrop.MatchString(rule):
			kind = KindNftICMPDrop
		default:
			continue
		}
		where := fmt.Sprintf("table %s %s chain %s", family, table, chain)
		if hook != "" {
			where += " (hook " + hook + ")"
		}
		out = append(out, finding.Limit{Kind: kind, Value: rule,
			Where: finding.Place{Layer: finding.LayerRule, Netns: netns, Object: where + " handle " + handle},
			Undo: []finding.Action{finding.Command(commandNetns(netns), "nft", "delete", "rule", family, table, chain,
				"handle", handle)},
			Source: "nft -a list ruleset"})
	}
	return out
}

// xdpByLink turns an XDP limit whose program is attached through a
// bpf_link (libbpf, cilium/ebpf, libxdp attach so) into one that says so:
// netlink cannot detach it ("Can't replace active BPF XDP link"), bpftool
// link detach can, and the process holding the link is who set it.
// Links are not per namespace: the device's index and the program's id
// together name the one on this device.
func xdpByLink(l *finding.Limit, ifindex int, prog uint32) {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || uint32(info.Program) != prog {
			continue
		}
		if x := info.XDP(); x == nil || int(x.Ifindex) != ifindex {
			continue
		}
		id := fmt.Sprint(info.ID)
		l.Where.Object += " via bpf_link " + id
		l.Undo = []finding.Action{finding.Command("", "bpftool", "link", "detach", "id", id)}
		l.SetBy = linkHolder(uint32(info.ID))
		l.Source += ", bpf link info"
		return
	}
}

// linkHolder is the process holding a bpf_link's file descriptor
// (/proc/PID/fdinfo's link_id), nil when none does (a pinned link).
func linkHolder(id uint32) *finding.Owner {
	want := fmt.Sprintf("link_id:\t%d\n", id)
	pids, _ := filepath.Glob("/proc/[0-9]*/fdinfo")
	for _, dir := range pids {
		infos, _ := os.ReadDir(dir)
		for _, e := range infos {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil || !bytes.Contains(b, []byte(want)) {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "comm"))
			return &finding.Owner{PID: pid, Comm: strings.TrimSpace(string(comm))}
		}
	}
	return nil
}
