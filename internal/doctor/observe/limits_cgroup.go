package observe

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// cgroupHier is a cgroup hierarchy that carries the cpu controller: the
// unified one (v2) or v1's cpu hierarchy.
type cgroupHier struct {
	version int
	root    string // its mount point
}

// cpuHierarchies finds where the cpu controller is mounted, from
// /proc/self/mountinfo's text; a cgroup2 mount counts where its
// cgroup.controllers lists cpu (root is prefixed to the mount points: a
// fixture's tree).
func cpuHierarchies(mountinfo []byte, root string) []cgroupHier {
	var out []cgroupHier
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		mnt := filepath.Join(root, f[4])
		switch g[0] {
		case "cgroup2":
			b, err := os.ReadFile(filepath.Join(mnt, "cgroup.controllers"))
			if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
				out = append(out, cgroupHier{2, mnt})
			}
		case "cgroup":
			if slices.Contains(strings.Split(g[2], ","), "cpu") {
				out = append(out, cgroupHier{1, mnt})
			}
		}
	}
	return out
}

// cgroupStat is one reading of a cgroup's quota and cpu.stat.
type cgroupStat struct {
	quotaUs, periodUs         int64
	periods, throttled, thrUs uint64
	usageUs                   uint64
	usageKnown                bool
}

// readCgroupStat reads a cgroup's quota and throttling; ok is false where
// it has no quota (v2 "max", v1 -1) or cannot be read.
func readCgroupStat(h cgroupHier, dir string) (s cgroupStat, ok bool) {
	if h.version == 2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 2 || f[0] == "max" {
			return s, false
		}
		s.quotaUs, _ = strconv.ParseInt(f[0], 10, 64)
		s.periodUs, _ = strconv.ParseInt(f[1], 10, 64)
	} else {
		s.quotaUs = readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		s.periodUs = readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if s.quotaUs <= 0 {
			return s, false
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil || s.periodUs <= 0 {
		return s, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "nr_periods":
			s.periods = n
		case "nr_throttled":
			s.throttled = n
		case "throttled_usec": // v2
			s.thrUs = n
		case "throttled_time": // v1, in ns
			s.thrUs = n / 1000
		case "usage_usec": // v2
			s.usageUs, s.usageKnown = n, true
		}
	}
	if h.version == 1 {
		// cpuacct mounted with cpu counts the same group's time (ns).
		if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
				s.usageUs, s.usageKnown = n/1000, true
			}
		}
	}
	return s, true
}

func readInt(p string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// maxCgroupDirs bounds a walk of a hierarchy (a Kubernetes node has
// thousands of cgroups).
const maxCgroupDirs = 5000

// cgroupKey names a cgroup across readings.
type cgroupKey struct {
	version int
	dir     string
}

// cgroupWatch follows the cgroups with a CPU quota while the workload
// runs: their readings at the start and the end, and which of their
// processes own which TCP sockets, sampled as they come and go (a process
// that exits before the end is known from an earlier scan).
type cgroupWatch struct {
	hiers  []cgroupHier
	proc   string // /proc, or a fixture's
	start  time.Time
	mu     sync.Mutex
	first  map[cgroupKey]cgroupStat
	quotad map[cgroupKey]bool
	procs  map[cgroupKey]map[int]doctor.CgroupProcess
	socks  map[cgroupKey]map[string]bool
	capped bool
	begun  bool // the first readings are taken: a cgroup found later counts from zero
	stop   chan struct{}
	done   chan struct{}
}

func newCgroupWatch(hiers []cgroupHier, proc string) *cgroupWatch {
	return &cgroupWatch{hiers: hiers, proc: proc, first: map[cgroupKey]cgroupStat{}, quotad: map[cgroupKey]bool{},
		procs: map[cgroupKey]map[int]doctor.CgroupProcess{}, socks: map[cgroupKey]map[string]bool{}}
}

// startCgroupWatch reads the quota'd cgroups now and scans their
// processes every interval until finish; nil where no hierarchy carries
// the cpu controller.
func startCgroupWatch(interval time.Duration) *cgroupWatch {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	h := cpuHierarchies(mi, "")
	if len(h) == 0 {
		return nil
	}
	w := newCgroupWatch(h, "/proc")
	w.begin()
	w.stop, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-w.stop:
				return
			case <-t.C:
				// New cgroups (systemd-run, a container started) every
				// fourth scan; the known ones' processes every time.
				w.scan(n%4 == 0)
			}
		}
	}()
	return w
}

