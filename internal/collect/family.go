package collect

import (
	"fmt"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/probe"
)

// Family is a set of events a user selects with -e, and the hooks it needs.
type Family struct {
	Name        string
	ID          uint16 // enum event_family, the key of loss accounting
	Description string
	Hooks       []probe.Hook
}

// Families lists every family in the order `skbtrace events` prints them.
var Families = []Family{
	{
		Name:        "tcp_conn",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_CONN),
		Description: "TCP state changes with addresses, namespace, pid and command",
		Hooks: []probe.Hook{
			{Program: probe.SkbtraceProgTcpConn, Kind: probe.Tracepoint, Group: "sock", Name: "inet_sock_set_state"},
		},
	},
	{
		Name:        "tcp_sendlim",
		ID:          uint16(probe.SkbtraceEventFamilyFAMILY_TCP_SENDLIM),
		Description: "why an established sender is not sending more, decided per ACK and folded in the kernel",
		Hooks: []probe.Hook{
			{Program: probe.SkbtraceProgTcpSendlim, Kind: probe.BTFTracepoint, Name: "tcp_probe"},
			{Program: probe.SkbtraceProgTcpSendlimClose, Kind: probe.BTFTracepoint, Name: "tcp_destroy_sock"},
			{Program: probe.SkbtraceProgSendlimOpenRuns, Kind: probe.Iterator, Name: "bpf_sk_storage_map"},
		},
	},
}

func init() {
	analyze.FamilyName = func(id uint16) string {
		for _, f := range Families {
			if f.ID == id {
				return f.Name
			}
		}
		return fmt.Sprintf("family%d", id)
	}
}

// CanRun says why a family cannot run on this kernel, or nil.
func (f Family) CanRun() error {
	for _, h := range f.Hooks {
		if err := probe.CheckHook(h); err != nil {
			return err
		}
	}
	return nil
}

// Skipped is a family left out of an automatic selection, and why.
type Skipped struct {
	Family Family
	Reason error
}

// Select resolves -e. "all" or no names selects every family that can run
// and reports the others as skipped; a family named explicitly that cannot
// run is an error.
func Select(names []string) ([]Family, []Skipped, error) {
	auto := len(names) == 0 || (len(names) == 1 && names[0] == "all")
	if auto {
		var run []Family
		var skipped []Skipped
		for _, f := range Families {
			if err := f.CanRun(); err != nil {
				skipped = append(skipped, Skipped{f, err})
				continue
			}
			run = append(run, f)
		}
		if len(run) == 0 {
			return nil, skipped, fmt.Errorf("no event family can run on this kernel: %v", skipped[0].Reason)
		}
		return run, skipped, nil
	}
	var run []Family
	seen := map[string]bool{}
	for _, n := range names {
		f, ok := ByName(n)
		if !ok {
			return nil, nil, fmt.Errorf("unknown event family %q (known: %s)", n, strings.Join(familyNames(), ", "))
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		if err := f.CanRun(); err != nil {
			return nil, nil, fmt.Errorf("event family %s cannot run: %w", n, err)
		}
		run = append(run, f)
	}
	return run, nil, nil
}

// ByName finds a family.
func ByName(name string) (Family, bool) {
	for _, f := range Families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

func familyNames() []string {
	var out []string
	for _, f := range Families {
		out = append(out, f.Name)
	}
	return out
}
