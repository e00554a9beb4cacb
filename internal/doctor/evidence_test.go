package doctor

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// A flow's namespace is written as every output writes one (the inode as
// netns, the name as netns_name), and evidence of earlier versions, which
// wrote the name as netns, still reads.
func TestFlowNetnsIsTheInodeBesideTheName(t *testing.T) {
	ev := Evidence{
		Namespaces: []Namespace{{Name: "lab-snd", Inode: 4026532000}},
		Notes:      []string{"10.0.0.1 -> 10.0.0.2"},
		Flows:      []Flow{{Netns: "lab-snd", Local: netip.MustParseAddrPort("10.0.0.1:40000"), Peer: netip.MustParseAddrPort("10.0.0.2:5201")}},
	}
	var buf bytes.Buffer
	if err := (&Report{Evidence: &ev}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if s := string(b); !strings.Contains(s, `"netns_name": "lab-snd",`) || !strings.Contains(s, `"netns": 4026532000,`) || !strings.Contains(s, "10.0.0.1 -> 10.0.0.2") {
		t.Errorf("flow written as %s", s)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if f := back.Evidence.Flows[0]; f.Netns != "lab-snd" || f.NetnsInode != 4026532000 {
		t.Errorf("read back as %+v", f)
	}
	var old Flow
	if err := json.Unmarshal([]byte(`{"netns":"lab-rcv","local":"10.0.0.2:5201","peer":"10.0.0.1:40000","seconds":2}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Netns != "lab-rcv" || old.Seconds != 2 {
		t.Errorf("an earlier version's flow read as %+v", old)
	}
}

// A dropped fragment after the first has no ports: its addresses tie it to
// the flows between them, and to no other.
func TestADroppedFragmentIsSufferedByTheFlowBetweenItsAddresses(t *testing.T) {
	ev := &Evidence{Flows: []Flow{{Local: netip.MustParseAddrPort("10.200.0.1:40396"), Peer: netip.MustParseAddrPort("10.200.0.2:5201")}}}
	for _, c := range []struct {
		src, dst string
		want     bool
	}{
		{"10.200.0.1:0", "10.200.0.2:0", true},
		{"10.200.0.2:0", "10.200.0.1:0", true},
		{"10.200.0.1:0", "10.200.0.3:0", false},
		{"10.200.0.1:40396", "10.200.0.2:5201", true},
		{"10.200.0.1:40397", "10.200.0.2:5201", false},
	} {
		d := &Drop{Protocol: "ipv4/tcp", Src: netip.MustParseAddrPort(c.src), Dst: netip.MustParseAddrPort(c.dst), Count: 82}
		if got := ev.suffered(d); got != c.want {
			t.Errorf("a drop %s -> %s suffered: %v, want %v", c.src, c.dst, got, c.want)
		}
	}
}
