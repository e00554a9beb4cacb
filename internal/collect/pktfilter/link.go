package pktfilter

import (
	"math"

	"golang.org/x/net/bpf"
)

// inst is an op placed in the program, its labels resolved to the indices
// of the instructions they mark.
type inst struct {
	op
	t, f int
}

// link resolves the labels of g's ops into jump offsets: it threads jumps
// to jumps, drops what cannot run (the kernel's verifier refuses unreachable
// code) and jumps to the next instruction, and routes a conditional jump
// farther than its 8-bit offset through an unconditional jump, or a copy of
// the return it goes to, placed right after it.
func (g *gen) link() []bpf.Instruction {
	at := make([]int, g.labels)
	var prog []inst
	for _, o := range g.ops {
		if o.kind == opMark {
			at[o.l] = len(prog)
			continue
		}
		prog = append(prog, inst{op: o})
	}
	for i := range prog {
		switch prog[i].kind {
		case opJump:
			prog[i].t = at[prog[i].l]
		case opBranch:
			prog[i].t, prog[i].f = at[prog[i].onTrue], at[prog[i].onFalse]
		}
	}
	for {
		thread(prog)
		keep := reachable(prog)
		next := len(prog)
		for i := len(prog) - 1; i >= 0; i-- {
			if !keep[i] {
				continue
			}
			if prog[i].kind == opJump && prog[i].t == next {
				keep[i] = false
				continue
			}
			next = i
		}
		kept := compact(prog, keep)
		if len(kept) == len(prog) {
			break
		}
		prog = kept
	}
	return layout(prog)
}

// thread points every jump past unconditional jumps; a conditional jump
// with both ways the same becomes unconditional.
func thread(prog []inst) {
	final := func(i int) int {
		for prog[i].kind == opJump { // jumps only go forward
			i = prog[i].t
		}
		return i
	}
	for i := len(prog) - 1; i >= 0; i-- {
		p := &prog[i]
		switch p.kind {
		case opJump:
			p.t = final(p.t)
		case opBranch:
			p.t, p.f = final(p.t), final(p.f)
			if p.t == p.f {
				p.kind = opJump
			}
		}
	}
}

func reachable(prog []inst) []bool {
	seen := make([]bool, len(prog))
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		if seen[i] {
			continue
		}
		seen[i] = true
		switch p := prog[i]; p.kind {
		case opJump:
			work = append(work, p.t)
		case opBranch:
			work = append(work, p.t, p.f)
		default:
			if _, ret := p.ins.(bpf.RetConstant); !ret {
				work = append(work, i+1)
			}
		}
	}
	return seen
}

// compact keeps the instructions keep marks; a target dropped goes to the
// next instruction kept, which is where a dropped jump led.
func compact(prog []inst, keep []bool) []inst {
	index := make([]int, len(prog)+1)
	for i := range prog {
		index[i+1] = index[i]
		if keep[i] {
			index[i+1]++
		}
	}
	var out []inst
	for i, p := range prog {
		if keep[i] {
			p.t, p.f = index[p.t], index[p.f]
			out = append(out, p)
		}
	}
	return out
}

// layout gives every instruction its address, adding the trampolines that
// conditional jumps need, and emits the program.
func layout(prog []inst) []bpf.Instruction {
	far := make([][2]bool, len(prog)) // the true, false way needs a trampoline
	addr := make([]int, len(prog)+1)
	for grown := true; grown; {
		for i := range prog {
			addr[i+1] = addr[i] + 1
			for _, t := range far[i] {
				if t {
					addr[i+1]++
				}
			}
		}
		grown = false
		for i, p := range prog {
			if p.kind != opBranch {
				continue
			}
			for way, to := range [2]int{p.t, p.f} {
				if !far[i][way] && addr[to]-addr[i]-1 > math.MaxUint8 {
					far[i][way], grown = true, true
				}
			}
		}
	}
	out := make([]bpf.Instruction, 0, addr[len(prog)])
	for i, p := range prog {
		switch p.kind {
		case opPlain:
			out = append(out, p.ins)
		case opJump:
			out = append(out, bpf.Jump{Skip: uint32(addr[p.t] - addr[i] - 1)})
		case opBranch:
			var trampolines []bpf.Instruction
			skip := func(way, to int) uint8 {
				if !far[i][way] {
					return uint8(addr[to] - addr[i] - 1)
				}
				k := len(trampolines)
				if ret, ok := prog[to].ins.(bpf.RetConstant); ok {
					trampolines = append(trampolines, ret)
				} else {
					trampolines = append(trampolines, bpf.Jump{Skip: uint32(addr[to] - (addr[i] + 1 + k) - 1)})
				}
				return uint8(k)
			}
			st, sf := skip(0, p.t), skip(1, p.f)
			if p.x {
				out = append(out, bpf.JumpIfX{Cond: p.cond, SkipTrue: st, SkipFalse: sf})
			} else {
				out = append(out, bpf.JumpIf{Cond: p.cond, Val: p.val, SkipTrue: st, SkipFalse: sf})
			}
			out = append(out, trampolines...)
		}
	}
	return out
}
