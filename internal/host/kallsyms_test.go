package host

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestKallsymsResolve(t *testing.T) {
	k, err := ParseKallsyms(strings.NewReader(`ffffffff81000000 T _stext
ffffffffc0a00000 t nf_nat_ipv4_fn	[nf_nat]
ffffffff81a00000 t nf_hook_slow
ffffffff81a00100 T tcp_v4_rcv
ffffffff82000000 D some_data
0000000000000000 T hidden_without_privileges
zzzz T not_an_address
ffffffff81b00000 T
`))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{
		0xffffffff81a00010: "nf_hook_slow+0x10",
		0xffffffff81a00100: "tcp_v4_rcv+0x0",
		0xffffffff82000010: "tcp_v4_rcv+0x5fff10",
		0xffffffffc0a00020: "nf_nat_ipv4_fn+0x20",
		0xffffffff80000000: "",
	} {
		if got := k.Resolve(addr); got != want {
			t.Errorf("Resolve(%#x) = %q, want %q", addr, got, want)
		}
	}
	for addr, want := range map[uint64]string{
		0xffffffff81000004: "_stext",
		0xffffffffc0a00001: "nf_nat_ipv4_fn",
		0xffffffff80000000: "",
	} {
		if got := k.Func(addr); got != want {
			t.Errorf("Func(%#x) = %q, want %q", addr, got, want)
		}
	}
}

func TestKallsymsEmpty(t *testing.T) {
	k, err := ParseKallsyms(strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	if got := k.Resolve(0xffffffff81000000); got != "" {
		t.Errorf("Resolve on no symbols = %q, want \"\"", got)
	}
}

// BenchmarkParseKallsyms parses a kallsyms like this machine's: 120,000
// text symbols among 122,000 lines, some in modules. Its B/op is what
// loading the symbols costs a recording with skb_drop.
func BenchmarkParseKallsyms(b *testing.B) {
	var buf bytes.Buffer
	for i := range 122000 {
		switch {
		case i%60 == 0:
			fmt.Fprintf(&buf, "%x d some_data_%d\n", 0xffffffff83000000+uint64(i)*8, i)
		case i%10 == 0:
			fmt.Fprintf(&buf, "%x t module_function_%d\t[some_module]\n", 0xffffffffc0000000+uint64(i)*64, i)
		default:
			fmt.Fprintf(&buf, "%x T kernel_function_number_%d\n", 0xffffffff81000000+uint64(i)*64, i)
		}
	}
	in := buf.Bytes()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseKallsyms(bytes.NewReader(in)); err != nil {
			b.Fatal(err)
		}
	}
}
