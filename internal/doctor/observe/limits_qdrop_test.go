package observe

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// A pfifo that overflowed under an htb class, as tc -s -j prints it: its
// limit is the limit, and its undo gives it the device's txqueuelen in
// its place; one as long as that, or a queue of another kind, is not.
func TestFifoLimitFromTc(t *testing.T) {
	qs, err := parseTcQdiscs([]byte(`[{"kind":"htb","handle":"1:","dev":"s0","root":true,"options":{"r2q":10,"default":"0x10"},"packets":1903776,"drops":0},
{"kind":"pfifo","handle":"810c:","dev":"s0","parent":"1:10","options":{"limit":4},"packets":1903577,"drops":199},
{"kind":"bfifo","handle":"2:","dev":"s1","root":true,"options":{"limit":3000},"packets":10,"drops":5},
{"kind":"pfifo","handle":"3:","dev":"s2","root":true,"options":{"limit":1000},"packets":10,"drops":5},
{"kind":"fq_codel","handle":"0:","dev":"s3","root":true,"options":{"limit":10240},"packets":10,"drops":5}]`))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := fifoLimit("ns1", qs[1], 1000)
	if !ok {
		t.Fatal("the 4-packet pfifo that dropped is not a limit")
	}
	if l.Kind != doctor.KindQdiscLimit || !strings.HasPrefix(l.Value, "pfifo limit 4 packets (199 drops") || l.Where.Object != "dev s0 handle 810c:" || l.Where.Netns != "ns1" {
		t.Errorf("limit %+v", l)
	}
	if got, want := l.Undo[0].Text, "ip netns exec ns1 tc qdisc change dev s0 parent 1:10 handle 810c: pfifo limit 1000"; got != want {
		t.Errorf("undo %q, want %q", got, want)
	}
	b, ok := fifoLimit("", qs[2], 1000)
	if !ok || b.Undo[0].Text != "tc qdisc change dev s1 root handle 2: bfifo limit 65536000" {
		t.Errorf("bfifo: %v %+v", ok, b.Undo)
	}
	if _, ok := fifoLimit("", qs[3], 1000); ok {
		t.Error("a pfifo as long as the default is named as a limit")
	}
	if _, ok := fifoLimit("", qs[4], 1000); ok {
		t.Error("an fq_codel is named as a fifo's limit")
	}
}

// A u32 filter whose mirred redirect to a device that is down failed, as
// tc -s -j filter show prints it (its two "match" keys and all): the
// failures are the action's overlimits, and the undo deletes that filter
// by its handle. A redirect that worked, and a filter without actions,
// are no limit; a gact drop counts its packets.
func TestFilterDropLimitFromTc(t *testing.T) {
	fs, err := parseTcFilters([]byte(`[{"protocol":"ip","pref":1,"kind":"u32","chain":0},
{"protocol":"ip","pref":1,"kind":"u32","chain":0,"options":{"fh":"800:","ht_divisor":1}},
{"protocol":"ip","pref":1,"kind":"u32","chain":0,"options":{"fh":"800::800","order":2048,"match":{"value":"60000","mask":"ff0000","off":8},"match":{"value":"5a0000","mask":"ff0000","off":4},
 "actions":[{"order":1,"kind":"mirred","mirred_action":"redirect","direction":"egress","to_dev":"ifbq","control_action":{"type":"stolen"},"stats":{"bytes":7136988,"packets":4742,"drops":0,"overlimits":161}}]}},
{"protocol":"ip","pref":2,"kind":"u32","chain":0,"options":{"fh":"801::800","actions":[{"kind":"mirred","mirred_action":"redirect","direction":"egress","to_dev":"ifb0","stats":{"packets":99,"drops":0,"overlimits":0}}]}},
{"protocol":"all","pref":3,"kind":"matchall","chain":0,"options":{"fh":"1","actions":[{"kind":"gact","control_action":{"type":"drop"},"stats":{"packets":7}}]}}]`))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, ok := filterDropLimit("", "s0", "parent 1:", fs[i]); ok {
			t.Errorf("filter %d without actions is a limit", i)
		}
	}
	l, ok := filterDropLimit("ns1", "s0", "parent 1:", fs[2])
	if !ok {
		t.Fatal("the failing redirect is not a limit")
	}
	if l.Kind != doctor.KindTcFilterDrop || !strings.Contains(l.Value, "dropped 161 packets (mirred egress redirect to ifbq, which failed") {
		t.Errorf("value %q", l.Value)
	}
	if got, want := l.Undo[0].Text, "ip netns exec ns1 tc filter del dev s0 parent 1: protocol ip prio 1 handle 800::800 u32"; got != want {
		t.Errorf("undo %q, want %q", got, want)
	}
	if _, ok := filterDropLimit("", "s0", "parent 1:", fs[3]); ok {
		t.Error("a redirect that worked is a limit")
	}
	g, ok := filterDropLimit("", "s0", "egress", fs[4])
	if !ok || !strings.Contains(g.Value, "gact drop: 7 packets") || g.Undo[0].Text != "tc filter del dev s0 egress protocol all prio 3 handle 1 matchall" {
		t.Errorf("gact drop: %v %q %q", ok, g.Value, g.Undo)
	}
}
