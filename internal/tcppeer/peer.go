package tcppeer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
)

// Default addresses: the namespace is the peer's alone, so every run can
// use the same ones.
var (
	DefaultKernelAddr = netip.MustParsePrefix("10.201.0.1/24")
	DefaultPeerAddr   = netip.MustParseAddr("10.201.0.2")
)

// DefaultSysctls are written in every peer namespace before Options.Sysctls.
// IPv6 is off so the tun carries no neighbour discovery or MLD; the TCP
// features are the kernel's defaults, written so a script states what it
// depends on; metrics are not saved, so one connection's RTT and ssthresh
// do not seed the next to the same peer address.
func DefaultSysctls() map[string]string {
	return map[string]string{
		"net.ipv6.conf.all.disable_ipv6":     "1",
		"net.ipv6.conf.default.disable_ipv6": "1",
		"net.ipv4.tcp_timestamps":            "1",
		"net.ipv4.tcp_sack":                  "1",
		"net.ipv4.tcp_window_scaling":        "1",
		"net.ipv4.tcp_ecn":                   "2",
		"net.ipv4.tcp_no_metrics_save":       "1",
	}
}

// Options configure Open; the zero value takes every default.
type Options struct {
	KernelAddr netip.Prefix // the kernel's address on the tun; DefaultKernelAddr if unset
	PeerAddr   netip.Addr   // the scripted peer's address; DefaultPeerAddr if unset
	MTU        int          // of the tun; 1500 if 0
	// Sysctls are written inside the namespace after DefaultSysctls, so
	// they override them. Only net.* keys are accepted: the others are not
	// per namespace and would change the host.
	Sysctls map[string]string
}

// Peer is a scripted TCP peer behind a tun device in its own namespace.
// Everything the kernel sends to the peer's address comes out of the tun,
// and everything the peer writes enters the kernel as if received.
type Peer struct {
	ns         *host.Netns
	dev        string
	tun        *os.File
	kernelAddr netip.Prefix
	peerAddr   netip.Addr
	start      time.Time
	done       chan struct{} // closed when the reader stops

	mu      sync.Mutex
	log     []*Segment    // both directions, in order
	notify  chan struct{} // closed and replaced on every packet
	readErr error         // why the reader stopped
	cur     int           // the peer-level expectation cursor into log
	sockets []*Socket
	closed  bool
	claimed map[tuple]bool // connections a Conn owns
	ipID    uint16
	pingSeq uint16
	port    uint16 // last port Connect used

	closeOnce sync.Once
	closeErr  error
}

// errClosed is the reader's error once Close stopped it.
var errClosed = errors.New("peer closed")

// ErrTimeout is returned (wrapped) when nothing matching arrived in time.
var ErrTimeout = errors.New("timed out")

var peerCount atomic.Uint32

