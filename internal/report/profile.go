package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/report/flame"
	"github.com/skbtrace/skbtrace/internal/units"
)

// WriteProfileText prints where the CPU went: the window and its traffic,
// the contexts, the phase table with each phase's cost per packet and per
// byte, and the functions that took most samples themselves.
func WriteProfileText(w io.Writer, p *profile.Profile) error {
	var b strings.Builder
	m := p.Meta
	total := p.Total()
	fmt.Fprintf(&b, "profile: %d CPUs, %s at %d Hz, %.1f s, %d samples", len(m.CPUs), m.Clock, m.Hz, m.Seconds, total)
	if len(m.Command) > 0 {
		fmt.Fprintf(&b, ", command %s", strings.Join(m.Command, " "))
	}
	b.WriteString("\n")
	if t := m.Traffic; t.Counted {
		pk, by := t.Packets(), t.Bytes()
		fmt.Fprintf(&b, "traffic: %d packets (%.0f/s), %s (%s); transmitted %d packets in %d skbs, received %d in %d\n",
			pk, float64(pk)/m.Seconds, units.Bytes(by), units.Bits(8*float64(by)/m.Seconds), t.TxPkts, t.TxSkbs, t.RxPkts, t.RxSkbs)
	}
	ctx := map[profile.Context]uint64{}
	for _, s := range p.Samples {
		ctx[s.Context] += s.Count
	}
	b.WriteString("contexts:")
	for _, c := range []profile.Context{profile.User, profile.Syscall, profile.Softirq, profile.Hardirq, profile.Kthread, profile.Idle} {
		if total > 0 && ctx[c] > 0 {
			fmt.Fprintf(&b, " %s %.1f %%", c, 100*float64(ctx[c])/float64(total))
		}
	}
	b.WriteString("\n")
	writeCPUsAndTasks(&b, p)
	b.WriteString("\n")
	rows := p.PhaseTable()
	perPacket := m.Traffic.Packets() > 0
	fmt.Fprintf(&b, "%-20s %8s %9s", "phase (busy CPU)", "share", "cpu ms")
	if perPacket {
		fmt.Fprintf(&b, " %11s %9s", "ns/packet", "ns/byte")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-20s %6.1f %% %9.1f", r.Phase, 100*r.Share, r.Ns/1e6)
		if perPacket {
			fmt.Fprintf(&b, " %11.1f %9.3f", r.NsPerPacket, r.NsPerByte)
		}
		b.WriteString("\n")
	}
	self := map[string]uint64{}
	var busy uint64
	for _, s := range p.Samples {
		if s.Context == profile.Idle {
			continue
		}
		busy += s.Count
		switch {
		case len(s.Kernel) > 0:
			self[s.Kernel[0]+" [k]"] += s.Count
		case len(s.User) > 0:
			self[s.User[0]] += s.Count
		}
	}
	type fn struct {
		name string
		n    uint64
	}
	var fns []fn
	for k, v := range self {
		fns = append(fns, fn{k, v})
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].n > fns[j].n || fns[i].n == fns[j].n && fns[i].name < fns[j].name })
	if len(fns) > 0 {
		b.WriteString("\nbusiest functions (self):\n")
	}
	for i, f := range fns {
		if i == 10 {
			break
		}
		fmt.Fprintf(&b, "  %5.1f %%  %s\n", 100*float64(f.n)/float64(busy), f.name)
	}
	for _, n := range m.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ProfileFlame is the profile's flame graph page.
func ProfileFlame(p *profile.Profile) flame.Page {
	m := p.Meta
	pg := flame.Page{
		Title:    "skbtrace profile: " + m.Hostname + " " + m.Kernel,
		Subtitle: fmt.Sprintf("%d CPUs, %s at %d Hz, %.1f s, %d samples; idle CPUs left out", len(m.CPUs), m.Clock, m.Hz, m.Seconds, p.Total()),
		Unit:     "samples",
	}
	stacks := p.Stacks(true)
	if len(stacks) == 0 {
		// An idle host: its idle time is all there is to show.
		stacks = p.Stacks(false)
		pg.Subtitle = strings.TrimSuffix(pg.Subtitle, "; idle CPUs left out")
	}
	for stack, n := range stacks {
		pg.Stacks = append(pg.Stacks, flame.Stack{Frames: strings.Split(stack, ";"), Value: float64(n)})
	}
	return pg
}

// writeCPUsAndTasks says how busy each CPU was and which processes took the
// busy time, busiest first.
func writeCPUsAndTasks(b *strings.Builder, p *profile.Profile) {
	busy := map[int]uint64{}
	type task struct {
		comm string
		tgid uint32
	}
	tasks := map[task]uint64{}
	var busyTotal uint64
	for _, s := range p.Samples {
		if s.Context != profile.Idle {
			busy[s.CPU] += s.Count
			tasks[task{s.Comm, s.Tgid}] += s.Count
			busyTotal += s.Count
		}
	}
	// Busy time over the window, not busy samples over samples: an idle
	// CPU may go unsampled.
	b.WriteString("cpus (busy):")
	for _, c := range p.Meta.CPUs {
		if p.Meta.Seconds > 0 {
			fmt.Fprintf(b, " %d %.0f %%", c, 100*float64(busy[c])*p.NsPerSample()/(p.Meta.Seconds*1e9))
		}
	}
	b.WriteString("\n")
	if busyTotal == 0 {
		return
	}
	order := make([]task, 0, len(tasks))
	for t := range tasks {
		order = append(order, t)
	}
	sort.Slice(order, func(i, j int) bool {
		if tasks[order[i]] != tasks[order[j]] {
			return tasks[order[i]] > tasks[order[j]]
		}
		return order[i].comm < order[j].comm
	})
	b.WriteString("processes (share of busy):")
	for i, t := range order {
		if i == 6 {
			break
		}
		fmt.Fprintf(b, " %s[%d] %.1f %%", t.comm, t.tgid, 100*float64(tasks[t])/float64(busyTotal))
	}
	b.WriteString("\n")
}