// begin takes the first readings.
func (w *cgroupWatch) begin() {
	w.start = time.Now()
	w.scan(true)
	w.begun = true
}

// scan walks the hierarchies for quota'd cgroups (walk) and records their
// processes' sockets.
func (w *cgroupWatch) scan(walk bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if walk {
		for _, h := range w.hiers {
			n := 0
			_ = filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				if n++; n > maxCgroupDirs {
					w.capped = true
					return filepath.SkipAll
				}
				k := cgroupKey{h.version, p}
				if w.quotad[k] {
					return nil
				}
				if s, ok := readCgroupStat(h, p); ok {
					w.quotad[k] = true
					if !w.begun {
						w.first[k] = s
					}
				}
				return nil
			})
		}
	}
	tables := map[string]map[uint64]string{}
	for k := range w.quotad {
		for pid := range cgroupPIDs(k.dir) {
			socks := w.sockets(pid, tables)
			if len(socks) == 0 {
				continue
			}
			if w.procs[k] == nil {
				w.procs[k], w.socks[k] = map[int]doctor.CgroupProcess{}, map[string]bool{}
			}
			if w.procs[k][pid].Comm == "" {
				// Named while it runs: it may be gone by the end.
				w.procs[k][pid] = doctor.CgroupProcess{PID: pid, Comm: w.comm(pid), Threads: w.threads(pid)}
			}
			for _, s := range socks {
				w.socks[k][s] = true
			}
		}
	}
}

// cgroupPIDs lists the processes of a cgroup and its descendants (a
// parent's quota throttles them all).
func cgroupPIDs(dir string) map[int]bool {
	out := map[int]bool{}
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if n++; n > maxCgroupDirs {
			return filepath.SkipAll
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out[pid] = true
			}
		}
		return nil
	})
	return out
}

// sockets are the TCP sockets a process holds open, as "local peer", from
// its descriptors and its namespace's /proc/PID/net/tcp{,6} (read once per
// namespace and scan).
func (w *cgroupWatch) sockets(pid int, tables map[string]map[uint64]string) []string {
	base := filepath.Join(w.proc, strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(base, "fd"))
	if err != nil {
		return nil
	}
	var inodes []uint64
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(base, "fd", fd.Name()))
		if rest, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
				inodes = append(inodes, n)
			}
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	ns, _ := os.Readlink(filepath.Join(base, "ns", "net"))
	table, ok := tables[ns]
	if !ok || ns == "" {
		table = map[uint64]string{}
		for _, f := range []string{"tcp", "tcp6"} {
			if b, err := os.ReadFile(filepath.Join(base, "net", f)); err == nil {
				for k, v := range parseProcNetTCP(b) {
					table[k] = v
				}
			}
		}
		tables[ns] = table
	}
	var out []string
	for _, n := range inodes {
		if s, ok := table[n]; ok {
			out = append(out, s)
		}
	}
	return out
}

// parseProcNetTCP maps socket inodes to "local peer" from /proc/net/tcp or
// tcp6 (addresses in hex, in the kernel's byte order per 32-bit word).
// Listening sockets are left out: they move no bytes.
func parseProcNetTCP(b []byte) map[uint64]string {
	out := map[uint64]string{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] == "0A" {
			continue
		}
		local, err1 := procAddr(f[1])
		peer, err2 := procAddr(f[2])
		inode, err3 := strconv.ParseUint(f[9], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || inode == 0 {
			continue
		}
		out[inode] = local.String() + " " + peer.String()
	}
	return out
}