// Open creates the namespace, the tun device and its addresses, and starts
// reading. On error, whatever was created is removed.
func Open(opts Options) (p *Peer, err error) {
	if !opts.KernelAddr.IsValid() {
		opts.KernelAddr = DefaultKernelAddr
	}
	if !opts.PeerAddr.IsValid() {
		opts.PeerAddr = DefaultPeerAddr
	}
	if opts.MTU == 0 {
		opts.MTU = 1500
	}
	if !opts.KernelAddr.Addr().Is4() || !opts.PeerAddr.Is4() {
		return nil, fmt.Errorf("opening a tcp peer: addresses %s and %s must be IPv4", opts.KernelAddr, opts.PeerAddr)
	}
	for k := range opts.Sysctls {
		if !strings.HasPrefix(k, "net.") {
			return nil, fmt.Errorf("opening a tcp peer: sysctl %s is not per network namespace", k)
		}
	}
	id := fmt.Sprintf("%d-%d", os.Getpid(), peerCount.Add(1))
	ns, err := host.NewNetns("skbtrace-" + id + "-peer")
	if err != nil {
		return nil, err
	}
	p = &Peer{ns: ns, dev: "skbp" + short(id), kernelAddr: opts.KernelAddr, peerAddr: opts.PeerAddr,
		start: time.Now(), done: make(chan struct{}), notify: make(chan struct{}), claimed: map[tuple]bool{}, port: 40000}
	defer func() {
		if err != nil {
			if p.tun == nil {
				close(p.done) // no reader to wait for
			}
			p.Close()
			p = nil
		}
	}()
	// Sysctls first: the tun takes net.ipv6.conf.default.* when created.
	if err = p.ns.Do(func() error { return writeSysctls(opts.Sysctls) }); err != nil {
		return p, fmt.Errorf("setting sysctls in %s: %w", ns.Name, err)
	}
	if err = p.ns.Do(p.openTun); err != nil {
		return p, fmt.Errorf("creating tun device in %s: %w", ns.Name, err)
	}
	go p.read()
	if err = p.configure(opts.MTU); err != nil {
		return p, fmt.Errorf("configuring %s in %s: %w", p.dev, ns.Name, err)
	}
	return p, nil
}

// short keeps interface names within the kernel's 15 characters.
func short(id string) string {
	if len(id) > 11 {
		return id[len(id)-11:]
	}
	return id
}

// writeSysctls writes the defaults, then the caller's, as the calling
// thread's namespace sees them. A default the kernel lacks (IPv6 disabled
// at boot) is skipped; a caller's is an error.
func writeSysctls(extra map[string]string) error {
	all := DefaultSysctls()
	maps.Copy(all, extra)
	for _, k := range slices.Sorted(maps.Keys(all)) {
		path := filepath.Join("/proc/sys", strings.ReplaceAll(k, ".", "/"))
		err := os.WriteFile(path, []byte(all[k]), 0)
		if _, asked := extra[k]; errors.Is(err, os.ErrNotExist) && !asked {
			continue
		}
		if err != nil {
			return fmt.Errorf("writing %s=%s: %w", k, all[k], err)
		}
	}
	return nil
}

// openTun runs inside the namespace: a tun device belongs to the namespace
// /dev/net/tun was opened in.
func (p *Peer) openTun() error {
	// Non-blocking, so the runtime poller serves reads and Close ends them.
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(p.dev)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("creating %s: %w", p.dev, err)
	}
	p.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
	return nil
}

func (p *Peer) configure(mtu int) error {
	h, err := netlink.NewHandleAt(p.ns.Handle(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	tun, err := h.LinkByName(p.dev)
	if err != nil {
		return fmt.Errorf("finding the device: %w", err)
	}
	if err := h.LinkSetMTU(tun, mtu); err != nil {
		return fmt.Errorf("setting MTU %d: %w", mtu, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.kernelAddr.Addr().AsSlice(), Mask: net.CIDRMask(p.kernelAddr.Bits(), 32)}}
	if err := h.AddrAdd(tun, addr); err != nil {
		return fmt.Errorf("adding %s: %w", p.kernelAddr, err)
	}
	if err := h.LinkSetUp(tun); err != nil {
		return fmt.Errorf("bringing it up: %w", err)
	}
	// A host route, so the peer may sit outside the kernel's prefix.
	route := &netlink.Route{LinkIndex: tun.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: p.peerAddr.AsSlice(), Mask: net.CIDRMask(32, 32)}, Src: p.kernelAddr.Addr().AsSlice()}
	if err := h.RouteAdd(route); err != nil {
		return fmt.Errorf("routing %s: %w", p.peerAddr, err)
	}
	return nil
}

// read records every packet the kernel sends through the tun until Close.
func (p *Peer) read() {
	defer close(p.done)
	buf := make([]byte, 1<<16)
	for {
		n, err := p.tun.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				err = errClosed
			} else {
				err = fmt.Errorf("reading %s: %w", p.dev, err)
			}
			p.mu.Lock()
			p.readErr = err
			p.mu.Unlock()
			return
		}
		s := parse(append([]byte(nil), buf[:n]...))
		s.At = time.Now()
		p.mu.Lock()
		p.record(s)
		p.mu.Unlock()
	}
}

