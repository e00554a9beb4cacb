package host

import (
	"strings"
	"testing"
)

func TestKallsymsResolve(t *testing.T) {
	k, err := ParseKallsyms(strings.NewReader(`ffffffff81000000 T _stext
ffffffff81a00000 t nf_hook_slow
ffffffff81a00100 T tcp_v4_rcv
ffffffff82000000 D some_data
0000000000000000 T hidden_without_privileges
`))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{
		0xffffffff81a00010: "nf_hook_slow+0x10",
		0xffffffff81a00100: "tcp_v4_rcv+0x0",
		0xffffffff80000000: "",
	} {
		if got := k.Resolve(addr); got != want {
			t.Errorf("Resolve(%#x) = %q, want %q", addr, got, want)
		}
	}
}
