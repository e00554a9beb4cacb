package doctor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Idle namespaces beside a CPU busy with other work: nothing moved, so no
// throughput was at stake (issue 43: "[warning] cpu-saturated ... at
// stake: up to 91 % of throughput" on idle namespaces).
func TestNoTrafficPutsNoThroughputAtStake(t *testing.T) {
	ev := &Evidence{Seconds: 3, CPUCount: 2, KernelEvents: true,
		CPUs:       []CPUUse{{CPU: 0, User: 0.88, System: 0.03, Idle: 0.09}, {CPU: 1, User: 0.2, Idle: 0.8}},
		SockIO:     []SockIO{{Pid: 1, Comm: "sshd", Dir: "send", Calls: 3, Bytes: 300}},
		Namespaces: []Namespace{{Name: "h4-a"}, {Name: "h4-b"}}}
	rep := Diagnose(ev)
	if top := rep.Top(finding.Warning); top != nil {
		t.Fatalf("%s warns of %s with no traffic", top.ID, top.ImpactText)
	}
	if len(rep.Findings) == 0 || rep.Findings[0].ID != "cpu-saturated" || rep.Findings[0].Impact != 0 {
		t.Fatalf("findings %+v, want cpu-saturated as info with nothing at stake", rep.Findings)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no traffic observed: no flow moved data during the 3.0 s observation") || strings.Contains(b.String(), "healthy") {
		t.Fatalf("text:\n%s", b.String())
	}
}

// A command that failed is never healthy, and the report says how it
// failed (issue 43: an iperf3 that failed with "No route to host" was
// reported healthy; doctor -- false said nothing of it).
func TestAFailedCommandIsReportedNotHealthy(t *testing.T) {
	ev := load(t, "lab/baseline.json")
	if rep := Diagnose(ev); rep.Healthy == "" {
		t.Fatalf("the baseline is no longer healthy: %v", ids(rep.Findings))
	}
	ev.Command = &Command{Argv: []string{"ip", "netns", "exec", "h4-a", "iperf3", "-c", "10.0.0.2"}, Program: "iperf3", ExitCode: 1,
		LastLine: "iperf3: error - unable to connect to server - server may not have started running or busy: No route to host"}
	rep := Diagnose(ev)
	if rep.Healthy != "" || !strings.Contains(rep.Failed, "iperf3 exited with status 1") || !strings.Contains(rep.Failed, "No route to host") {
		t.Fatalf("healthy %q, failed %q", rep.Healthy, rep.Failed)
	}
	var text, js, page bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text.String(), "failed: iperf3 exited with status 1") {
		t.Errorf("text:\n%s", text.String())
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Failed string `json:"failed"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || !strings.Contains(doc.Failed, "No route to host") {
		t.Errorf("JSON failed %q (%v)", doc.Failed, err)
	}
	if err := rep.WriteHTML(&page, nil, "test"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "iperf3 exited with status 1") {
		t.Error("the page does not say the command failed")
	}
	// Ended by the doctor's own duration, it did not fail.
	ev.Command.Stopped, ev.Command.ExitCode = true, 137
	if rep := Diagnose(ev); rep.Failed != "" || rep.Healthy == "" {
		t.Errorf("a command the doctor stopped: failed %q, healthy %q", rep.Failed, rep.Healthy)
	}
	ev.Command = &Command{Argv: []string{"false"}, ExitCode: 1}
	if rep := Diagnose(ev); rep.Failed != "false exited with status 1: what it measured is not a result" {
		t.Errorf("failed %q", rep.Failed)
	}
}

// The text report states the throughput reached, from iperf3's summary
// where the command is iperf3, else from the flows, and whose evidence
// joined (issue 43: "the text report never states the throughput reached,
// nor that a peer's evidence was joined").
func TestTheReportStatesTheThroughputAndThePeer(t *testing.T) {
	ev := load(t, "lab/baseline.json")
	rep := Diagnose(ev)
	if !strings.Contains(rep.Throughput, "sent") || !strings.Contains(rep.Throughput, "TCP flows over the") || !strings.Contains(rep.Throughput, "bit/s") {
		t.Errorf("throughput from the flows: %q", rep.Throughput)
	}
	ev.Command = &Command{Argv: []string{"iperf3", "-c", "10.0.0.2"}, Program: "iperf3",
		Iperf3: &Iperf3{Protocol: "TCP", SentBps: 9.42e9, ReceivedBps: 9.41e9, Retransmits: 12}}
	ev.Peers = []Peer{{URL: "http://10.0.0.2:9464", Host: "receiver", Flows: 1}}
	rep = Diagnose(ev)
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"throughput: 9.41 Gbit/s received, 9.42 Gbit/s sent (iperf3's TCP summary), 12 retransmitted",
		"peer: the evidence of the agent at receiver (http://10.0.0.2:9464) joined"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// UDP that a veth of a smaller MTU drops whole moves nothing a flow or a
// device counter shows, yet it was offered and is all at stake: the
// mtu-mismatch-veth-ends-udp variant's 31,240 drops lost their warning to
// the no-traffic rule in CI.
func TestDroppedTrafficWasOffered(t *testing.T) {
	ev := load(t, "lab/mtu-mismatch.json")
	ev.Flows = nil
	for i := range ev.Namespaces {
		for j := range ev.Namespaces[i].Devices {
			d := &ev.Namespaces[i].Devices[j]
			d.Stats.TxBytes, d.Stats.RxBytes = 0, 0
		}
	}
	for i := range ev.Drops {
		ev.Drops[i].Protocol = "ipv4/udp"
	}
	before := ev.Drops
	ev.Drops = nil
	if rep := Diagnose(ev); rep.NoTraffic == "" {
		t.Fatalf("nothing moved and nothing was dropped, yet traffic counted: %v", ids(rep.Findings))
	}
	ev = load(t, "lab/mtu-mismatch.json")
	ev.Flows = nil
	for i := range ev.Namespaces {
		for j := range ev.Namespaces[i].Devices {
			d := &ev.Namespaces[i].Devices[j]
			d.Stats.TxBytes, d.Stats.RxBytes = 0, 0
		}
	}
	ev.Drops = before
	ev.Drops[0].Count = 31240
	rep := Diagnose(ev)
	if rep.NoTraffic != "" {
		t.Fatalf("31240 dropped datagrams read as no traffic: %s", rep.NoTraffic)
	}
	if top := rep.Top(finding.Warning); top == nil || top.ID != "mtu-mismatch" {
		t.Fatalf("findings %v, want mtu-mismatch first as a warning", ids(rep.Findings))
	}
}
