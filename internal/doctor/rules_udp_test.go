package doctor

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// A python3 UDP receiver that set SO_RCVBUF 4096 and reads with pauses
// (a run by hand, 2026-11-28): its full buffer refused 480,000 datagrams.
// With its queue full at every reading while the workload ran, its reader
// falls behind the sender and is named first, the buffer it set the step
// after (the default buffer delivered 16 % more, not all). With its queue
// found empty at times, or not read, the buffer is the limit. Either way
// the process and its call are named, not the generic sysctl advice.
func TestUDPLossNamesTheReaderOrTheReceiveBufferItSet(t *testing.T) {
	for _, c := range []struct {
		name               string
		reads, empty, full int
		kind               string
	}{
		{"as recorded: full at 12 of 12 readings", -1, 0, 0, KindReadPace},
		{"queue always full", 8, 0, 8, KindReadPace},
		{"queue empty at times", 8, 5, 2, "so_rcvbuf"},
		{"queue not read", 0, 0, 0, "so_rcvbuf"},
	} {
		ev := load(t, "sock/udp-rcvbuf-set.json")
		if c.reads >= 0 {
			ev.UDPSockets = nil
		}
		for _, d := range ev.Drops {
			if d.Reason == "SOCKET_RCVBUFF" && c.reads >= 0 {
				ev.UDPSockets = append(ev.UDPSockets, UDPSocket{Netns: ev.deviceNetns(d.Dev), Local: netip.AddrPortFrom(netip.IPv4Unspecified(), d.Dst.Port()),
					RcvBuf: 8192, Drops: uint32(d.Count), QueueReads: c.reads, QueueEmpty: c.empty, QueueFull: c.full})
			}
		}
		f := findingNamed(t, Diagnose(ev), "packet-loss")
		if f.Limit == nil || f.Limit.Kind != c.kind || f.Limit.SetBy == nil || f.Limit.SetBy.Comm != "python3" ||
			!strings.HasPrefix(f.Limit.Where.Object, "udp ") {
			t.Fatalf("%s: limit %+v, want %s of the UDP socket, python3's", c.name, f.Limit, c.kind)
		}
		r := strings.Join(f.Remedy, "\n")
		if !strings.HasPrefix(f.Remedy[0], "in python3[") || !strings.Contains(r, "SO_RCVBUF, 4096") {
			t.Errorf("%s: remedy %q", c.name, f.Remedy)
		}
		// 465,039 refused and 102,353 read in its namespace: 82 %.
		if f.Impact < 0.8 || f.Impact > 0.84 {
			t.Errorf("%s: impact %.2f %q, want the refused share of the datagrams", c.name, f.Impact, f.ImpactText)
		}
		if strings.Contains(r, "raise net.core.rmem_max and the application's SO_RCVBUF") {
			t.Errorf("%s: remedy %q keeps the generic advice", c.name, f.Remedy)
		}
	}
}

// A reader slower than its sender behind the default buffer (the common
// case: nobody set SO_RCVBUF) is named with its process from the socket
// the observer found refusing datagrams; with its queue empty at times the
// loss keeps the generic advice, as nothing set a buffer to undo.
func TestUDPSlowReaderBehindTheDefaultBufferIsNamed(t *testing.T) {
	for _, c := range []struct {
		name               string
		reads, empty, full int
		reader             bool
	}{
		{"queue always full", 8, 0, 8, true},
		{"queue empty at times", 8, 5, 2, false},
	} {
		ev := load(t, "sock/udp-rcvbuf-set.json")
		ev.UDPSockets, ev.Limits = nil, slices.DeleteFunc(ev.Limits, func(l finding.Limit) bool { return l.Kind == "so_rcvbuf" })
		owner := &finding.Owner{PID: 4242, Comm: "python3"}
		for _, d := range ev.Drops {
			if d.Reason == "SOCKET_RCVBUFF" {
				ev.UDPSockets = append(ev.UDPSockets, UDPSocket{Netns: ev.deviceNetns(d.Dev), Local: netip.AddrPortFrom(netip.IPv4Unspecified(), d.Dst.Port()),
					RcvBuf: 212992, Drops: uint32(d.Count), QueueReads: c.reads, QueueEmpty: c.empty, QueueFull: c.full, Owner: owner})
			}
		}
		f := findingNamed(t, Diagnose(ev), "packet-loss")
		if !c.reader {
			if f.Limit != nil {
				t.Errorf("%s: limit %+v, want none: nothing was set", c.name, f.Limit)
			}
			continue
		}
		if f.Limit == nil || f.Limit.Kind != KindReadPace || f.Limit.SetBy != owner || !strings.HasPrefix(f.Limit.Where.Object, "udp 0.0.0.0:") {
			t.Fatalf("%s: limit %+v, want the reader of the UDP socket, python3's", c.name, f.Limit)
		}
		if len(f.Limit.Undo) != 1 || !strings.HasPrefix(f.Remedy[0], "in python3[4242]: read faster") {
			t.Errorf("%s: remedy %q, want the reader's alone", c.name, f.Remedy)
		}
		if f.Impact < 0.8 || f.Impact > 0.84 {
			t.Errorf("%s: impact %.2f %q, want the refused share of the datagrams", c.name, f.Impact, f.ImpactText)
		}
	}
}
