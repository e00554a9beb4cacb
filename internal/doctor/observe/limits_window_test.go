package observe

import (
	"net"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The undo command sets the route again with every attribute and metric
// but the one it lifts.
func TestRouteArgvDropsOneMetric(t *testing.T) {
	_, dst, _ := net.ParseCIDR("10.0.0.0/24")
	r := &netlink.Route{Dst: dst, Protocol: unix.RTPROT_KERNEL, Scope: netlink.SCOPE_LINK, Src: net.ParseIP("10.0.0.2"),
		Window: 8192, MTU: 1400, MTULock: true, InitCwnd: 20, Table: unix.RT_TABLE_MAIN}
	if got, want := routeText(r, "window"), "10.0.0.0/24 proto kernel scope link src 10.0.0.2 mtu lock 1400 initcwnd 20"; got != want {
		t.Errorf("without window: %q, want %q", got, want)
	}
	if got := routeText(r, "mtu"); strings.Contains(got, "mtu") || !strings.Contains(got, "window 8192") {
		t.Errorf("without mtu: %q", got)
	}
	kinds := ""
	for _, m := range routeMetrics(r) {
		kinds += m.kind + " "
	}
	if kinds != "route_window route_mtu_lock route_initcwnd " {
		t.Errorf("metrics %q", kinds)
	}
}

// A clamp is the application's (or a route's) when it is well below the
// window the buffer offers; the kernel keeps its own equal to it.
func TestClampSet(t *testing.T) {
	kernel := probe.SockSettings{WindowClamp: 7503872, RcvBuf: 8388608, ScalingRatio: 229}
	set := probe.SockSettings{WindowClamp: 8192, RcvBuf: 8388608, ScalingRatio: 229}
	old := probe.SockSettings{WindowClamp: 65536, RcvBuf: 131072} // before 6.5: half the buffer
	if clampSet(kernel) || !clampSet(set) || clampSet(old) {
		t.Errorf("clampSet: kernel's %v, set %v, pre-6.5 kernel's %v", clampSet(kernel), clampSet(set), clampSet(old))
	}
	ls := socketLimits("rx", set, nil, nil)
	if len(ls) != 1 || ls[0].Kind != "tcp_window_clamp" || !strings.Contains(ls[0].Undo[0].Text, "TCP_WINDOW_CLAMP, 8192") {
		t.Errorf("limits %+v", ls)
	}
}
