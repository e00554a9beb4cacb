package profiler

import (
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/profile"
)

// BenchmarkSymbolize30s symbolizes what a 30 s profile at 999 Hz on two
// CPUs holds (60,000 samples in 20,000 distinct keys over 4,000 kernel and
// 2,000 user stacks of 30 frames): kernel frames against a kallsyms of
// 150,000 functions, user frames against the C library's ELF symbols.
// The target is under a second.
func BenchmarkSymbolize30s(b *testing.B) {
	var ks strings.Builder
	const kbase = 0xffffffff81000000
	for i := range 150000 {
		fmt.Fprintf(&ks, "%x T fn_%d\n", kbase+uint64(i)*64, i)
	}
	ksyms, err := host.ParseKallsyms(strings.NewReader(ks.String()))
	if err != nil {
		b.Fatal(err)
	}
	// The C library: go test strips its own binaries' symbol tables, and
	// every host has a libc with dynamic symbols.
	exe := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(exe); err != nil {
		exe = "/lib64/libc.so.6"
	}
	f, err := elf.Open(exe)
	if err != nil {
		b.Fatal(err)
	}
	syms, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	var text []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			text = append(text, s.Value)
		}
	}
	// A shared object's segments sit at file offset = address, so mapped
	// from offset 0 at base its symbols are at base + value.
	const pid, base = 4242, 0x7f0000000000
	stacks := map[int32][]uint64{}
	for id := range int32(6000) {
		addrs := make([]uint64, 30)
		for j := range addrs {
			if id < 4000 {
				addrs[j] = kbase + uint64((int(id)*31+j*7919)%150000)*64 + 8
			} else {
				addrs[j] = base + text[(int(id)*17+j*131)%len(text)] + 1
			}
		}
		stacks[id] = addrs
	}
	var raw []probe.ProfileSample
	for i := range 20000 {
		k := probe.ProfileProfileKey{Tgid: pid, Pid: pid, Cpu: uint32(i % 2), KernelStack: int32(i % 4000), UserStack: int32(4000 + i%2000)}
		copy(k.Comm[:], []int8{'b', 'e', 'n', 'c', 'h'})
		raw = append(raw, probe.ProfileSample{Key: k, Count: 3})
	}
	mappings := []host.Mapping{{Start: base, End: base + 1<<32, Offset: 0, Path: exe}}
	stack := func(id int32) ([]uint64, error) { return stacks[id], nil }
	b.ResetTimer()
	for range b.N {
		users := newUserSymbolizer()
		users.mappings[pid] = mappings
		p := &profile.Profile{Meta: profile.Meta{Clock: "cpu-clock", Hz: 999, Seconds: 30, CPUs: []int{0, 1}}}
		if err := symbolize(p, raw, stack, ksyms, users); err != nil {
			b.Fatal(err)
		}
		if p.Total() != 60000 {
			b.Fatalf("%d samples", p.Total())
		}
		if u := p.Samples[0].User; len(u) != 30 || strings.HasPrefix(u[0], "[") {
			b.Fatalf("user frames not resolved: %v", u)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/profile")
}
