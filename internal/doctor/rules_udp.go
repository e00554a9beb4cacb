package doctor

import (
	"fmt"
	"net/netip"
	"strconv"
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
	lim := udpBufferOf(ev, ev.deviceNetns(d.Dev), d.Dst)
	if lim == nil {
		return
	}
	f.Evidence = append(f.Evidence, lim.Describe())
	rest := slicesWithout(f.Remedy, dropRemedies["SOCKET_RCVBUFF"])
	// A buffer fills once: over the observation it absorbs at most what it
	// holds. Drops of many times what the largest buffer the host allows
	// holds are a reader slower than its sender, which no buffer fixes: a
	// python3 reader behind SO_RCVBUF 4096 delivered 74,000 of 470,000
	// datagrams, and 86,000 with the default buffer (2026-11-28).
	rmemMax, _ := strconv.Atoi(ev.sysctl(ev.deviceNetns(d.Dev), "net.core.rmem_max"))
	if held := uint64(rmemMax / minDatagramTruesize); held > 0 && d.Count >= readerBoundDrops*held {
		pace := udpReaderLimit(lim, d.Count, held, rmemMax)
		f.Title = fmt.Sprintf("datagrams to %s are dropped: its reader falls behind the sender", d.Dst)
		f.Limit = pace
		f.Evidence = append(f.Evidence, pace.Describe())
		f.Explanation += " Here the receiving application reads slower than its sender sends: its buffer fills and stays full, " +
			"and a larger one would fill too (it absorbs a burst once, not a lasting deficit)."
		f.Remedy = append(pace.Remedy(), rest...)
		return
	}
	f.Title = fmt.Sprintf("datagrams to %s are dropped: the receive buffer its application set is full", d.Dst)
	f.Limit = lim
	f.Explanation += " Here the receiving socket's buffer, which its application set (SO_RCVBUF), overflowed: UDP has no window " +
		"to slow its sender and never grows the buffer, so every datagram that finds it full is gone."
	f.Remedy = append(lim.Remedy(), rest...)
}

const (
	// minDatagramTruesize is the least a queued datagram costs its socket's
	// buffer (an skb's truesize): the most datagrams a buffer can hold is
	// its size over it.
	minDatagramTruesize = 768
	// readerBoundDrops: drops this many times what the largest allowed
	// buffer holds are, at least by half, a reader's deficit, not a burst.
	readerBoundDrops = 2
)

// udpReaderLimit is a UDP socket's reader, slower than its sender, as the
// limit: the buffer it set is the step after.
func udpReaderLimit(buffer *finding.Limit, dropped, held uint64, rmemMax int) *finding.Limit {
	who := "the receiving application"
	if buffer.SetBy != nil {
		who = buffer.SetBy.String()
	}
	then := buffer.Undo[0]
	then.Text = "then " + then.Text
	return &finding.Limit{Kind: KindReadPace, Value: fmt.Sprintf("reads slower than its sender sends: %d datagrams refused", dropped),
		Where: buffer.Where, SetBy: buffer.SetBy, Applies: buffer.Applies,
		Undo: []finding.Action{
			finding.Change("in %s: read faster (recvmmsg, more reading threads or sockets with SO_REUSEPORT, no pauses in the reading loop), or have the sender send no faster than it reads", who),
			then},
		Arithmetic: fmt.Sprintf("%d datagrams refused in the observation; the largest buffer this host allows (net.core.rmem_max %d) holds at most %d (%d bytes each at least): it would have refused %d of them",
			dropped, rmemMax, held, minDatagramTruesize, dropped-held),
		Source: "skb_drop [SOCKET_RCVBUFF], sock_diag, net.core.rmem_max"}
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
		a, err := netip.ParseAddrPort(bound)
		if err == nil && a.Port() == dst.Port() && (a.Addr().IsUnspecified() || a.Addr() == dst.Addr()) {
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
