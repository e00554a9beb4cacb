package observe

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/units"
)

// shaperLimits reads, in every watched namespace, the shapers on its
// devices (netlink): a tbf qdisc's rate, bucket and queue, an htb class's
// rate and ceiling with the filters that classify traffic into it, and,
// for an ifb device, the ingress redirects that feed it. Each carries the
// tc commands that remove it, in its namespace, on its device.
// A router between the ends that is not observed (a named namespace at the
// other end of an observed veth, as neighbours finds it) has its shapers
// read too: a queue beyond this host is theirs to explain.
func shaperLimits(spaces []*watched, ev *doctor.Evidence, notes *[]string) []finding.Limit {
	var out []finding.Limit
	for _, w := range spaces {
		if w.gone {
			continue
		}
		var got []finding.Limit
		err := w.do(func() (err error) {
			got, err = shapersHere(w.name)
			return err
		})
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: reading its shapers (tc qdiscs and classes): %v", w.name, err))
			continue
		}
		out = append(out, got...)
	}
	next, via := neighbours(spaces, ev)
	for _, w := range next {
		var got []finding.Limit
		err := w.do(func() (err error) {
			got, err = shapersHere(w.name)
			return err
		})
		w.ns.Close()
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s (at the other end of %s): reading its shapers: %v", w.name, via[w.name], err))
			continue
		}
		for _, l := range got {
			l.Source += ", in the namespace at the other end of " + via[w.name] + " (not observed)"
			out = append(out, l)
		}
	}
	return out
}

// redirect is an ingress filter that sends a device's traffic to another
// (act_mirred), as an ifb shaper's input is fed.
type redirect struct {
	from, filter string
}

// shapersHere lists the shapers of the calling thread's namespace.
func shapersHere(netns string) ([]finding.Limit, error) {
	h, links, err := host.LinksHere()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	byIndex := map[int]string{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l.Attrs().Name
	}
	qdiscs := map[string][]netlink.Qdisc{}
	redirects := map[string][]redirect{} // target device -> who feeds it
	for _, l := range links {
		name := l.Attrs().Name
		qs, err := h.QdiscList(l)
		if err != nil {
			return nil, fmt.Errorf("listing the qdiscs of %s: %w", name, err)
		}
		qdiscs[name] = qs
		for _, q := range qs {
			if q.Type() != "ingress" && q.Type() != "clsact" {
				continue
			}
			fs, _ := h.FilterList(l, netlink.HANDLE_MIN_INGRESS)
			for _, f := range fs {
				for _, to := range mirredTargets(f) {
					if t, ok := byIndex[to]; ok {
						redirects[t] = append(redirects[t], redirect{from: name, filter: filterText(f)})
					}
				}
			}
		}
	}
	var out []finding.Limit
	for _, l := range links {
		name := l.Attrs().Name
		for _, q := range qdiscs[name] {
			t, ok := q.(*netlink.Tbf)
			if !ok || t.Rate == 0 {
				continue
			}
			out = append(out, tbfLimit(netns, name, t, redirects[name]))
		}
		classes, err := h.ClassList(l, 0)
		if err != nil {
			continue // a device without classful qdiscs
		}
		for _, c := range classes {
			hc, ok := c.(*netlink.HtbClass)
			if !ok || hc.Rate == 0 {
				continue
			}
			out = append(out, htbClassLimit(netns, name, hc, htbOf(qdiscs[name], hc), classFilters(h, l, hc)))
		}
	}
	return out, nil
}

// mirredTargets are the devices a filter's mirred actions redirect to.
func mirredTargets(f netlink.Filter) []int {
	var acts []netlink.Action
	switch f := f.(type) {
	case *netlink.U32:
		acts = f.Actions
	case *netlink.MatchAll:
		acts = f.Actions
	case *netlink.Flower:
		acts = f.Actions
	case *netlink.BpfFilter:
		return nil // a program redirects by its own code, not an action
	}
	var out []int
	for _, a := range acts {
		if m, ok := a.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR {
			out = append(out, m.Ifindex)
		}
	}
	return out
}

// filterText names a filter as tc filter show does: kind, preference, parent.
func filterText(f netlink.Filter) string {
	a := f.Attrs()
	return fmt.Sprintf("%s filter pref %d on parent %s", f.Type(), a.Priority, tcHandle(a.Parent))
}

