package profile

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Stacks are the samples as root-first frame lists: the command, its user
// frames, then its kernel frames marked "_[k]" as perf's stackcollapse does
// (flamegraph.pl colours them apart). busy leaves the idle CPUs out.
func (p *Profile) Stacks(busy bool) map[string]uint64 {
	out := map[string]uint64{}
	var b strings.Builder
	for _, s := range p.Samples {
		if busy && s.Context == Idle {
			continue
		}
		b.Reset()
		b.WriteString(strings.ReplaceAll(s.Comm, ";", ":"))
		for i := len(s.User) - 1; i >= 0; i-- {
			b.WriteByte(';')
			b.WriteString(s.User[i])
		}
		for i := len(s.Kernel) - 1; i >= 0; i-- {
			b.WriteByte(';')
			b.WriteString(s.Kernel[i])
			b.WriteString("_[k]")
		}
		out[b.String()] += s.Count
	}
	return out
}

// WriteFolded writes one line per distinct stack, "frame;frame;... count",
// the input of flamegraph.pl, in a stable order.
func (p *Profile) WriteFolded(w io.Writer) error {
	stacks := p.Stacks(false)
	keys := make([]string, 0, len(stacks))
	for k := range stacks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		fmt.Fprintf(bw, "%s %d\n", k, stacks[k])
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing folded stacks: %w", err)
	}
	return nil
}
