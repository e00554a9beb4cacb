package doctor

import (
	"slices"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// lossFinding is the packet-loss finding of a report, nil without one.
func lossFinding(rep *Report) *finding.Finding {
	for i := range rep.Findings {
		if rep.Findings[i].ID == "packet-loss" {
			return &rep.Findings[i]
		}
	}
	return nil
}

// A python3 http.server download by curl over veth, half of its skbs
// detoured through an ifb (tbf 6 Gbit/s, nothing dropped) at the receiver's
// ingress: 202,917 of 1,455,012 segments retransmitted, 184,951 (91 %)
// proven needless by DSACK, the receiver discarding 19,433 late copies by
// PAWS, which draw no DSACK. No packet was lost: packet-loss may only be
// info, saying why, with the numbers.
func TestReorderedDownloadIsNotLoss(t *testing.T) {
	ev := load(t, "reorder/reordered-ifb-download.json")
	rep := Diagnose(ev)
	f := lossFinding(rep)
	if f == nil || f.Severity >= finding.Warning {
		t.Fatalf("want packet-loss at info, got %+v", f)
	}
	text := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"184951 of them (91 %) proven needless", "taken as needless too", "TCP_RFC7323_PAWS", "detected reordering"} {
		if !strings.Contains(text, want) {
			t.Errorf("evidence lacks %q:\n%s", want, text)
		}
	}
	if f.Impact != 0 {
		t.Errorf("impact %v, want 0", f.Impact)
	}
}

// The numbers: a healthy nginx-to-curl download on veth, 14,009
// retransmissions, 12,877 proven needless; the rest, 0.13 % of the
// segments both ends sent (the receiver's 409,871 ACKs among them), passed
// the bar of loss. Proven much less often, the same retransmissions are loss.
func TestMostlyProvenRetransmissionsAreAllNeedless(t *testing.T) {
	ev := load(t, "reorder/reordered-ifb-download.json")
	ev.Drops = slices.DeleteFunc(ev.Drops, func(d Drop) bool { return d.Reason == "TCP_RFC7323_PAWS" || d.Reason == "TCP_OFO_DROP" })
	snd := ev.NamespaceNamed("p3a")
	snd.Counters["Tcp.RetransSegs"], snd.Counters["TcpExt.TCPDSACKRecvSegs"], snd.Counters["Tcp.OutSegs"] = 14009, 12877, 460000
	for i := range ev.Flows {
		ev.Flows[i].DSACKDups = 0
	}
	if f := lossFinding(Diagnose(ev)); f == nil || f.Severity >= finding.Warning ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "the other 1132 (0.25 % of the segments sent) taken as needless too") {
		t.Errorf("12877 of 14009 proven: want packet-loss at info with the unproven rest taken as needless, got %+v", f)
	}
	snd.Counters["TcpExt.TCPDSACKRecvSegs"] = 9000
	if f := lossFinding(Diagnose(ev)); f == nil || f.Severity < finding.Warning {
		t.Errorf("9000 of 14009 proven, 0.58 %% unproven: want packet-loss, got %+v", f)
	}
}

// The same reordered download with nftables dropping 1 % of the segments
// in the receiver's input hook: 146,350 retransmissions, 64 % proven
// needless, 6,823 NETFILTER_DROP. Reordering beside it hides no loss, and
// the late copies (PAWS) are not what the finding names.
func TestLossBesideReorderingStaysLoss(t *testing.T) {
	ev := load(t, "reorder/reordered-ifb-nft-loss.json")
	rep := Diagnose(ev)
	f := lossFinding(rep)
	if f == nil || f.Severity < finding.Warning {
		t.Fatalf("want packet-loss, got %+v; findings %v", f, ids(rep.Findings))
	}
	if !strings.Contains(f.Title, "NETFILTER_DROP") {
		t.Errorf("title %q, want the netfilter drops named", f.Title)
	}
	// With most retransmissions proven, the drops still keep as many lost.
	snd := ev.NamespaceNamed("p3a")
	snd.Counters["TcpExt.TCPDSACKRecvSegs"] = snd.Counters["Tcp.RetransSegs"] * 9 / 10
	if f := lossFinding(Diagnose(ev)); f == nil || f.Severity < finding.Warning {
		t.Errorf("90 %% proven beside 6823 located drops: want packet-loss, got %+v", f)
	}
}

// A located loss caps what is taken as needless: each dropped packet
// needed its retransmission.
func TestLocatedDropsStayLost(t *testing.T) {
	ev := &Evidence{Namespaces: []Namespace{{Name: "a", Counters: map[string]int64{
		"Tcp.RetransSegs": 1000, "Tcp.OutSegs": 100000, "TcpExt.TCPDSACKRecvSegs": 900}}}}
	ns := &ev.Namespaces[0]
	if s := ev.splitRetrans(ns, 0); s.lost() != 0 || s.assumed != 100 {
		t.Errorf("900 of 1000 proven, nothing located: lost %d, assumed %d; want 0, 100", s.lost(), s.assumed)
	}
	if s := ev.splitRetrans(ns, 60); s.lost() != 60 || s.assumed != 40 {
		t.Errorf("900 of 1000 proven, 60 located: lost %d, assumed %d; want 60, 40", s.lost(), s.assumed)
	}
	ns.Counters["TcpExt.TCPDSACKRecvSegs"] = 700
	if s := ev.splitRetrans(ns, 0); s.lost() != 300 || s.assumed != 0 {
		t.Errorf("700 of 1000 proven: lost %d, assumed %d; want 300, 0", s.lost(), s.assumed)
	}
}

// The lab's noise-reordered-ifb fault run (the lab's generator, odd IP IDs
// through an ifb at the receiver's ingress): 21,742 retransmissions, 96 %
// proven needless, the rest taken as needless with them.
func TestLabReorderedStreamIsNotLoss(t *testing.T) {
	ev := load(t, "reorder/noise-reordered-ifb.json")
	if f := lossFinding(Diagnose(ev)); f == nil || f.Severity >= finding.Warning || !strings.Contains(strings.Join(f.Evidence, "\n"), "taken as needless too") {
		t.Errorf("want packet-loss at info, the rest taken as needless, got %+v", f)
	}
}
