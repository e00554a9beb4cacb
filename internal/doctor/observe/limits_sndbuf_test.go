package observe

import (
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/doctor"
)

// tcp_wmem is read as a limit of the namespace's sending flows, and only
// where the sockets' own settings were read: without them a buffer the
// application locked could not be told from one the sysctl holds.
func TestWmemLimits(t *testing.T) {
	ev := &doctor.Evidence{
		Namespaces: []doctor.Namespace{{Name: "snd", Sysctls: map[string]string{doctor.SysctlTCPWmem: "4096 8192 8192"}},
			{Name: "rcv", Sysctls: map[string]string{doctor.SysctlTCPWmem: "4096 16384 4194304"}}},
		Flows: []doctor.Flow{{Netns: "snd", Local: netip.MustParseAddrPort("10.0.0.1:40000"), Peer: netip.MustParseAddrPort("10.0.0.2:5201"), BytesAcked: 1 << 20},
			{Netns: "rcv", Local: netip.MustParseAddrPort("10.0.0.2:5201"), Peer: netip.MustParseAddrPort("10.0.0.1:40000")}},
	}
	if got := wmemLimits(ev, false); len(got) != 0 {
		t.Errorf("without the sockets' settings: %+v", got)
	}
	got := wmemLimits(ev, true)
	if len(got) != 1 || got[0].Where.Netns != "snd" || got[0].Value != "4096 8192 8192" || len(got[0].Applies.Flows) != 1 ||
		got[0].Applies.Flows[0] != "10.0.0.1:40000 10.0.0.2:5201" {
		t.Errorf("limits %+v, want the sender's namespace's alone", got)
	}
}
