package observe

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// socketSettings keeps, for every TCP socket of the watched namespaces,
// the last reading of the settings tcp_info does not carry (the
// sock_limits iterator), and who owns the sockets whose settings were set
// by hand: the owner is looked up while the socket is open, since the
// process may be gone when the observation ends.
type socketSettings struct {
	r      *probe.SockLimitsReader
	mu     sync.Mutex
	last   map[sockKey]probe.SockSettings
	owners map[uint64]*finding.Owner
}

const sockSettingsSource = "BPF iterator iter/tcp (sock_limits)"

// openSocketSettings loads the iterator; nil and a note where it cannot.
func openSocketSettings() (*socketSettings, string) {
	r, err := probe.OpenSockLimits()
	if err != nil {
		return nil, "the sockets' own settings (window clamp, locked buffers, pacing cap, TCP_NOTSENT_LOWAT, cork, congestion control) were not read: " + err.Error()
	}
	return &socketSettings{r: r, last: map[sockKey]probe.SockSettings{}, owners: map[uint64]*finding.Owner{}}, ""
}

func (s *socketSettings) close() {
	if s != nil {
		s.r.Close()
	}
}

// read takes the settings of the sockets of the namespace the calling
// thread is in (the iterator walks the namespace it is opened in): call it
// inside watched.do.
func (s *socketSettings) read(netns string) error {
	got, err := s.r.Read()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range got {
		s.last[sockKey{netns, g.Local.String(), g.Peer.String()}] = g
		if _, ok := s.owners[g.Inode]; !ok && g.Inode != 0 && setByHand(g) {
			s.owners[g.Inode] = socketOwner(g.Inode)
		}
	}
	return nil
}

// setByHand says the application set one of the socket's settings.
func setByHand(g probe.SockSettings) bool {
	return clampSet(g) || g.RcvBufLocked || g.SndBufLocked || g.MaxPacingRate > 0 || g.NotSentLowat > 0 || g.Cork
}

// bufferWindow is the window the kernel offers from the socket's receive
// buffer (tcp_win_from_space): the buffer's scaling_ratio 256ths from 6.5,
// half of it before (tcp_adv_win_scale's default 1).
func bufferWindow(g probe.SockSettings) uint64 {
	if g.ScalingRatio > 0 {
		return uint64(g.RcvBuf) * uint64(g.ScalingRatio) / 256
	}
	return uint64(g.RcvBuf) / 2
}

// clampSet says the window clamp is not the kernel's own: the kernel keeps
// it at the window the buffer offers (autotuning moves both together), so
// one well below it was set (TCP_WINDOW_CLAMP, a route's window metric).
func clampSet(g probe.SockSettings) bool {
	return g.WindowClamp > 0 && uint64(g.WindowClamp)*4 < bufferWindow(g)*3
}

// socketOwner finds the process holding a socket by its inode among
// /proc/*/fd; nil if none is found (closed, or another PID namespace).
func socketOwner(ino uint64) *finding.Owner {
	want := fmt.Sprintf("socket:[%d]", ino)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join(p, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(p, "fd", fd.Name())); err == nil && l == want {
				pid, _ := strconv.Atoi(filepath.Base(p))
				comm, _ := os.ReadFile(filepath.Join(p, "comm"))
				return &finding.Owner{PID: pid, Comm: strings.TrimSpace(string(comm))}
			}
		}
	}
	return nil
}

// limits are the settings set by hand on the sockets of the flows that
// moved data, one Limit each, and the routes' metrics of those flows.
func (s *socketSettings) limits(ev *doctor.Evidence) []finding.Limit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []finding.Limit
	for _, f := range ev.Flows {
		g, ok := s.last[sockKey{f.Netns, f.Local.String(), f.Peer.String()}]
		if !ok {
			continue
		}
		out = append(out, socketLimits(f.Netns, g, s.owners[g.Inode], ev.NamespaceNamed(f.Netns))...)
	}
	return out
}

