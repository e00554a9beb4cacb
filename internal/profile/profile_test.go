package profile

import (
	"bytes"
	"math"
	"reflect"
	"testing"
)

func TestTrafficDirection(t *testing.T) {
	cases := []struct {
		name                 string
		tr                   Traffic
		packets, bytes, skbs uint64
	}{
		// A sender on a real NIC: its few received packets are ACKs.
		{"sender", Traffic{TxSkbs: 100, TxPkts: 4000, TxBytes: 6_000_000, RxSkbs: 50, RxPkts: 60, RxBytes: 4000},
			4000, 6_000_000, 100},
		{"receiver", Traffic{TxSkbs: 10, TxPkts: 10, TxBytes: 700, RxSkbs: 300, RxPkts: 3000, RxBytes: 4_500_000},
			3000, 4_500_000, 300},
		// Loopback moves every packet both ways: either direction is right,
		// but the three must come from the same one.
		{"loopback", Traffic{TxSkbs: 5, TxPkts: 20, TxBytes: 1000, RxSkbs: 20, RxPkts: 20, RxBytes: 1100},
			20, 1000, 5},
		{"nothing", Traffic{}, 0, 0, 0},
	}
	for _, c := range cases {
		if p, b, s := c.tr.Packets(), c.tr.Bytes(), c.tr.Skbs(); p != c.packets || b != c.bytes || s != c.skbs {
			t.Errorf("%s: packets, bytes, skbs = %d, %d, %d; want %d, %d, %d", c.name, p, b, s, c.packets, c.bytes, c.skbs)
		}
	}
}

