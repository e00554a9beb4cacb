package event

import "testing"

func TestProtocolNames(t *testing.T) {
	for _, c := range []struct {
		ethertype uint16
		l4        uint8
		want      string
	}{
		{0x0800, 6, "ipv4/tcp"}, {0x86dd, 17, "ipv6/udp"}, {0x86dd, 58, "ipv6/icmp"}, {0x0800, 2, "ipv4/igmp"},
		{0x86dd, 0, "ipv6/hopopts"}, {0x0800, 0, "ipv4/0"}, {0x0800, 47, "ipv4/47"}, {0x0806, 0, "arp"}, {0x88cc, 0, "0x88cc"},
	} {
		if got := ProtocolName(c.ethertype, c.l4); got != c.want {
			t.Errorf("ProtocolName(%#x, %d) = %q, want %q", c.ethertype, c.l4, got, c.want)
		}
	}
}
