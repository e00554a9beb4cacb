package profiler

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/skbtrace/skbtrace/internal/host"
)

// elfSymbols are one binary's function symbols and loadable segments.
type elfSymbols struct {
	loads  []elf.ProgHeader
	starts []uint64
	ends   []uint64
	names  []string
}

// userSymbolizer resolves user addresses through the process's mappings
// (taken while it ran) to the ELF symbols of the mapped files.
type userSymbolizer struct {
	mappings map[uint32][]host.Mapping // per process (tgid)
	exes     map[uint32]string         // the executable each process had when its mappings were read
	files    map[string]*elfSymbols    // nil: unreadable or without symbols
}

func newUserSymbolizer() *userSymbolizer {
	return &userSymbolizer{mappings: map[uint32][]host.Mapping{}, exes: map[uint32]string{}, files: map[string]*elfSymbols{}}
}

// resolve names one user address and says which file it is in ("" when the
// process's mappings are unknown).
func (u *userSymbolizer) resolve(tgid uint32, addr uint64) (name, file string) {
	for _, m := range u.mappings[tgid] {
		if addr < m.Start || addr >= m.End {
			continue
		}
		if m.Path == "" || m.Path[0] == '[' {
			if m.Path == "" {
				return "[anonymous]", "[anonymous]"
			}
			return m.Path, m.Path
		}
		syms := u.symbols(tgid, m.Path)
		if syms != nil {
			if fn := syms.lookup(addr - m.Start + m.Offset); fn != "" {
				return fn, m.Path
			}
		}
		return "[" + filepath.Base(m.Path) + "]", m.Path
	}
	return "[unknown]", ""
}

func (u *userSymbolizer) symbols(tgid uint32, path string) *elfSymbols {
	if s, ok := u.files[path]; ok {
		return s
	}
	// A containerized process's files are under its root.
	s, err := readELFSymbols(fmt.Sprintf("/proc/%d/root%s", tgid, path))
	if err != nil {
		s, _ = readELFSymbols(path)
	}
	u.files[path] = s
	return s
}

func readELFSymbols(path string) (*elfSymbols, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type sym struct {
		start, end uint64
		name       string
	}
	var syms []sym
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		ss, _ := get()
		for _, s := range ss {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
				syms = append(syms, sym{s.Value, s.Value + max(s.Size, 1), s.Name})
			}
		}
	}
	if len(syms) == 0 {
		return nil, fmt.Errorf("%s has no function symbols", path)
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].start < syms[j].start })
	e := &elfSymbols{}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			e.loads = append(e.loads, p.ProgHeader)
		}
	}
	for i, s := range syms {
		if i > 0 && s.start == syms[i-1].start {
			continue
		}
		e.starts = append(e.starts, s.start)
		e.ends = append(e.ends, s.end)
		e.names = append(e.names, s.name)
	}
	return e, nil
}

// lookup names the function at a file offset.
func (e *elfSymbols) lookup(off uint64) string {
	vaddr, ok := uint64(0), false
	for _, p := range e.loads {
		if off >= p.Off && off < p.Off+p.Filesz {
			vaddr, ok = off-p.Off+p.Vaddr, true
			break
		}
	}
	if !ok {
		return ""
	}
	i := sort.Search(len(e.starts), func(i int) bool { return e.starts[i] > vaddr }) - 1
	if i < 0 || vaddr >= e.ends[i] {
		return ""
	}
	return e.names[i]
}

// scanProcesses reads the mappings of every process not yet known or that
// has run another executable since (a fork read before its exec), so that a
// process that exits before the profile ends can still be symbolized.
func (u *userSymbolizer) scanProcesses() {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		var pid uint32
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == 0 {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if _, known := u.mappings[pid]; known && u.exes[pid] == exe {
			continue
		}
		if m, err := host.ReadMappings(pid); err == nil {
			u.mappings[pid], u.exes[pid] = m, exe
		}
	}
}