// record appends to the log and wakes the waiters; p.mu must be held.
func (p *Peer) record(s *Segment) {
	p.log = append(p.log, s)
	close(p.notify)
	p.notify = make(chan struct{})
}

// Close closes the kernel sockets opened through the peer and the tun,
// then deletes the namespace (its devices and routes go with it). The
// sockets go first: an open socket would keep the namespace alive unseen.
func (p *Peer) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		p.mu.Lock()
		sockets := p.sockets
		p.sockets, p.closed = nil, true
		p.mu.Unlock()
		for _, s := range sockets {
			errs = append(errs, s.Close())
		}
		if p.tun != nil {
			errs = append(errs, p.tun.Close())
		}
		<-p.done
		errs = append(errs, p.ns.Delete())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// NS is the peer's namespace, for sockets and counters of the kernel side.
func (p *Peer) NS() *host.Netns { return p.ns }

// Name is the namespace's name (under /run/netns).
func (p *Peer) Name() string { return p.ns.Name }

// Dev is the tun device's name.
func (p *Peer) Dev() string { return p.dev }

// KernelAddr is the kernel side's address.
func (p *Peer) KernelAddr() netip.Addr { return p.kernelAddr.Addr() }

// PeerAddr is the scripted peer's address.
func (p *Peer) PeerAddr() netip.Addr { return p.peerAddr }

