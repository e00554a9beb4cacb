package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Kallsyms maps kernel text addresses to symbol+offset.
type Kallsyms struct {
	addrs []uint64
	names []string
}

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

// ParseKallsyms reads the /proc/kallsyms format, keeping text symbols.
func ParseKallsyms(r io.Reader) (*Kallsyms, error) {
	type sym struct {
		addr uint64
		name string
	}
	var syms []sym
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || (f[1] != "t" && f[1] != "T") {
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || addr == 0 {
			continue
		}
		syms = append(syms, sym{addr, f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading kernel symbols: %w", err)
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].addr < syms[j].addr })
	k := &Kallsyms{}
	for _, s := range syms {
		k.addrs = append(k.addrs, s.addr)
		k.names = append(k.names, s.name)
	}
	return k, nil
}

// Resolve returns "symbol+0xoffset" for a text address, or "" when unknown.
func (k *Kallsyms) Resolve(addr uint64) string {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return ""
	}
	return fmt.Sprintf("%s+0x%x", k.names[i], addr-k.addrs[i])
}

// Func returns the name of the function holding a text address, or "" when unknown.
func (k *Kallsyms) Func(addr uint64) string {
	i := sort.Search(len(k.addrs), func(i int) bool { return k.addrs[i] > addr }) - 1
	if i < 0 {
		return ""
	}
	return k.names[i]
}
