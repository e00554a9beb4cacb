package finding

import (
	"strings"
	"testing"
)

func TestACommandPrintsAsItRuns(t *testing.T) {
	for _, c := range []struct {
		a    Action
		want string
	}{
		{Command("", "sysctl", "-w", "net.ipv4.tcp_rmem=4096 131072 6291456"), `sysctl -w 'net.ipv4.tcp_rmem=4096 131072 6291456'`},
		{Command("lab-rx", "ip", "route", "change", "10.0.0.0/24", "dev", "veth1"), "ip netns exec lab-rx ip route change 10.0.0.0/24 dev veth1"},
		{Command("", "sh", "-c", "echo 'max 100000' > /sys/fs/cgroup/x/cpu.max"), `sh -c 'echo '\''max 100000'\'' > /sys/fs/cgroup/x/cpu.max'`},
		{Command("", "nft", "delete", "rule", "inet", "f", "input", "handle", "3"), "nft delete rule inet f input handle 3"},
		{Command("", "printf", ""), "printf ''"},
	} {
		if c.a.Text != c.want {
			t.Errorf("got %s, want %s", c.a.Text, c.want)
		}
	}
}

func TestALimitSaysWhereAndWhoAndRendersItsFix(t *testing.T) {
	l := Limit{Kind: "tcp_window_clamp", Value: "65536 bytes",
		Where:  Place{Layer: LayerSocket, Netns: "rx", Object: "10.0.0.2:5201 10.0.0.1:40000"},
		SetBy:  &Owner{PID: 42, Comm: "server.py"},
		Undo:   []Action{Change("in server.py: drop its setsockopt(TCP_WINDOW_CLAMP, 65536)")},
		Source: "BPF iterator over TCP sockets"}
	d := l.Describe()
	for _, want := range []string{"tcp_window_clamp = 65536 bytes", "socket 10.0.0.2:5201 10.0.0.1:40000 in netns rx", "server.py[42]", "BPF iterator"} {
		if !strings.Contains(d, want) {
			t.Errorf("%q lacks %q", d, want)
		}
	}
	if r := l.Remedy(); len(r) != 1 || !strings.Contains(r[0], "TCP_WINDOW_CLAMP") {
		t.Errorf("remedy %q", r)
	}
	var b strings.Builder
	AppendText(&b, []Finding{{ID: "rwnd-limited", Limit: &l, Remedy: l.Remedy()}})
	if !strings.Contains(b.String(), "limited by: tcp_window_clamp = 65536 bytes") {
		t.Errorf("text report lacks the limit:\n%s", b.String())
	}
}
