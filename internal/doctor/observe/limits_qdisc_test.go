package observe

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
)

// The shapers of a namespace, read by netlink as limits: a tbf with its
// bucket in bytes, an htb class with the u32 filter that sends traffic to
// it, and an ifb's tbf with the ingress redirect that feeds it; each undo
// deletes it where it is, in the namespace.
func TestShapersAsLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	ns := fmt.Sprintf("hsock-shapers-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	in := func(args ...string) { t.Helper(); run(append([]string{"ip", "netns", "exec", ns}, args...)...) }
	in("ip", "link", "add", "d0", "type", "veth", "peer", "name", "d0p")
	in("ip", "link", "add", "d1", "type", "veth", "peer", "name", "d1p")
	in("ip", "link", "add", "i0", "type", "ifb")
	in("tc", "qdisc", "add", "dev", "d0", "root", "tbf", "rate", "200mbit", "burst", "64kb", "latency", "20ms")
	in("tc", "qdisc", "add", "dev", "d1", "root", "handle", "1:", "htb", "default", "99")
	in("tc", "class", "add", "dev", "d1", "parent", "1:", "classid", "1:10", "htb", "rate", "300mbit", "ceil", "300mbit")
	in("tc", "filter", "add", "dev", "d1", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip", "dport", "5201", "0xffff", "flowid", "1:10")
	in("tc", "qdisc", "add", "dev", "i0", "root", "tbf", "rate", "100mbit", "burst", "32kb", "latency", "20ms")
	in("tc", "qdisc", "add", "dev", "d0", "handle", "ffff:", "ingress")
	in("tc", "filter", "add", "dev", "d0", "parent", "ffff:", "protocol", "ip", "prio", "2", "u32", "match", "u32", "0", "0",
		"action", "mirred", "egress", "redirect", "dev", "i0")

	h, err := host.OpenNetns(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var got []finding.Limit
	if err := h.Do(func() (err error) { got, err = shapersHere(ns); return err }); err != nil {
		t.Fatal(err)
	}
	by := map[string]finding.Limit{}
	for _, l := range got {
		by[l.Where.Object] = l
	}
	tbf, ok := by[doctor.ShaperObject("d0", "8001:")]
	if !ok {
		// tc numbers an unnamed root qdisc itself: find d0's tbf by kind.
		for _, l := range got {
			if l.Kind == doctor.KindTBFRate && l.Applies.Devices[0] == "d0" {
				tbf, ok = l, true
			}
		}
	}
	if !ok || !strings.HasPrefix(tbf.Value, "rate 200") || !strings.Contains(tbf.Value, "burst 655") || tbf.Where.Netns != ns ||
		tbf.Undo[0].Text != "ip netns exec "+ns+" tc qdisc del dev d0 root" {
		t.Errorf("d0's tbf %+v", tbf)
	}
	class := by[doctor.ShaperObject("d1", "1:10")]
	if class.Kind != doctor.KindHTBClassRate || !strings.HasSuffix(class.Value, "sent to it by u32 filter pref 1 on parent 1:") ||
		class.Undo[0].Text != "ip netns exec "+ns+" tc qdisc del dev d1 root" {
		t.Errorf("d1's class %+v", class)
	}
	var ifb finding.Limit
	for _, l := range got {
		if l.Kind == doctor.KindTBFRate && l.Applies.Devices[0] == "i0" {
			ifb = l
		}
	}
	if len(ifb.Undo) != 2 || !strings.Contains(ifb.Value, "fed by the ingress of d0 (u32 filter pref 2 on parent ffff: redirects to i0)") ||
		ifb.Undo[1].Text != "ip netns exec "+ns+" tc qdisc del dev d0 ingress" || len(ifb.Applies.Devices) != 2 {
		t.Errorf("i0's tbf %+v", ifb)
	}
}
