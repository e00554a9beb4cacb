package host

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
)

// Kallsyms maps kernel text addresses to symbol+offset. A drop location or
// a stack frame may be any of the kernel's 120,000 text symbols, so all are
// kept, but their names share a few large chunks: a string each would be an
// allocation each, and only the few names resolved become strings. Chunks,
// not one growing slice, because the file's size is unknown until read
// (procfs says 0) and each regrowth would copy what was read so far.
type Kallsyms struct {
	syms   []ksym
	chunks [][]byte
}

// ksym is a text symbol: its address and where its name is, as
// chunk<<kallsymsChunkBits | offset.
type ksym struct {
	addr    uint64
	name, n uint32
}

const kallsymsChunkBits = 18 // 256 KiB of names a chunk

// LoadKallsyms reads /proc/kallsyms. Without privileges the kernel shows
// zero addresses; the result then resolves nothing, which callers report.
func LoadKallsyms() (*Kallsyms, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("reading kernel symbols: %w", err)
	}
	defer f.Close()
	return ParseKallsyms(f)
}

// ParseKallsyms reads the /proc/kallsyms format ("ADDR TYPE NAME\t[MODULE]"),
// keeping text symbols.
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	k := &Kallsyms{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		addr, name, ok := kallsymsLine(sc.Bytes())
		if !ok {
			continue
		}
		last := len(k.chunks) - 1
		if last < 0 || len(k.chunks[last])+len(name) > cap(k.chunks[last]) {
			if len(k.chunks) == 1<<(32-kallsymsChunkBits) {
				return nil, fmt.Errorf("reading kernel symbols: more names than a symbol table holds")
			}
			k.chunks = append(k.chunks, make([]byte, 0, 1<<kallsymsChunkBits))
			last++
		}
		at := uint32(last)<<kallsymsChunkBits | uint32(len(k.chunks[last]))
		k.chunks[last] = append(k.chunks[last], name...)
		if len(k.syms) == cap(k.syms) {
			// Doubling: append grows large slices by a quarter, copying
			// the table five times over by 120,000 symbols.
			k.syms = slices.Grow(k.syms, max(len(k.syms), 1024))
		}
		k.syms = append(k.syms, ksym{addr, at, uint32(len(name))})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading kernel symbols: %w", err)
	}
	// The kernel lists its own symbols in address order; modules follow.
	slices.SortStableFunc(k.syms, func(a, b ksym) int { return cmp.Compare(a.addr, b.addr) })
	return k, nil
}

// kallsymsLine is a line's address and name when it is a text symbol
// whose address the kernel showed.
func kallsymsLine(line []byte) (uint64, []byte, bool) {
	a, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok || len(rest) < 3 || rest[1] != ' ' || (rest[0] != 't' && rest[0] != 'T') {
		return 0, nil, false
	}
	name := rest[2:]
	if i := bytes.IndexAny(name, " \t"); i >= 0 {
		name = name[:i]
	}
	addr, ok := parseHex(a)
	if !ok || addr == 0 || len(name) == 0 {
		return 0, nil, false
	}
	return addr, name, true
}

// parseHex is strconv.ParseUint(s, 16, 64) without making s a string for
// each of the file's lines.
func parseHex(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// at is the index of the symbol holding addr, or -1.
func (k *Kallsyms) at(addr uint64) int {
	return sort.Search(len(k.syms), func(i int) bool { return k.syms[i].addr > addr }) - 1
}

func (k *Kallsyms) name(i int) string {
	s := k.syms[i]
	off := s.name & (1<<kallsymsChunkBits - 1)
	return string(k.chunks[s.name>>kallsymsChunkBits][off : off+s.n])
}

// Resolve returns "symbol+0xoffset" for a text address, or "" when unknown.
func (k *Kallsyms) Resolve(addr uint64) string {
	i := k.at(addr)
	if i < 0 {
		return ""
	}
	return fmt.Sprintf("%s+0x%x", k.name(i), addr-k.syms[i].addr)
}

// Func returns the name of the function holding a text address, or "" when unknown.
func (k *Kallsyms) Func(addr uint64) string {
	i := k.at(addr)
	if i < 0 {
		return ""
	}
	return k.name(i)
}