// tcHandle is a handle as tc takes it: "1:" for a qdisc's, "1:10" for a class's.
func tcHandle(h uint32) string {
	if h&0xffff == 0 {
		return fmt.Sprintf("%x:", h>>16)
	}
	return fmt.Sprintf("%x:%x", h>>16, h&0xffff)
}

// tbfLimit is a tbf qdisc as a limit; its first action deletes it (a rate
// the doctor cannot compare with what the path would carry without it is
// lifted, not guessed), the second, for an ifb's, the redirect that feeds it.
func tbfLimit(netns, dev string, t *netlink.Tbf, feeds []redirect) finding.Limit {
	a := t.Attrs()
	burst := netlink.Xmitsize(t.Rate, t.Buffer)
	value := fmt.Sprintf("rate %s burst %d bytes limit %d bytes", units.Bits(float64(t.Rate)*8), burst, t.Limit)
	undo := []finding.Action{finding.Command(nsArg(netns), append([]string{"tc", "qdisc", "del", "dev", dev}, parentArgv(a.Parent)...)...)}
	devices := []string{dev}
	for _, r := range feeds {
		value += fmt.Sprintf("; fed by the ingress of %s (%s redirects to %s)", r.from, r.filter, dev)
		undo = append(undo, finding.Command(nsArg(netns), "tc", "qdisc", "del", "dev", r.from, "ingress"))
		devices = append(devices, r.from)
	}
	return finding.Limit{Kind: doctor.KindTBFRate, Value: value,
		Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: doctor.ShaperObject(dev, netlink.HandleStr(a.Handle))},
		Applies: finding.Scope{Devices: devices}, Undo: undo, Source: "netlink RTM_GETQDISC"}
}

// htbClassLimit is an htb class as a limit, with what sends traffic to it;
// its first action deletes the htb qdisc (classes and filters with it).
func htbClassLimit(netns, dev string, c *netlink.HtbClass, htb *netlink.Htb, filters []string) finding.Limit {
	a := c.Attrs()
	classid := netlink.HandleStr(a.Handle)
	value := fmt.Sprintf("rate %s ceil %s", units.Bits(float64(c.Rate)*8), units.Bits(float64(c.Ceil)*8))
	parent := []string{"root"}
	if htb != nil {
		parent = parentArgv(htb.Attrs().Parent)
		if minor := a.Handle & 0xffff; htb.Defcls != 0 && htb.Defcls == minor {
			filters = append(filters, "the htb's default class (unclassified traffic)")
		}
	}
	if len(filters) > 0 {
		value += "; traffic sent to it by " + strings.Join(filters, ", ")
	}
	return finding.Limit{Kind: doctor.KindHTBClassRate, Value: value,
		Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: doctor.ShaperObject(dev, classid)},
		Applies: finding.Scope{Devices: []string{dev}},
		Undo: []finding.Action{
			finding.Command(nsArg(netns), append([]string{"tc", "qdisc", "del", "dev", dev}, parent...)...),
			finding.Change("or raise the class: tc class change dev %s classid %s htb rate RATE ceil RATE", dev, tcHandle(a.Handle)),
		},
		Source: "netlink RTM_GETTCLASS, RTM_GETTFILTER"}
}

// htbOf is the htb qdisc a class belongs to (same major number).
func htbOf(qs []netlink.Qdisc, c *netlink.HtbClass) *netlink.Htb {
	for _, q := range qs {
		if h, ok := q.(*netlink.Htb); ok && h.Attrs().Handle>>16 == c.Attrs().Handle>>16 {
			return h
		}
	}
	return nil
}

// classFilters are the filters, on the class's qdisc, that classify into it.
func classFilters(h *netlink.Handle, l netlink.Link, c *netlink.HtbClass) []string {
	fs, err := h.FilterList(l, c.Attrs().Handle&0xffff0000)
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range fs {
		var to uint32
		switch f := f.(type) {
		case *netlink.U32:
			to = f.ClassId
		case *netlink.FwFilter:
			to = f.ClassId
		case *netlink.BpfFilter:
			to = f.ClassId
		case *netlink.Flower:
			to = f.ClassId
		case *netlink.MatchAll:
			to = f.ClassId
		}
		if to == c.Attrs().Handle {
			out = append(out, filterText(f))
		}
	}
	return out
}

func parentArgv(parent uint32) []string {
	if parent == netlink.HANDLE_ROOT || parent == 0 {
		return []string{"root"}
	}
	return []string{"parent", netlink.HandleStr(parent)}
}
