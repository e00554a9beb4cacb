package collect

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// drains turn what the families that aggregate in kernel maps counted
// since the previous drain into events, by family id.
var drains = map[uint16]drainFunc{
	uint16(wire.EventFamilyFAMILY_SK_LIMIT):    drainSkLimit,
	uint16(wire.EventFamilyFAMILY_SKB_DROP):    drainSkbDrop,
	uint16(wire.EventFamilyFAMILY_DEV_XMIT):    drainDevXmit,
	uint16(wire.EventFamilyFAMILY_DEV_RECV):    drainDevRecv,
	uint16(wire.EventFamilyFAMILY_NAPI_POLL):   drainNapi,
	uint16(wire.EventFamilyFAMILY_SOFTIRQ):     drainSoftirq,
	uint16(wire.EventFamilyFAMILY_QDISC):       drainQdisc,
	uint16(wire.EventFamilyFAMILY_SOCK_IO):     drainSockIO,
	uint16(wire.EventFamilyFAMILY_QDISC_DELAY): drainQdiscDelay,
	uint16(wire.EventFamilyFAMILY_TCP_STAGE):   drainTCPStage,
}

// Select resolves -e. No names, or "all", selects every family: Start
// skips those this kernel cannot run and says why. Families named
// explicitly are required: Start fails if one cannot run.
func Select(names []string) (fams []*event.Family, required bool, err error) {
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return event.Families, false, nil
	}
	seen := map[string]bool{}
	for _, n := range names {
		f, ok := event.ByName(n)
		if !ok {
			return nil, false, fmt.Errorf("unknown event family %q (known: %s)", n, strings.Join(familyNames(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			fams = append(fams, f)
		}
	}
	return fams, true, nil
}

func familyNames() []string {
	var out []string
	for _, f := range event.Families {
		out = append(out, f.Name)
	}
	return out
}

// Status is what Start does with a family on this kernel.
type Status struct {
	Family  *event.Family
	Hooks   []event.Hook // the hook chosen for each attach point, when it runs
	Without []string     // optional attach points it runs without: the cost, and why
	Err     error        // why it does not run
}

// Check says what Start does with every family. With the privileges to
// load programs it decides as Start does, by loading and attaching them
// all for a moment (loaded is true); without, from the kernel's BTF and
// tracefs alone, which cannot see what the verifier would reject.
func Check() (statuses []Status, feat probe.Features, loaded bool, err error) {
	if host.CheckTracingCaps() == nil {
		rec, err := Start(Options{Families: event.Families, RingBytes: 1 << 16})
		if err != nil {
			return nil, feat, false, err
		}
		defer rec.Close()
		byName := map[string]Status{}
		for _, r := range rec.Running {
			byName[r.Family.Name] = Status{Family: r.Family, Hooks: r.Hooks, Without: r.Without}
		}
		for _, s := range rec.Skipped {
			byName[s.Family.Name] = Status{Family: s.Family, Err: s.Reason}
		}
		for _, f := range event.Families {
			statuses = append(statuses, byName[f.Name])
		}
		return statuses, rec.Features(), true, nil
	}
	for _, f := range event.Families {
		st := Status{Family: f}
		for _, slot := range f.Hooks {
			var errs []string
			found := false
			for _, h := range slot {
				if err := probe.CheckHook(h); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", h, err))
					continue
				}
				if !slices.Contains(st.Hooks, h) { // a hook slots share is listed once, as when loading
					st.Hooks = append(st.Hooks, h)
				}
				found = true
				break
			}
			if !found {
				st.Hooks, st.Err = nil, errors.New(strings.Join(errs, "; "))
				break
			}
		}
		for _, o := range f.Optional {
			if st.Err != nil {
				break
			}
			st.Hooks, st.Without = probe.ChooseOptional(o, st.Hooks, st.Without, probe.CheckHook)
		}
		statuses = append(statuses, st)
	}
	return statuses, feat, false, nil
}
