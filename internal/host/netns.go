package host

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDirs are where iproute2 keeps named namespaces.
var NetnsDirs = []string{"/run/netns", "/var/run/netns"}

// Names skbtrace gives to unnamed namespaces it can identify.
const (
	InitNetnsName = "init" // PID 1's
	SelfNetnsName = "host" // the recorder's own, when it is not PID 1's or that cannot be read
)

// NetnsResolver names namespace inodes; it rescans the named namespaces when
// it meets an inode it has not seen, so namespaces created during a
// recording are named too.
type NetnsResolver struct {
	names map[uint32]string
}

// NewNetnsResolver scans the current namespaces.
func NewNetnsResolver() *NetnsResolver {
	r := &NetnsResolver{names: map[uint32]string{}}
	r.scan()
	return r
}

func (r *NetnsResolver) scan() {
	if ino, err := inode("/proc/self/ns/net"); err == nil {
		r.names[ino] = SelfNetnsName
	}
	if ino, err := inode("/proc/1/ns/net"); err == nil {
		r.names[ino] = InitNetnsName
	}
	for _, dir := range NetnsDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if ino, err := inode(filepath.Join(dir, e.Name())); err == nil {
				r.names[ino] = e.Name()
			}
		}
	}
}

// Name returns the name of a namespace, or "" if it has none.
func (r *NetnsResolver) Name(ino uint32) string {
	if n, ok := r.names[ino]; ok {
		return n
	}
	r.scan()
	if _, ok := r.names[ino]; !ok {
		r.names[ino] = "" // unnamed: do not rescan for it again
	}
	return r.names[ino]
}

// LookupNetns resolves a namespace given as a name (iproute2's, "init" or
// "host") or as an inode number.
func LookupNetns(s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	switch s {
	case InitNetnsName:
		return inode("/proc/1/ns/net")
	case SelfNetnsName:
		return inode("/proc/self/ns/net")
	}
	for _, dir := range NetnsDirs {
		if ino, err := inode(filepath.Join(dir, s)); err == nil {
			return ino, nil
		}
	}
	return 0, fmt.Errorf("no network namespace named %q (not in %s)", s, NetnsDirs[0])
}

func inode(path string) (uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return uint32(st.Ino), nil
}

// DeviceExists says whether a network device of that name exists in this
// process's namespace or in any named one.
func DeviceExists(name string) bool {
	if _, err := netlink.LinkByName(name); err == nil {
		return true
	}
	for _, dir := range NetnsDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			ns, err := OpenNetns(e.Name())
			if err != nil {
				continue
			}
			h, err := netlink.NewHandleAt(ns.Handle(), unix.NETLINK_ROUTE)
			if err == nil {
				_, lerr := h.LinkByName(name)
				h.Close()
				if lerr == nil {
					ns.Close()
					return true
				}
			}
			ns.Close()
		}
	}
	return false
}

// NamedNetns lists the named namespaces (iproute2's), each once.
func NamedNetns() []string {
	var out []string
	seen := map[string]bool{}
	for _, dir := range NetnsDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}

// netnsPath finds a file that opens the namespace given as LookupNetns takes
// it: a named namespace, init, self, or an inode held by a named namespace or
// a process.
func netnsPath(s string) (string, error) {
	ino, err := LookupNetns(s)
	if err != nil {
		return "", err
	}
	candidates := []string{"/proc/self/ns/net", "/proc/1/ns/net"}
	for _, dir := range NetnsDirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			candidates = append(candidates, filepath.Join(dir, e.Name()))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, path := range append(candidates, procs...) {
		if i, err := inode(path); err == nil && i == ino {
			return path, nil
		}
	}
	return "", fmt.Errorf("no file opens network namespace %d", ino)
}

// NetnsAddrs lists the addresses of a namespace's interfaces, loopback
// addresses left out (every namespace has them, so they name none).
func NetnsAddrs(s string) ([]netip.Addr, error) {
	path, err := netnsPath(s)
	if err != nil {
		return nil, err
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", s, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in namespace %s: %w", s, err)
	}
	defer h.Close()
	list, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses in namespace %s: %w", s, err)
	}
	var out []netip.Addr
	for _, a := range list {
		if p, ok := netipPrefix(a); ok && !p.Addr().IsLoopback() {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}
