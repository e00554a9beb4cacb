package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// CgroupMemory is the memory limit that applies to this process's cgroup
// (the lowest of its own and its ancestors'), and what the cgroup uses now.
type CgroupMemory struct {
	Limit int64 // 0: no limit
	Usage int64
	Dir   string // the cgroup's directory, for messages
}

// unlimitedV1 is from where cgroup v1 means "no limit": it writes the
// largest page-aligned int64 rather than "max".
const unlimitedV1 = 1 << 62

// ReadCgroupMemory finds this process's memory cgroup, v2 or v1 (whichever
// has the memory controller), from /proc/self/cgroup and mountinfo. A host
// without one gives a zero CgroupMemory and no error.
func ReadCgroupMemory() (CgroupMemory, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return CgroupMemory{}, fmt.Errorf("reading this process's cgroups: %w", err)
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return CgroupMemory{}, fmt.Errorf("reading the mounts: %w", err)
	}
	defer mi.Close()
	mounts, err := parseCgroupMounts(mi)
	if err != nil {
		return CgroupMemory{}, err
	}
	for _, v := range []struct {
		v2          bool
		limit, used string
	}{{true, "memory.max", "memory.current"}, {false, "memory.limit_in_bytes", "memory.usage_in_bytes"}} {
		dir, root, ok := memoryCgroupDir(string(cg), mounts, v.v2)
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, v.used)); err != nil {
			continue // cgroup2 mounted without its memory controller
		}
		m := CgroupMemory{Dir: dir}
		// A parent's limit binds its children too.
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, v.limit)); err == nil {
				if l, ok := parseMemoryLimit(string(b)); ok && (m.Limit == 0 || l < m.Limit) {
					m.Limit = l
				}
			}
			if d == root || d == "/" || !strings.HasPrefix(d, root) {
				break
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, v.used))
		if err != nil {
			return CgroupMemory{}, fmt.Errorf("reading the memory cgroup's usage: %w", err)
		}
		if m.Usage, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return CgroupMemory{}, fmt.Errorf("reading the memory cgroup's usage %q: %w", strings.TrimSpace(string(b)), err)
		}
		return m, nil
	}
	return CgroupMemory{}, nil
}

// cgroupMount is a mounted cgroup hierarchy: cgroup2, or a v1 one with
// the memory controller.
type cgroupMount struct {
	v2         bool
	root, path string // the hierarchy's directory mounted, and where
}

// parseCgroupMounts reads /proc/self/mountinfo's cgroup2 mounts and v1
// memory mounts.
func parseCgroupMounts(r io.Reader) ([]cgroupMount, error) {
	var out []cgroupMount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case g[0] == "cgroup2":
			out = append(out, cgroupMount{true, f[3], f[4]})
		case g[0] == "cgroup" && hasOption(g[2], "memory"):
			out = append(out, cgroupMount{false, f[3], f[4]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the mounts: %w", err)
	}
	return out, nil
}

func hasOption(opts, name string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}

// memoryCgroupDir is the directory of this process's cgroup in a mounted
// hierarchy (v2's, or v1's memory one), and the mount's directory, from
// /proc/self/cgroup's "ID:CONTROLLERS:PATH" lines.
func memoryCgroupDir(procCgroup string, mounts []cgroupMount, v2 bool) (dir, mountDir string, ok bool) {
	for line := range strings.SplitSeq(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 != (parts[0] == "0" && parts[1] == "") || !v2 && !hasOption(parts[1], "memory") {
			continue
		}
		for _, m := range mounts {
			rel, inside := strings.CutPrefix(parts[2], m.root)
			if m.v2 != v2 || !inside || (rel != "" && m.root != "/" && !strings.HasPrefix(rel, "/")) {
				continue
			}
			return filepath.Join(m.path, rel), filepath.Clean(m.path), true
		}
	}
	return "", "", false
}

// parseMemoryLimit reads memory.max or memory.limit_in_bytes; ok is false
// for no limit.
func parseMemoryLimit(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0, false
	}
	return n, true
}

// SetGoMemoryLimit sets the Go runtime's soft memory limit to want (0: no
// limit of its own), lowered to what the cgroup leaves once outside, the
// memory the process holds outside Go (kernel maps and buffers charged to
// it), is taken, so that the collector works harder before the kernel's
// OOM killer acts. GOMEMLIMIT, when the user set it, decides. It returns
// the limit set, 0 when none.
func SetGoMemoryLimit(want, outside int64, cg CgroupMemory) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := want
	if cg.Limit > 0 && (limit == 0 || cg.Limit-outside < limit) {
		limit = max(cg.Limit-outside, 1)
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return limit
}
