package doctor

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// lossByUDPBuffer names the receive buffer an application set on a UDP
// socket as the limit of a loss whose first drops are that socket's full
// buffer (SOCKET_RCVBUFF): the datagrams to its address and port, in the
// namespace of the device they arrived on.
func lossByUDPBuffer(ev *Evidence, drops []Drop, f *finding.Finding) {
	if len(drops) == 0 || drops[0].Reason != "SOCKET_RCVBUFF" || !strings.HasSuffix(drops[0].Protocol, "/udp") {
		return
	}
	d := drops[0]
	netns := ev.deviceNetns(d.Dev)
	lim, q := udpBufferOf(ev, netns, d.Dst), ev.udpSocketOf(netns, d.Dst)
	if lim == nil && q == nil {
		return
	}
	rest := slicesWithout(f.Remedy, dropRemedies["SOCKET_RCVBUFF"])
	// What the loss costs is the share of the datagrams that reached the
	// namespace that it refused: the devices' packet counts, the estimate's
	// base elsewhere, count every hop twice (33 % estimated where the lab's
	// receiver lost 66 %).
	if ns := ev.NamespaceNamed(netns); ns != nil {
		refused, read := ns.Counters["Udp.RcvbufErrors"], ns.Counters["Udp.InDatagrams"]
		if refused > 0 {
			f.Impact = float64(refused) / float64(refused+read)
			f.ImpactText = fmt.Sprintf("%s of the datagrams that reached netns %s: %d refused for a full buffer, %d read (Udp RcvbufErrors, InDatagrams)",
				pct(f.Impact), ns.Name, refused, read)
		}
	}
	// A queue full at every reading while the workload ran is a reader
	// slower than its sender, which no buffer fixes (a larger one fills
	// too); one found empty at times has a reader with time to spare, whose
	// buffer overflows in bursts. A python3 reader behind SO_RCVBUF 4096
	// delivered 74,000 of 470,000 datagrams, and 86,000 with the default
	// buffer (2026-11-28).
	if q != nil && q.QueueReads >= minQueueReads && q.QueueEmpty == 0 && 2*q.QueueFull >= q.QueueReads {
		pace := udpReaderLimit(lim, q)
		f.Title = fmt.Sprintf("datagrams to %s are dropped: its reader falls behind the sender", d.Dst)
		f.Limit = pace
		f.Evidence = append(f.Evidence, pace.Describe())
		if lim != nil {
			f.Evidence = append(f.Evidence, lim.Describe())
		}
		f.Explanation += " Here the receiving application reads slower than its sender sends: its buffer fills and stays full, " +
			"and a larger one would fill too (it absorbs a burst, not a lasting deficit)."
		f.Remedy = append(pace.Remedy(), rest...)
		return
	}
	if lim == nil {
		return
	}
	f.Evidence = append(f.Evidence, lim.Describe())
	f.Title = fmt.Sprintf("datagrams to %s are dropped: the receive buffer its application set is full", d.Dst)
	f.Limit = lim
	f.Explanation += " Here the receiving socket's buffer, which its application set (SO_RCVBUF), overflowed: UDP has no window " +
		"to slow its sender and never grows the buffer, so every datagram that finds it full is gone."
	f.Remedy = append(lim.Remedy(), rest...)
}

// minQueueReads: fewer readings of a queue say little of how it stood.
const minQueueReads = 4

// udpSocketOf is the UDP socket bound to dst (or to its port on any
// address) in netns that refused datagrams.
func (ev *Evidence) udpSocketOf(netns string, dst netip.AddrPort) *UDPSocket {
	for i := range ev.UDPSockets {
		s := &ev.UDPSockets[i]
		if s.Netns == netns && boundTo(s.Local, dst) {
			return s
		}
	}
	return nil
}

func boundTo(local, dst netip.AddrPort) bool {
	return local.Port() == dst.Port() && (local.Addr().IsUnspecified() || local.Addr() == dst.Addr())
}

// udpReaderLimit is a UDP socket's reader, slower than its sender, as the
// limit: the buffer its application set, if it did, is the step after.
func udpReaderLimit(buffer *finding.Limit, q *UDPSocket) *finding.Limit {
	bound := fmt.Sprintf("udp %s", q.Local)
	l := &finding.Limit{Kind: KindReadPace, Value: fmt.Sprintf("reads slower than its sender sends: its queue at least half full at %d of %d readings, empty at none", q.QueueFull, q.QueueReads),
		Where: finding.Place{Layer: finding.LayerSocket, Netns: q.Netns, Object: bound}, SetBy: q.Owner,
		Applies: finding.Scope{Flows: []string{bound}},
		Arithmetic: fmt.Sprintf("%d datagrams refused since the socket was created (sk_drops); its receive queue read %d times while the workload ran, at least half of its %d bytes full %d times, empty none",
			q.Drops, q.QueueReads, q.RcvBuf, q.QueueFull),
		Source: "sock_diag INET_DIAG_SKMEMINFO read while the workload ran"}
	if buffer != nil {
		l.Where, l.Applies = buffer.Where, buffer.Applies
		if l.SetBy == nil {
			l.SetBy = buffer.SetBy
		}
	}
	who := "the receiving application"
	if l.SetBy != nil {
		who = l.SetBy.String()
	}
	l.Undo = []finding.Action{finding.Change("in %s: read faster (recvmmsg, more reading threads or sockets with SO_REUSEPORT, no pauses in the reading loop), or have the sender send no faster than it reads", who)}
	if buffer != nil {
		then := buffer.Undo[0]
		then.Text = "then " + then.Text
		l.Undo = append(l.Undo, then)
	}
	return l
}

// udpBufferOf is the receive buffer limit the observer read on the UDP
// socket bound to dst (or to its port on any address) in netns.
func udpBufferOf(ev *Evidence, netns string, dst netip.AddrPort) *finding.Limit {
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if l.Kind != "so_rcvbuf" || l.Where.Netns != netns {
			continue
		}
		bound, ok := strings.CutPrefix(l.Where.Object, "udp ")
		if !ok {
			continue
		}
		if a, err := netip.ParseAddrPort(bound); err == nil && boundTo(a, dst) {
			return l
		}
	}
	return nil
}

func slicesWithout(in []string, drop string) []string {
	var out []string
	for _, s := range in {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}
