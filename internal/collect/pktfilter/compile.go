package pktfilter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// maxInstructions is the kernel's limit on a classic BPF program.
const maxInstructions = 4096

// Compile turns a pcap-filter expression into a classic BPF program over a
// packet that starts at its IP header; the program returns non-zero for the
// packets that match.
func Compile(expr string) ([]bpf.Instruction, error) {
	n, err := parse(expr)
	if err != nil {
		return nil, err
	}
	g := &gen{}
	accept, reject := g.label(), g.label()
	g.test(n, accept, reject)
	g.mark(accept)
	g.emit(bpf.RetConstant{Val: acceptValue})
	g.mark(reject)
	g.emit(bpf.RetConstant{Val: 0})
	prog := g.link()
	if len(prog) > maxInstructions {
		return nil, &Error{Expr: expr, Token: expr, Msg: fmt.Sprintf(
			"the expression compiles to %d instructions; classic BPF allows %d", len(prog), maxInstructions)}
	}
	return prog, nil
}
