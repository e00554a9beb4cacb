package observe

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// queueDropLimits reads, in every watched namespace, the qdiscs whose drop
// counters hold drops, and on their devices the tc filters whose actions
// dropped or failed: a fifo whose queue limit overflowed (qdisc_limit), a
// classifier whose action shot the packet (tc_filter_drop), which the
// qdisc counts as its own drop. tc -s -j prints both: the netlink library
// leaves a fifo's options unparsed, and a filter is best shown as tc
// shows it.
func queueDropLimits(spaces []*watched, notes *[]string) []finding.Limit {
	if _, err := exec.LookPath("tc"); err != nil {
		*notes = append(*notes, "tc is not installed: the qdiscs and tc filters that may drop the flows' packets are not read")
		return nil
	}
	var out []finding.Limit
	for _, w := range spaces {
		if w.gone {
			continue
		}
		got, err := queueDropsIn(w)
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: reading its qdiscs' drops (tc -s qdisc): %v", w.name, err))
			continue
		}
		out = append(out, got...)
	}
	return out
}

func queueDropsIn(w *watched) ([]finding.Limit, error) {
	run := func(args ...string) ([]byte, error) { return w.output("tc", args...) }
	js, err := run("-s", "-j", "qdisc", "show")
	if err != nil {
		return nil, err
	}
	qdiscs, err := parseTcQdiscs(js)
	if err != nil {
		return nil, err
	}
	txqlen := map[string]int{}
	err = w.do(func() error {
		h, links, err := host.LinksHere()
		if err != nil {
			return err
		}
		defer h.Close()
		for _, l := range links {
			txqlen[l.Attrs().Name] = l.Attrs().TxQLen
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	netns := w.name
	var out []finding.Limit
	for _, q := range qdiscs {
		if q.Drops == 0 {
			continue
		}
		if l, ok := fifoLimit(netns, q, txqlen[q.Dev]); ok {
			out = append(out, l)
		}
		for _, parent := range q.filterParents() {
			js, err := run(append([]string{"-s", "-j", "filter", "show", "dev", q.Dev}, strings.Fields(parent)...)...)
			if err != nil {
				return nil, err
			}
			fs, err := parseTcFilters(js)
			if err != nil {
				return nil, err
			}
			for _, f := range fs {
				if l, ok := filterDropLimit(netns, q.Dev, parent, f); ok {
					out = append(out, l)
				}
			}
		}
	}
	return out, nil
}

// tcQdisc is a qdisc as tc -s -j qdisc show prints it.
type tcQdisc struct {
	Dev     string          `json:"dev"`
	Kind    string          `json:"kind"`
	Handle  string          `json:"handle"`
	Parent  string          `json:"parent"`
	Root    bool            `json:"root"`
	Options json.RawMessage `json:"options"`
	Packets uint64          `json:"packets"`
	Drops   uint64          `json:"drops"`
}

func parseTcQdiscs(js []byte) ([]tcQdisc, error) {
	var qs []tcQdisc
	if err := json.Unmarshal(js, &qs); err != nil {
		return nil, fmt.Errorf("parsing tc -s -j qdisc show: %w", err)
	}
	return qs, nil
}

// filterParents are the tc filter show arguments that list the filters a
// qdisc classifies by: a classful qdisc's by its handle, an ingress or
// clsact qdisc's by direction.
func (q tcQdisc) filterParents() []string {
	switch q.Kind {
	case "htb", "prio", "hfsc", "drr", "qfq", "ets", "cbq", "dsmark", "multiq":
		return []string{"parent " + q.Handle}
	case "ingress":
		return []string{"ingress"}
	case "clsact":
		return []string{"ingress", "egress"}
	}
	return nil
}

// fifoLimit is a fifo that dropped as a limit: its undo gives it the
// device's txqueuelen, the limit the kernel gives the pfifo it creates
// (in bytes for a bfifo: that many packets of the device's largest).
func fifoLimit(netns string, q tcQdisc, txqlen int) (finding.Limit, bool) {
	var opts struct {
		Limit uint64 `json:"limit"`
	}
	if q.Kind != "pfifo" && q.Kind != "bfifo" && q.Kind != "pfifo_head_drop" || json.Unmarshal(q.Options, &opts) != nil || opts.Limit == 0 {
		return finding.Limit{}, false
	}
	unit, want, how := "packets", uint64(max(txqlen, 1000)), fmt.Sprintf("the device's txqueuelen, %d packets: the limit the kernel gives the pfifo it creates", txqlen)
	if txqlen <= 0 {
		how = "1000 packets: the limit the kernel gives the pfifo it creates on a device with the usual txqueuelen"
	}
	if q.Kind == "bfifo" {
		unit, want = "bytes", want*65536
		how += fmt.Sprintf(", of up to 64 KiB each (a GSO skb): %d bytes", want)
	}
	if opts.Limit >= want {
		return finding.Limit{}, false // a queue as long as the default's overflows from its load, not its limit
	}
	place := []string{"root"}
	if !q.Root && q.Parent != "" {
		place = []string{"parent", q.Parent}
	}
	argv := append(append([]string{"tc", "qdisc", "change", "dev", q.Dev}, place...), "handle", q.Handle, q.Kind, "limit", fmt.Sprint(want))
	return finding.Limit{Kind: doctor.KindQdiscLimit,
		Value: fmt.Sprintf("%s limit %d %s (%d drops counted since it was created, of %d packets)", q.Kind, opts.Limit, unit, q.Drops, q.Packets+q.Drops),
		Where: finding.Place{Layer: finding.LayerDevice, Netns: netns,
			Object: doctor.ShaperObject(q.Dev, q.Handle)},
		Applies:    finding.Scope{Devices: []string{q.Dev}},
		Undo:       []finding.Action{finding.Command(nsArg(netns), argv...)},
		Arithmetic: how, Source: "tc -s -j qdisc show"}, true
}

// tcFilter is a filter as tc -s -j filter show prints it.
type tcFilter struct {
	Protocol string `json:"protocol"`
	Pref     int    `json:"pref"`
	Kind     string `json:"kind"`
	Options  struct {
		Handle  string     `json:"fh"`
		Actions []tcAction `json:"actions"`
	} `json:"options"`
}

type tcAction struct {
	Kind          string `json:"kind"`
	MirredAction  string `json:"mirred_action"`
	Direction     string `json:"direction"`
	ToDev         string `json:"to_dev"`
	ControlAction struct {
		Type string `json:"type"`
	} `json:"control_action"`
	Stats struct {
		Packets    uint64 `json:"packets"`
		Drops      uint64 `json:"drops"`
		Overlimits uint64 `json:"overlimits"`
	} `json:"stats"`
}

func parseTcFilters(js []byte) ([]tcFilter, error) {
	var fs []tcFilter
	if err := json.Unmarshal(js, &fs); err != nil {
		return nil, fmt.Errorf("parsing tc -s -j filter show: %w", err)
	}
	return fs, nil
}

// shot is how many packets an action took from the qdisc: a gact drop's
// packets, an action's drops, and a mirred redirect's failures (the
// kernel counts a redirect to a device that is down or gone as an
// overlimit of the action, and the qdisc drops the packet).
func (a tcAction) shot() (uint64, string) {
	switch {
	case a.Kind == "gact" && a.ControlAction.Type == "drop":
		return a.Stats.Packets, "gact drop"
	case a.Kind == "mirred" && a.Stats.Overlimits > 0:
		return a.Stats.Overlimits, fmt.Sprintf("mirred %s %s to %s, which failed", a.Direction, a.MirredAction, a.ToDev)
	case a.Stats.Drops > 0:
		return a.Stats.Drops, a.Kind
	}
	return 0, ""
}

// filterDropLimit is a filter whose actions shot packets as a limit: its
// undo deletes that filter (by its handle where it has one).
func filterDropLimit(netns, dev, parent string, f tcFilter) (finding.Limit, bool) {
	var total uint64
	var what []string
	for _, a := range f.Options.Actions {
		if n, how := a.shot(); n > 0 {
			total += n
			what = append(what, fmt.Sprintf("%s: %d packets", how, n))
		}
	}
	if total == 0 {
		return finding.Limit{}, false
	}
	argv := append([]string{"tc", "filter", "del", "dev", dev}, strings.Fields(parent)...)
	argv = append(argv, "protocol", f.Protocol, "prio", fmt.Sprint(f.Pref))
	if f.Options.Handle != "" {
		argv = append(argv, "handle", f.Options.Handle, f.Kind)
	}
	object := fmt.Sprintf("dev %s filter %s pref %d", dev, parent, f.Pref)
	if f.Options.Handle != "" {
		object += " handle " + f.Options.Handle
	}
	return finding.Limit{Kind: doctor.KindTcFilterDrop,
		Value:   fmt.Sprintf("%s filter, protocol %s, whose action dropped %d packets (%s)", f.Kind, f.Protocol, total, strings.Join(what, "; ")),
		Where:   finding.Place{Layer: finding.LayerDevice, Netns: netns, Object: object},
		Applies: finding.Scope{Devices: []string{dev}},
		Undo:    []finding.Action{finding.Command(nsArg(netns), argv...)},
		Source:  "tc -s -j filter show"}, true
}
