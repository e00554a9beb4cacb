package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mapping is one executable mapping of a process (/proc/PID/maps).
type Mapping struct {
	Start, End, Offset uint64
	Path               string
}

// ReadMappings reads a process's executable mappings.
func ReadMappings(pid uint32) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("reading the mappings of process %d: %w", pid, err)
	}
	defer f.Close()
	return ParseMappings(f)
}

// ParseMappings reads the /proc/PID/maps format, keeping executable mappings.
func ParseMappings(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		m := Mapping{Start: start, End: end, Offset: off}
		if len(f) >= 6 {
			m.Path = strings.Join(f[5:], " ")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mappings: %w", err)
	}
	return out, nil
}
