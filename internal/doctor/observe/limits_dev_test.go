package observe

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
)

func device(name, driver string, on map[string]bool, fixed, held []string) *doctor.Device {
	return &doctor.Device{Device: host.Device{Name: name, Kind: "veth", Driver: driver, Features: on, Fixed: fixed, Held: held}}
}

// The undo turns on exactly what ethtool can, the features TSO and GSO
// need first, and says where the device refuses.
func TestSegmentationLimitUndo(t *testing.T) {
	all := func(off ...string) map[string]bool {
		m := map[string]bool{featTSO: true, featGSO: true, featSG: true, featTxCsum: true, featGRO: true}
		for _, n := range off {
			m[n] = false
		}
		return m
	}
	for _, c := range []struct {
		name  string
		d     *doctor.Device
		want  string // the first action's text, "" for no limit
		argv  bool   // a command, not a change
		value string
	}{
		{"healthy", device("v0", "veth", all(), nil, nil), "", false, ""},
		{"tso and gso off", device("v0", "veth", all(featTSO, featGSO), nil, nil),
			"ip netns exec ns1 ethtool -K v0 tso on gso on", true, "tx-tcp-segmentation off, tx-generic-segmentation off"},
		{"sg off holds them", device("v0", "veth", all(featTSO, featGSO, featSG), nil, []string{featTSO, featGSO}),
			"ip netns exec ns1 ethtool -K v0 sg on tso on gso on", true, "tx-tcp-segmentation off [requested on]"},
		{"tx checksum off", device("v0", "veth", all(featTSO, featGSO, featSG, featTxCsum), nil, []string{featTSO, featGSO, featSG}),
			"ip netns exec ns1 ethtool -K v0 tx on sg on tso on gso on", true, "tx-checksum-ip-generic off"},
		{"tso refused, gso off by hand", device("eth0", "virtio_net", all(featTSO, featGSO), []string{featTSO}, nil),
			"ip netns exec ns1 ethtool -K eth0 gso on", true, "tx-tcp-segmentation off [fixed]"},
		{"tso refused, gso on", device("eth0", "virtio_net", all(featTSO), []string{featTSO}, nil), "", false, ""},
		{"sg refused", device("eth0", "virtio_net", all(featTSO, featGSO, featSG), []string{featTSO, featSG}, []string{featGSO}),
			"eth0 refuses scatter-gather (and with it TSO and GSO): the host gives this virtio NIC no such offload", false, "tx-scatter-gather off [fixed]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ok := segmentationLimit("ns1", c.d)
			if ok != (c.want != "") {
				t.Fatalf("limit %v, want one: %v", ok, c.want != "")
			}
			if !ok {
				return
			}
			if l.Kind != KindSegmentationOff || l.Where.Netns != "ns1" || !slices.Equal(l.Applies.Devices, []string{c.d.Name}) {
				t.Errorf("limit %+v", l)
			}
			if !strings.HasPrefix(l.Undo[0].Text, c.want) || (l.Undo[0].Argv != nil) != c.argv {
				t.Errorf("first action %q (argv %v), want %q (command %v)", l.Undo[0].Text, l.Undo[0].Argv, c.want, c.argv)
			}
			if c.argv && l.Undo[0].Netns != "ns1" {
				t.Errorf("the command runs in %q, want ns1", l.Undo[0].Netns)
			}
			if !strings.Contains(l.Value, c.value) {
				t.Errorf("value %q, want it to say %q", l.Value, c.value)
			}
		})
	}
}

func TestGROLimit(t *testing.T) {
	on := map[string]bool{featGRO: true}
	if _, ok := groLimit("ns1", device("v0", "veth", on, nil, nil)); ok {
		t.Error("GRO on is no limit")
	}
	l, ok := groLimit("ns1", device("v0", "veth", map[string]bool{featGRO: false}, nil, nil))
	if !ok || l.Undo[0].Text != "ip netns exec ns1 ethtool -K v0 gro on" {
		t.Errorf("GRO off: %v %+v", ok, l)
	}
	l, ok = groLimit("ns1", device("v0", "veth", map[string]bool{featGRO: false}, []string{featGRO}, nil))
	if !ok || l.Undo[0].Argv != nil {
		t.Errorf("GRO refused should have no command: %+v", l)
	}
}

// A veth end's MTU above its peer's is the limit, its undo the peer's MTU.
func TestMTULimit(t *testing.T) {
	ev := &doctor.Evidence{Namespaces: []doctor.Namespace{
		{Name: "a", Devices: []doctor.Device{{Device: host.Device{Name: "va", Kind: "veth", Index: 2, PeerIndex: 3, PeerNetnsID: 0, MTU: 9000}}},
			NetnsIDs: map[string]int{"b": 0}},
		{Name: "b", Devices: []doctor.Device{{Device: host.Device{Name: "vb", Kind: "veth", Index: 3, PeerIndex: 2, PeerNetnsID: 0, MTU: 1500}}},
			NetnsIDs: map[string]int{"a": 0}},
	}}
	if _, ok := mtuLimit(ev, &ev.Namespaces[1], &ev.Namespaces[1].Devices[0]); ok {
		t.Error("the smaller end is no limit")
	}
	l, ok := mtuLimit(ev, &ev.Namespaces[0], &ev.Namespaces[0].Devices[0])
	if !ok || l.Undo[0].Text != "ip netns exec a ip link set dev va mtu 1500" || !strings.Contains(l.Arithmetic, "vb (netns b) has MTU 1500") {
		t.Errorf("larger end: %v %+v", ok, l)
	}
}

// The rules that rewrite what GRO compares and those that drop path-MTU
// discovery's ICMP, from nft -a list ruleset's text, with their handles.
func TestNftLimits(t *testing.T) {
	text, err := os.ReadFile("testdata/dev/ruleset.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	limits := nftLimits("r", string(text))
	for _, l := range limits {
		got = append(got, l.Kind+": "+l.Undo[0].Text+" | "+l.Where.Object)
	}
	// The rule as set, without its counter's values.
	if n := len(limits); n > 0 && limits[n-1].Value != "icmpv6 type packet-too-big counter drop" {
		t.Errorf("rule text %q", limits[n-1].Value)
	}
	want := []string{
		KindNftRewrite + ": ip netns exec r nft delete rule ip skbtrace-lab c handle 2 | table ip skbtrace-lab chain c (hook forward) handle 2",
		KindNftRewrite + ": ip netns exec r nft delete rule ip skbtrace-lab c handle 4 | table ip skbtrace-lab chain c (hook forward) handle 4",
		KindNftICMPDrop + ": ip netns exec r nft delete rule ip skbtrace-lab o handle 6 | table ip skbtrace-lab chain o (hook output) handle 6",
		KindNftICMPDrop + ": ip netns exec r nft delete rule inet f in handle 2 | table inet f chain in (hook input) handle 2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("limits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