// socketLimits are one socket's settings set by hand, as limits.
func socketLimits(netns string, g probe.SockSettings, owner *finding.Owner, ns *doctor.Namespace) []finding.Limit {
	flow := g.Local.String() + " " + g.Peer.String()
	app := "the application"
	if owner != nil {
		app = owner.String()
	}
	mk := func(kind, value, arithmetic string, undo ...finding.Action) finding.Limit {
		return finding.Limit{Kind: kind, Value: value, Where: finding.Place{Layer: finding.LayerSocket, Netns: netns, Object: flow},
			SetBy: owner, Applies: finding.Scope{Flows: []string{flow}}, Undo: undo, Arithmetic: arithmetic, Source: sockSettingsSource}
	}
	var out []finding.Limit
	if clampSet(g) {
		out = append(out, mk("tcp_window_clamp", fmt.Sprintf("%d bytes", g.WindowClamp),
			fmt.Sprintf("the receive buffer (sk_rcvbuf %d bytes) would offer a window of %d bytes", g.RcvBuf, bufferWindow(g)),
			finding.Change("in %s: drop its setsockopt(TCP_WINDOW_CLAMP, %d)", app, g.WindowClamp)))
	}
	if g.RcvBufLocked {
		out = append(out, mk("so_rcvbuf", fmt.Sprintf("%d bytes (sk_rcvbuf %d: the kernel doubles what is asked)", g.RcvBuf/2, g.RcvBuf), "",
			finding.Change("in %s: drop its setsockopt(SO_RCVBUF, %d): an unset buffer is autotuned up to net.ipv4.tcp_rmem's maximum", app, g.RcvBuf/2)))
	}
	if g.SndBufLocked {
		out = append(out, mk("so_sndbuf", fmt.Sprintf("%d bytes (sk_sndbuf %d: the kernel doubles what is asked)", g.SndBuf/2, g.SndBuf), "",
			finding.Change("in %s: drop its setsockopt(SO_SNDBUF, %d): an unset buffer is autotuned up to net.ipv4.tcp_wmem's maximum", app, g.SndBuf/2)))
	}
	if g.MaxPacingRate > 0 {
		out = append(out, mk("so_max_pacing_rate", fmt.Sprintf("%d bytes/s", g.MaxPacingRate), "",
			finding.Change("in %s: drop its setsockopt(SO_MAX_PACING_RATE, %d)", app, g.MaxPacingRate)))
	}
	if g.NotSentLowat > 0 {
		out = append(out, mk("tcp_notsent_lowat", fmt.Sprintf("%d bytes", g.NotSentLowat), "",
			finding.Change("in %s: drop its setsockopt(TCP_NOTSENT_LOWAT, %d)", app, g.NotSentLowat)))
	}
	if g.Cork {
		out = append(out, mk("tcp_cork", "on", "", finding.Change("in %s: uncork (setsockopt(TCP_CORK, 0)) once a message is written", app)))
	}
	if def := nsSysctl(ns, "net.ipv4.tcp_congestion_control"); g.CongControl != "" && def != "" && g.CongControl != def {
		out = append(out, mk("tcp_congestion", g.CongControl, "net.ipv4.tcp_congestion_control is "+def,
			finding.Change("in %s: drop its setsockopt(TCP_CONGESTION, %q)", app, g.CongControl)))
	}
	return out
}

func nsSysctl(ns *doctor.Namespace, name string) string {
	if ns == nil {
		return ""
	}
	return ns.Sysctls[name]
}

// routeLimits are the metrics of the routes the flows of one namespace
// take to their peers (RTM_GETROUTE, then the FIB entry it resolved to),
// one Limit per metric and route, with the ip route command that sets the
// route again without it. Call it inside watched.do.
func routeLimits(netns string, flows []doctor.Flow) ([]finding.Limit, error) {
	var out []finding.Limit
	index := map[string]int{} // kind and route -> out
	for _, f := range flows {
		if f.Netns != netns || !f.Peer.Addr().IsValid() || f.Peer.Addr().IsLoopback() {
			continue
		}
		rt, err := fibRoute(f.Peer.Addr())
		if err != nil {
			return out, err
		}
		if rt == nil {
			continue
		}
		for _, m := range routeMetrics(rt) {
			key := m.kind + " " + routeText(rt, "")
			flow := f.Local.String() + " " + f.Peer.String()
			if i, ok := index[key]; ok {
				if !slices.Contains(out[i].Applies.Flows, flow) {
					out[i].Applies.Flows = append(out[i].Applies.Flows, flow)
				}
				continue
			}
			argv := []string{"ip"}
			if rt.Family == unix.AF_INET6 {
				argv = append(argv, "-6")
			}
			argv = append(append(argv, "route", "change"), routeArgv(rt, m.name)...)
			index[key] = len(out)
			out = append(out, finding.Limit{Kind: m.kind, Value: m.value,
				Where:   finding.Place{Layer: finding.LayerRoute, Netns: netns, Object: routeText(rt, "")},
				Applies: finding.Scope{Flows: []string{flow}}, Undo: []finding.Action{finding.Command(nsArg(netns), argv...)},
				Source: "netlink RTM_GETROUTE " + f.Peer.Addr().String()})
		}
	}
	return out, nil
}

