package doctor

import (
	"strings"
	"testing"
)

// A python3 UDP receiver that set SO_RCVBUF 4096 and reads with pauses
// (a run by hand, 2026-11-28): its full buffer refused 482,000 datagrams
// in 3 s, 88 times what the largest buffer this host allows could hold,
// and the default buffer delivered 16 % more, not all: its reader falls
// behind, named first, with the buffer it set the step after. With 3,000
// drops, fewer than such a buffer absorbs, the buffer is the limit. Either
// way the process and its call are named, not the generic sysctl advice.
func TestUDPLossNamesTheReaderOrTheReceiveBufferItSet(t *testing.T) {
	for _, c := range []struct {
		name  string
		drops uint64
		kind  string
	}{{"as recorded", 0, KindReadPace}, {"a burst", 3000, "so_rcvbuf"}} {
		ev := load(t, "sock/udp-rcvbuf-set.json")
		for i := range ev.Drops {
			if ev.Drops[i].Reason == "SOCKET_RCVBUFF" && c.drops > 0 {
				ev.Drops[i].Count = c.drops
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
		if strings.Contains(r, "raise net.core.rmem_max and the application's SO_RCVBUF") {
			t.Errorf("%s: remedy %q keeps the generic advice", c.name, f.Remedy)
		}
	}
}