// Counters reads the namespace's /proc/net/snmp and /proc/net/netstat,
// keyed like "Tcp.OutRsts" and "TcpExt.TCPAbortOnData".
func (p *Peer) Counters() (host.Counters, error) {
	var c host.Counters
	err := p.ns.Do(func() (err error) {
		c, err = host.ReadCounters()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading counters in %s: %w", p.ns.Name, err)
	}
	return c, nil
}

// Write sends a TCP segment from the peer into the kernel. Zero addresses
// are the peer's and the kernel's; the checksums are computed.
func (p *Peer) Write(s *Segment) error {
	if !s.Src.IsValid() {
		s.Src = p.peerAddr
	}
	if !s.Dst.IsValid() {
		s.Dst = p.kernelAddr.Addr()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ipID++
	pkt, err := s.marshal(p.ipID)
	if err != nil {
		return fmt.Errorf("writing to %s: %w", p.dev, err)
	}
	return p.writeLocked(pkt)
}

// WriteRaw sends any IP packet into the kernel as it is.
func (p *Peer) WriteRaw(pkt []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writeLocked(pkt)
}

// writeLocked holds p.mu across the write: the kernel processes the packet
// inside write(2) and may answer at once, and the answer must not be
// logged before what caused it.
func (p *Peer) writeLocked(pkt []byte) error {
	s := parse(pkt)
	s.At, s.FromPeer = time.Now(), true
	if _, err := p.tun.Write(pkt); err != nil {
		return fmt.Errorf("writing to %s: %w", p.dev, err)
	}
	p.record(s)
	return nil
}

// Flush waits until every packet the kernel queued towards the peer before
// the call has been read, so a script can count what the kernel sent up
// to a counter reading. It pings the kernel: the echo reply queues behind
// them. (It is recorded, and counted in the Icmp counters, like any packet.)
func (p *Peer) Flush(timeout time.Duration) error {
	p.mu.Lock()
	p.pingSeq++
	seq, from := p.pingSeq, len(p.log)
	p.mu.Unlock()
	if err := p.WriteRaw(icmpEcho(p.peerAddr, p.kernelAddr.Addr(), seq)); err != nil {
		return err
	}
	if _, err := p.await(&from, timeout, func(s *Segment) bool { return isEchoReply(s, seq) }); err != nil {
		return fmt.Errorf("flushing %s: %w", p.dev, err)
	}
	return nil
}

// pingID marks the peer's echo requests.
const pingID = 0x5eed

// icmpEcho is an IPv4 ICMP echo request.
func icmpEcho(src, dst netip.Addr, seq uint16) []byte {
	m := []byte{8, 0, 0, 0, pingID >> 8, pingID & 0xff, byte(seq >> 8), byte(seq)}
	binary.BigEndian.PutUint16(m[2:], ^fold(sum(m)))
	return append(ipv4Header(src, dst, ProtoICMP, len(m), 0, 0, 0), m...)
}

func isEchoReply(s *Segment, seq uint16) bool {
	if s.Version != 4 || s.Protocol != ProtoICMP {
		return false
	}
	m := s.Raw[int(s.Raw[0]&0xf)*4:]
	return len(m) >= 8 && m[0] == 0 && binary.BigEndian.Uint16(m[4:]) == pingID && binary.BigEndian.Uint16(m[6:]) == seq
}

// Received is every packet the kernel sent so far, in order, TCP or not.
func (p *Peer) Received() []*Segment {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Segment
	for _, s := range p.log {
		if !s.FromPeer {
			out = append(out, s)
		}
	}
	return out
}

// Dump prints both directions in order, with times since Open, for a
// failing test's log.
func (p *Peer) Dump() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, s := range p.log {
		who := "kernel"
		if s.FromPeer {
			who = "peer  "
		}
		fmt.Fprintf(&b, "%10.6f %s %s\n", s.At.Sub(p.start).Seconds(), who, s)
	}
	return b.String()
}

// await returns the first packet the kernel sent, at or after *cur, that
// match accepts, and moves *cur past it: packets passed over are not seen
// again through the same cursor.
func (p *Peer) await(cur *int, timeout time.Duration, match func(*Segment) bool) (*Segment, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		pending := p.log[*cur:] // the log only grows: safe to read unlocked
		notify, readErr := p.notify, p.readErr
		p.mu.Unlock()
		// match runs unlocked: it may call back into the peer.
		for _, s := range pending {
			*cur++
			if !s.FromPeer && match(s) {
				return s, nil
			}
		}
		if readErr != nil {
			return nil, readErr
		}
		select {
		case <-notify:
		case <-p.done:
		case <-timer.C:
			return nil, fmt.Errorf("no matching packet from the kernel: %w after %v", ErrTimeout, timeout)
		}
	}
}

// ExpectPacket returns the next packet the kernel sends that match
// accepts, TCP or not.
func (p *Peer) ExpectPacket(timeout time.Duration, match func(*Segment) bool) (*Segment, error) {
	return p.await(&p.cur, timeout, match)
}

// Expect returns the next TCP segment the kernel sends that match accepts;
// other packets are passed over.
func (p *Peer) Expect(timeout time.Duration, match func(*Segment) bool) (*Segment, error) {
	return p.await(&p.cur, timeout, func(s *Segment) bool { return s.tcp && match(s) })
}

// ExpectSYN returns the next SYN (without ACK) the kernel sends.
func (p *Peer) ExpectSYN(timeout time.Duration) (*Segment, error) {
	return p.Expect(timeout, func(s *Segment) bool { return s.Flags&(SYN|ACK) == SYN })
}

// ExpectFlags returns the next segment carrying all of flags (and maybe others).
func (p *Peer) ExpectFlags(timeout time.Duration, flags Flags) (*Segment, error) {
	return p.Expect(timeout, func(s *Segment) bool { return s.Flags&flags == flags })
}

// ExpectData returns the next segment with payload.
func (p *Peer) ExpectData(timeout time.Duration) (*Segment, error) {
	return p.Expect(timeout, func(s *Segment) bool { return len(s.Payload) > 0 })
}