// nsArg is the namespace an action runs in: none for the observer's own.
func nsArg(netns string) string {
	if netns == "" || netns == "host" || netns == "init" {
		return ""
	}
	return netns
}

// fibRoute is the routing table's entry the kernel uses to reach peer:
// RTM_GETROUTE names the table and device, the entry is the longest
// prefix there that holds peer. Its metrics are the entry's own.
func fibRoute(peer netip.Addr) (*netlink.Route, error) {
	got, err := netlink.RouteGet(net.IP(peer.AsSlice()))
	if err != nil {
		return nil, fmt.Errorf("looking up the route to %s: %w", peer, err)
	}
	if len(got) == 0 {
		return nil, nil
	}
	family := netlink.FAMILY_V4
	if peer.Is6() && !peer.Is4In6() {
		family = netlink.FAMILY_V6
	}
	table := got[0].Table
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing the routes of table %d: %w", table, err)
	}
	var best *netlink.Route
	bits := -1
	for i := range routes {
		r := &routes[i]
		if r.Type != unix.RTN_UNICAST || got[0].LinkIndex != 0 && r.LinkIndex != got[0].LinkIndex && r.LinkIndex != 0 {
			continue
		}
		n := 0
		if r.Dst != nil {
			p, ok := netip.AddrFromSlice(r.Dst.IP)
			ones, _ := r.Dst.Mask.Size()
			if !ok || !netip.PrefixFrom(p.Unmap(), ones).Contains(peer.Unmap()) {
				continue
			}
			n = ones
		}
		if n > bits || n == bits && best != nil && r.Priority < best.Priority {
			best, bits = r, n
		}
	}
	return best, nil
}

// routeMetric is one metric set on a route.
type routeMetric struct {
	kind, name, value string
}

// routeMetrics are the metrics the provenance reads: those that
// shape a TCP flow (window, MTU lock, advmss, initial windows, minimum
// RTO, congestion control, quickack).
func routeMetrics(r *netlink.Route) []routeMetric {
	var out []routeMetric
	add := func(ok bool, kind, name, value string) {
		if ok {
			out = append(out, routeMetric{kind, name, value})
		}
	}
	add(r.Window > 0, "route_window", "window", fmt.Sprintf("%d bytes", r.Window))
	add(r.MTULock, "route_mtu_lock", "mtu", fmt.Sprintf("mtu lock %d", r.MTU))
	add(r.AdvMSS > 0, "route_advmss", "advmss", fmt.Sprintf("%d bytes", r.AdvMSS))
	add(r.InitCwnd > 0, "route_initcwnd", "initcwnd", fmt.Sprintf("%d segments", r.InitCwnd))
	add(r.InitRwnd > 0, "route_initrwnd", "initrwnd", fmt.Sprintf("%d segments", r.InitRwnd))
	add(r.RtoMin > 0, "route_rto_min", "rto_min", fmt.Sprintf("%d ms", r.RtoMin))
	add(r.Congctl != "", "route_congctl", "congctl", r.Congctl)
	add(r.QuickACK > 0, "route_quickack", "quickack", fmt.Sprint(r.QuickACK))
	return out
}

// routeText is the route as ip route prints it, without the metric named drop.
func routeText(r *netlink.Route, drop string) string {
	return strings.Join(routeArgv(r, drop), " ")
}

