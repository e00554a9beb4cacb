package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Limit kinds of the devices' own settings and of the nftables rules that
// rewrite or drop what a flow needs, as the observer reads them
// (observe/limits_dev.go), and the route metric the MTU rule reads
// (observe/limits_window.go).
const (
	kindSegOff      = "device_segmentation_off"
	kindGROOff      = "device_gro_off"
	kindMTU         = "device_mtu"
	kindNftRewrite  = "nft_header_rewrite"
	kindNftICMPDrop = "nft_icmp_drop"
	kindRouteAdvmss = "route_advmss"
)

// VethPeer is the other end of a veth among the observed namespaces, nil
// when it is not observed or not told apart.
func (e *Evidence) VethPeer(ns *Namespace, d *Device) (*Namespace, *Device) {
	return e.vethPeer(ns, d)
}

// deviceLimit is a copy of the limit of the kind set on a device, nil for
// none.
func (e *Evidence) deviceLimit(kind, netns, dev string) *finding.Limit {
	for i := range e.Limits {
		l := e.Limits[i]
		if l.Kind == kind && l.Where.Netns == netns && len(l.Applies.Devices) > 0 && l.Applies.Devices[0] == dev {
			return &l
		}
	}
	return nil
}

// flowLimit is a copy of the limit of the kind that applies to a flow.
func (e *Evidence) flowLimit(kind string, f *Flow) *finding.Limit {
	key := f.Local.String() + " " + f.Peer.String()
	for i := range e.Limits {
		l := e.Limits[i]
		if l.Kind == kind && l.Where.Netns == f.Netns && slices.Contains(l.Applies.Flows, key) {
			return &l
		}
	}
	return nil
}

// nameLimit makes l the finding's limit: the evidence names it with who
// set it and the arithmetic of its undo, and the remedy is rendered from
// it, followed by the alternatives the rule still offers.
func nameLimit(f *finding.Finding, l *finding.Limit, alternatives ...string) {
	f.Evidence = append(f.Evidence, l.Describe())
	if l.Arithmetic != "" {
		f.Evidence = append(f.Evidence, l.Arithmetic)
	}
	f.Remedy = append(l.Remedy(), alternatives...)
	f.Limit = l
}

// advmssLimit is the route metric that makes a receiver advertise an MSS
// whose packets exceed its own device's MTU: the sender's segments of
// that size die at the receiving end.
func (e *Evidence) advmssLimit(receiver *Flow, mtu int) *finding.Limit {
	l := e.flowLimit(kindRouteAdvmss, receiver)
	if l == nil {
		return nil
	}
	var advmss int
	if _, err := fmt.Sscanf(l.Value, "%d", &advmss); err != nil || advmss+headerBytes(receiver) <= mtu {
		return nil
	}
	l.Arithmetic = fmt.Sprintf("advmss %d + %d bytes of headers = %d-byte packets, above the receiving device's MTU %d: without the metric the receiver advertises its MTU less the headers, %d",
		advmss, headerBytes(receiver), advmss+headerBytes(receiver), mtu, mtu-headerBytes(receiver))
	return l
}

// icmpDropLimit is the nftables rule that drops the ICMP a hop's
// "fragmentation needed" needs, preferring one in the namespace that
// dropped the packets as too big (the hop that replies).
func (e *Evidence) icmpDropLimit(netns string) *finding.Limit {
	var any *finding.Limit
	for i := range e.Limits {
		l := e.Limits[i]
		if l.Kind != kindNftICMPDrop {
			continue
		}
		if l.Where.Netns == netns {
			return &l
		}
		if any == nil {
			any = &l
		}
	}
	return any
}

// groLimit is what keeps GRO on a device from merging, where the host
// holds it: a program that sees (and may rewrite) every frame before GRO
// on that device, else an nftables rule, on this host, that rewrites a
// header field GRO requires equal or consecutive between the packets it
// merges, preferring one that names the flows' port.
func (e *Evidence) groLimit(ns *Namespace, d *Device) *finding.Limit {
	if l := e.xdpOn(ns.Name, d.Name); l != nil {
		c := *l
		return &c
	}
	var ports []string
	for _, f := range e.Flows {
		if f.Netns == ns.Name && f.Dev == d.Name {
			ports = append(ports, fmt.Sprint(f.Local.Port()))
		}
	}
	var pick *finding.Limit
	for i := range e.Limits {
		l := e.Limits[i]
		if l.Kind != kindNftRewrite {
			continue
		}
		named := slices.ContainsFunc(ports, func(p string) bool { return strings.Contains(" "+l.Value+" ", " "+p+" ") })
		if pick == nil || named {
			pick = &l
		}
		if named {
			break
		}
	}
	return pick
}

// groBlockedBy names what this host runs that keeps GRO from merging on
// d: its title, why, and its undo as the first remedy.
func groBlockedBy(f *finding.Finding, d *Device, l *finding.Limit) {
	switch l.Kind {
	case kindXDP:
		f.Title = fmt.Sprintf("GRO merges nothing on %s, behind the XDP program %s", d.Name, progLabel(l))
		f.Explanation += fmt.Sprintf(" An XDP program on %s sees every frame before GRO and may rewrite it (an IP ID, a TOS): "+
			"the packets GRO gets no longer look like one segmentation's.", d.Name)
	case kindNftRewrite:
		f.Title = fmt.Sprintf("GRO merges nothing on %s: an nftables rule in netns %s rewrites the headers GRO compares", d.Name, orNone(l.Where.Netns))
		f.Explanation += fmt.Sprintf(" Here the rule %q (%s) writes a field GRO requires equal (TOS, TTL) or consecutive (IP ID) "+
			"between the packets it merges.", l.Value, l.Where)
		if !strings.HasSuffix(f.Scope, "(netns "+l.Where.Netns+")") {
			// A hop that rewrites each packet forwards each one: its
			// per-packet work stays when the receiver merges again, so
			// the receiver's merging saves its own share only (the lab's
			// router variants gained 5-25 % where a receiver alone, its
			// sender as per-packet, gained 36-42 %).
			f.Impact /= 2
			f.ImpactText = fmt.Sprintf("about %s: the receiver's share of the per-packet work; the hop in netns %s that rewrites the packets forwards each one, with the rule or without", pct(f.Impact), l.Where.Netns)
		}
	}
	nameLimit(f, l, f.Remedy...)
}