// procAddr reads "0100007F:1F90": the address as 32-bit words in host
// (little-endian) order, the port big-endian hex.
func procAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(a)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || len(raw)%4 != 0 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// finish stops the scans, reads the cgroups again and returns those whose
// processes owned sockets, throttling as the change since the start, with
// their quotas as limits.
func (w *cgroupWatch) finish() ([]doctor.CgroupCPU, []string) {
	if w.stop != nil {
		close(w.stop)
		<-w.done
	}
	w.scan(true)
	seconds := time.Since(w.start).Seconds()
	var notes []string
	if w.capped {
		notes = append(notes, fmt.Sprintf("cgroups: only the first %d cgroups of a hierarchy were read for CPU quotas", maxCgroupDirs))
	}
	var out []doctor.CgroupCPU
	for k, procs := range w.procs {
		h := w.hierOf(k)
		after, ok := readCgroupStat(h, k.dir)
		if !ok {
			notes = append(notes, fmt.Sprintf("cgroup %s: its CPU quota was lifted or the cgroup removed before the observation ended; its throttling is not known", k.dir))
			continue
		}
		before, seen := w.first[k]
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(k.dir, h.root), "/")
		c := doctor.CgroupCPU{Version: k.version, Path: rel, Dir: k.dir, QuotaUs: after.quotaUs, PeriodUs: after.periodUs,
			Periods: sub(after.periods, before.periods), Throttled: sub(after.throttled, before.throttled),
			ThrottledUs: sub(after.thrUs, before.thrUs), Seconds: seconds, Created: !seen}
		if after.usageKnown {
			u := sub(after.usageUs, before.usageUs)
			c.UsageUs = &u
		}
		c.Runtime, c.Container, c.Unit = doctor.CgroupOwner(rel)
		for _, p := range procs {
			c.Processes = append(c.Processes, p)
		}
		slices.SortFunc(c.Processes, func(a, b doctor.CgroupProcess) int { return a.PID - b.PID })
		for s := range w.socks[k] {
			c.Flows = append(c.Flows, s)
		}
		slices.Sort(c.Flows)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b doctor.CgroupCPU) int { return strings.Compare(a.Dir, b.Dir) })
	return out, notes
}

func (w *cgroupWatch) hierOf(k cgroupKey) cgroupHier {
	for _, h := range w.hiers {
		if h.version == k.version && strings.HasPrefix(k.dir, h.root) {
			return h
		}
	}
	return cgroupHier{version: k.version}
}

func (w *cgroupWatch) comm(pid int) string {
	b, err := os.ReadFile(filepath.Join(w.proc, strconv.Itoa(pid), "comm"))
	if err != nil {
		return fmt.Sprintf("pid %d", pid)
	}
	return strings.TrimSpace(string(b))
}

// threads counts a process's threads (/proc/PID/status), 0 where unknown.
func (w *cgroupWatch) threads(pid int) int {
	b, err := os.ReadFile(filepath.Join(w.proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// keepCgroupsOf keeps the cgroups whose sockets are among the observed
// flows (others' sockets are not this observation's), and their limits.
func keepCgroupsOf(ev *doctor.Evidence, cgs []doctor.CgroupCPU) {
	flows := map[string]bool{}
	for _, f := range ev.Flows {
		flows[netip.AddrPortFrom(f.Local.Addr().Unmap(), f.Local.Port()).String()+" "+netip.AddrPortFrom(f.Peer.Addr().Unmap(), f.Peer.Port()).String()] = true
	}
	for i := range cgs {
		if slices.ContainsFunc(cgs[i].Flows, func(s string) bool { return flows[s] }) {
			ev.CgroupCPU = append(ev.CgroupCPU, cgs[i])
			ev.Limits = append(ev.Limits, cgs[i].Limit())
		}
	}
}

// CPUCgroupRoot is where this host mounts the cpu controller: cgroup v2's
// unified hierarchy where it carries cpu, else v1's cpu hierarchy; version
// 0 where neither does.
func CPUCgroupRoot() (version int, root string) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, ""
	}
	h := cpuHierarchies(mi, "")
	if len(h) == 0 {
		return 0, ""
	}
	// v2 first: a hybrid host's v1 cpu hierarchy and a v2 one with cpu
	// cannot both exist, but a v2 mount without cpu is skipped above.
	slices.SortFunc(h, func(a, b cgroupHier) int { return b.version - a.version })
	return h[0].version, h[0].root
}