// routeArgv is the route's selector and attributes as ip route takes
// them, with every metric but drop: ip route change replaces the entry
// with exactly what it is given.
func routeArgv(r *netlink.Route, drop string) []string {
	var a []string
	if r.Dst == nil {
		a = append(a, "default")
	} else {
		a = append(a, r.Dst.String())
	}
	if r.Gw != nil {
		a = append(a, "via", r.Gw.String())
	}
	if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
		a = append(a, "dev", l.Attrs().Name)
	}
	if r.Table != 0 && r.Table != unix.RT_TABLE_MAIN {
		a = append(a, "table", fmt.Sprint(r.Table))
	}
	if r.Protocol != 0 && r.Protocol != unix.RTPROT_BOOT {
		a = append(a, "proto", r.Protocol.String())
	}
	if r.Scope != netlink.SCOPE_UNIVERSE {
		a = append(a, "scope", r.Scope.String())
	}
	if r.Src != nil {
		a = append(a, "src", r.Src.String())
	}
	if r.Priority != 0 {
		a = append(a, "metric", fmt.Sprint(r.Priority))
	}
	if r.MTU > 0 && drop != "mtu" {
		if r.MTULock {
			a = append(a, "mtu", "lock", fmt.Sprint(r.MTU))
		} else {
			a = append(a, "mtu", fmt.Sprint(r.MTU))
		}
	}
	for _, m := range []struct {
		name string
		v    int
	}{{"window", r.Window}, {"ssthresh", r.Ssthresh}, {"cwnd", r.Cwnd}, {"advmss", r.AdvMSS},
		{"reordering", r.Reordering}, {"hoplimit", r.Hoplimit}, {"initcwnd", r.InitCwnd}, {"initrwnd", r.InitRwnd}, {"quickack", r.QuickACK}} {
		if m.v > 0 && m.name != drop {
			a = append(a, m.name, fmt.Sprint(m.v))
		}
	}
	if r.RtoMin > 0 && drop != "rto_min" {
		if r.RtoMinLock {
			a = append(a, "rto_min", "lock", fmt.Sprintf("%dms", r.RtoMin))
		} else {
			a = append(a, "rto_min", fmt.Sprintf("%dms", r.RtoMin))
		}
	}
	if r.Congctl != "" && drop != "congctl" {
		a = append(a, "congctl", r.Congctl)
	}
	return a
}

// settingsWatch reads the sockets' settings of the watched namespaces
// while the workload runs (sockets may close before it ends), and the
// routes of the flows at the end.
type settingsWatch struct {
	s      *socketSettings
	udp    *udpQueues
	spaces []*watched
	note   string
	stopc  chan struct{}
	done   chan struct{}
	once   sync.Once
}

// settingsEvery is how often the sockets' settings are read: an
// application sets them at once after connect or accept.
const settingsEvery = 250 * time.Millisecond

// startSettingsWatch starts reading the sockets' settings where this
// process may load BPF (privileged), and the routes' metrics in any case.
func startSettingsWatch(spaces []*watched, privileged bool) *settingsWatch {
	sw := &settingsWatch{spaces: spaces, stopc: make(chan struct{}), done: make(chan struct{})}
	if privileged {
		sw.s, sw.note = openSocketSettings()
		sw.udp = newUDPQueues()
	}
	if sw.s == nil {
		close(sw.done)
		return sw
	}
	go func() {
		defer close(sw.done)
		t := time.NewTicker(settingsEvery)
		defer t.Stop()
		for {
			sw.readAll()
			select {
			case <-sw.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return sw
}

func (sw *settingsWatch) readAll() {
	for _, w := range sw.spaces {
		if !w.gone {
			// A namespace that cannot be read now is read again at the next tick.
			_ = w.do(func() error { return errors.Join(sw.s.read(w.name), sw.udp.sample(w.name)) })
		}
	}
}

// stop ends the reading; it may be called more than once.
func (sw *settingsWatch) stop() {
	sw.once.Do(func() {
		close(sw.stopc)
		<-sw.done
		sw.s.close()
	})
}

// finish takes a last reading, stops, and returns the limits of the
// evidence's flows: their sockets' settings set by hand and their routes'
// metrics, and the receive buffers set on UDP sockets that refused
// datagrams.
func (sw *settingsWatch) finish(ev *doctor.Evidence, notes *[]string) []finding.Limit {
	var out []finding.Limit
	if sw.s != nil {
		select {
		case <-sw.done:
		default:
			sw.readAll()
		}
		out = sw.s.limits(ev)
	}
	sw.stop()
	if sw.note != "" {
		*notes = append(*notes, sw.note)
	}
	for _, w := range sw.spaces {
		if w.gone {
			continue
		}
		var got []finding.Limit
		err := w.do(func() (err error) { got, err = routeLimits(w.name, ev.Flows); return err })
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: the flows' route metrics were not read: %v", w.name, err))
		}
		out = append(out, got...)
		var refused []doctor.UDPSocket
		err = w.do(func() (err error) { refused, got, err = udpBufferLimits(w.name, sw.udp); return err })
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("netns %s: the UDP sockets' receive buffers were not read: %v", w.name, err))
		}
		ev.UDPSockets = append(ev.UDPSockets, refused...)
		out = append(out, got...)
	}
	return out
}
