package observe

import (
	"slices"
	"testing"
)

func TestRPSMasksAsLimits(t *testing.T) {
	text := []byte("/sys/class/net/lo/queues/rx-0/rps_cpus:0\n" +
		"/sys/class/net/veth0/queues/rx-0/rps_cpus:2\n" +
		"/sys/class/net/eth0/queues/rx-1/rps_cpus:00000003\n")
	masks := parseRPSMasks(text)
	if len(masks) != 2 || masks[0].dev != "veth0" || masks[0].queue != "rx-0" || !slices.Equal(masks[0].cpus, []int{1}) {
		t.Fatalf("masks %+v", masks)
	}
	// On 2 CPUs a mask of both restricts nothing.
	lims := rpsLimits("ns1", masks, 2)
	if len(lims) != 1 {
		t.Fatalf("limits %+v, want veth0's alone", lims)
	}
	l := lims[0]
	if l.Kind != KindRPSCPUs || l.Value != "CPU 1 (mask 2)" || l.Where.Object != "dev veth0 rx-0 rps_cpus" || l.Where.Netns != "ns1" ||
		!slices.Equal(l.Applies.CPUs, []int{1}) {
		t.Errorf("limit %+v", l)
	}
}

// A generic program is detached by xdpgeneric off: ip's "xdp off" would
// leave it attached.
func TestXDPLimitUndoByMode(t *testing.T) {
	for mode, want := range map[uint32]string{xdpAttachedDrv: "xdpdrv", xdpAttachedSkb: "xdpgeneric", xdpAttachedHw: "xdpoffload"} {
		l := xdpLimit("ns1", "veth0", 0, mode)
		if got := l.Undo[0].Text; got != "ip netns exec ns1 ip link set dev veth0 "+want+" off" {
			t.Errorf("mode %d: undo %q", mode, got)
		}
	}
	if l := xdpLimit("host", "eth0", 0, xdpAttachedDrv); l.Undo[0].Netns != "" {
		t.Errorf("the observer's own namespace needs no ip netns exec: %+v", l.Undo[0])
	}
}