func TestNsPerSample(t *testing.T) {
	samples := []Sample{{Count: 150}, {Count: 50}}
	cases := []struct {
		name string
		meta Meta
		want float64
	}{
		// An idle CPU may go unsampled (200 samples of 2*99 a second here):
		// only the rate tells what a sample stands for, whatever the clock.
		{"cpu-clock", Meta{Clock: "cpu-clock", Hz: 99, Seconds: 1, CPUs: []int{0, 1}}, 1e9 / 99},
		{"cycles", Meta{Clock: "cycles", Hz: 99, Seconds: 1, CPUs: []int{0, 1}}, 1e9 / 99},
		{"cpu-clock without a window", Meta{Clock: "cpu-clock", Hz: 100, CPUs: []int{0}}, 1e9 / 100},
		{"no rate", Meta{Clock: "cycles"}, 0},
	}
	for _, c := range cases {
		p := &Profile{Meta: c.meta, Samples: samples}
		if got := p.NsPerSample(); got != c.want {
			t.Errorf("%s: NsPerSample = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPhaseTable(t *testing.T) {
	p := &Profile{
		// 1 CPU for 1 s over 200 samples: 5 ms a sample.
		Meta: Meta{Clock: "cpu-clock", Hz: 200, Seconds: 1, CPUs: []int{0},
			Traffic: Traffic{Counted: true, TxPkts: 1000, TxBytes: 1_500_000, RxPkts: 4000, RxBytes: 250_000}},
		Samples: []Sample{
			{Count: 40, Context: Softirq, Phase: PhaseNetfilter},
			{Count: 20, Context: Syscall, Phase: PhaseNetfilter},
			{Count: 25, Context: Syscall, Phase: PhaseUDP},
			{Count: 25, Context: Syscall, Phase: PhaseTCP},
			{Count: 10, Context: Syscall, Phase: PhaseCopy},
			{Count: 80, Context: Idle, Phase: PhaseIdle},
		},
	}
	rows := p.PhaseTable()
	// Busiest first; equal counts keep the table's order (tcp before udp).
	wantOrder := []Phase{PhaseNetfilter, PhaseTCP, PhaseUDP, PhaseCopy}
	var order []Phase
	for _, r := range rows {
		order = append(order, r.Phase)
	}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Fatalf("phases %v, want %v (idle left out)", order, wantOrder)
	}
	var share float64
	for _, r := range rows {
		share += r.Share
		ns := float64(r.Samples) * 5e6
		// The receive direction moved more packets: it is the workload's.
		if !approx(r.Ns, ns) || !approx(r.NsPerPacket, ns/4000) || !approx(r.NsPerByte, ns/250_000) {
			t.Errorf("%s: %v ns, %v ns/packet, %v ns/byte; want %v, %v, %v",
				r.Phase, r.Ns, r.NsPerPacket, r.NsPerByte, ns, ns/4000, ns/250_000)
		}
	}
	if !approx(share, 1) {
		t.Errorf("shares sum to %v, want 1", share)
	}
	if rows[0].Samples != 60 || !approx(rows[0].Share, 0.5) {
		t.Errorf("netfilter: %d samples, share %v; want 60, 0.5", rows[0].Samples, rows[0].Share)
	}

	// Without packet counts there is no cost per packet, not a division by zero.
	p.Meta.Traffic = Traffic{}
	for _, r := range p.PhaseTable() {
		if r.NsPerPacket != 0 || r.NsPerByte != 0 || r.Ns == 0 {
			t.Errorf("%s without traffic: %v ns, %v ns/packet, %v ns/byte", r.Phase, r.Ns, r.NsPerPacket, r.NsPerByte)
		}
	}
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func TestComms(t *testing.T) {
	p := &Profile{Samples: []Sample{
		{Count: 30, Comm: "iperf3", Context: Syscall},
		{Count: 20, Comm: "iperf3", Context: User},
		{Count: 20, Comm: "swapper/1", Context: Softirq}, // a softirq on an idle CPU is busy
		{Count: 20, Comm: "ksoftirqd/0", Context: Softirq},
		{Count: 10, Comm: "nginx", Context: Syscall},
		{Count: 500, Comm: "swapper/0", Context: Idle},
	}}
	want := []CommShare{{"iperf3", 0.5}, {"ksoftirqd/0", 0.2}, {"swapper/1", 0.2}, {"nginx", 0.1}}
	if got := p.Comms(); !reflect.DeepEqual(got, want) {
		t.Errorf("Comms = %v, want %v", got, want)
	}
}

func foldedProfile() *Profile {
	send := []string{"udp_sendmsg", "__sys_sendto", "do_syscall_64"}
	user := []string{"__libc_sendto", "main", "__libc_start_main"}
	return &Profile{Samples: []Sample{
		{Count: 3, CPU: 0, Comm: "nc", Kernel: send, User: user, Context: Syscall},
		{Count: 2, CPU: 1, Comm: "nc", Kernel: send, User: user, Context: Syscall}, // same stack, other CPU
		{Count: 1, CPU: 1, Comm: "nc", User: []string{"main", "__libc_start_main"}, Context: User},
		{Count: 7, CPU: 0, Comm: "swapper/0", Kernel: []string{"default_idle", "do_idle"}, Context: Idle},
		// A ";" in a command would split it into two frames.
		{Count: 4, CPU: 1, Comm: "a;b", Kernel: []string{"tcp_sendmsg", "do_syscall_64"}, Context: Syscall},
	}}
}

func TestWriteFolded(t *testing.T) {
	var buf bytes.Buffer
	if err := foldedProfile().WriteFolded(&buf); err != nil {
		t.Fatal(err)
	}
	want := `a:b;do_syscall_64_[k];tcp_sendmsg_[k] 4
nc;__libc_start_main;main 1
nc;__libc_start_main;main;__libc_sendto;do_syscall_64_[k];__sys_sendto_[k];udp_sendmsg_[k] 5
swapper/0;do_idle_[k];default_idle_[k] 7
`
	if got := buf.String(); got != want {
		t.Errorf("WriteFolded:\n%s\nwant:\n%s", got, want)
	}
}

// The busy flame graph is the CPU time the workload costs: idle is out, a
// softirq on an idle CPU is in.
func TestStacksBusy(t *testing.T) {
	p := foldedProfile()
	p.Samples = append(p.Samples, Sample{Count: 2, Comm: "swapper/0", Kernel: []string{"net_rx_action", "do_idle"},
		Context: Softirq})
	want := map[string]uint64{
		"a:b;do_syscall_64_[k];tcp_sendmsg_[k]": 4,
		"nc;__libc_start_main;main":             1,
		"nc;__libc_start_main;main;__libc_sendto;do_syscall_64_[k];__sys_sendto_[k];udp_sendmsg_[k]": 5,
		"swapper/0;do_idle_[k];net_rx_action_[k]":                                                    2,
	}
	if got := p.Stacks(true); !reflect.DeepEqual(got, want) {
		t.Errorf("Stacks(true) = %v, want %v", got, want)
	}
	if got := p.Stacks(false); got["swapper/0;do_idle_[k];default_idle_[k]"] != 7 {
		t.Errorf("Stacks(false) = %v, want the idle stack too", got)
	}
}
