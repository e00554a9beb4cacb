package probe

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/net/bpf"
)

// packetFilterStub is the function in bpf/common.bpf.h whose body -F replaces.
const packetFilterStub = "packet_filter"

// The translated filter's registers. The arguments arrive in R1-R3 (data,
// linear, len); helper calls clobber R1-R5, so the classic machine's state
// lives in the callee-saved registers.
const (
	regData   = asm.R6
	regLinear = asm.R7
	regA      = asm.R8
	regX      = asm.R9
)

// Stack slots below the frame pointer: the packet's length, the probe-read
// buffer, then the classic machine's 16 scratch words.
const (
	slotLen     = -8
	slotRead    = -16
	slotScratch = -24
)

// jumpTarget marks an eBPF jump whose offset is known only once every
// classic instruction has its eBPF start.
type jumpTarget struct {
	at     int // index of the jump in the eBPF body
	target int // classic instruction index, or reject
}

const reject = -1

// filterBuilder translates a classic BPF program into eBPF, one classic
// instruction at a time, each a block of eBPF instructions.
type filterBuilder struct {
	body  asm.Instructions
	jumps []jumpTarget
}

func (b *filterBuilder) emit(ins ...asm.Instruction) { b.body = append(b.body, ins...) }

// jump emits a jump (conditional or not) to a classic instruction or to reject.
func (b *filterBuilder) jump(ins asm.Instruction, target int) {
	b.jumps = append(b.jumps, jumpTarget{at: len(b.body), target: target})
	b.emit(ins)
}

func jump32(op asm.JumpOp) asm.OpCode {
	return asm.OpCode(asm.Jump32Class).SetJumpOp(op).SetSource(asm.ImmSource)
}

func ja() asm.Instruction { return asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource)} }

// cond is a 32-bit compare of A against an immediate or X; cBPF compares unsigned 32-bit values.
func cond(op asm.JumpOp, src asm.Source, val uint32) asm.Instruction {
	ins := asm.Instruction{OpCode: asm.OpCode(asm.Jump32Class).SetJumpOp(op).SetSource(src), Dst: regA}
	if src == asm.RegSource {
		ins.Src = regX
	} else {
		ins.Constant = int64(int32(val))
	}
	return ins
}

// load reads size bytes at offset off (constant) or X+off (indirect) into
// dst, in host order; a read beyond the linear data rejects the packet, as
// classic BPF rejects one past the packet's end.
func (b *filterBuilder) load(dst asm.Register, off uint32, size int, indirect bool) {
	if uint64(off)+uint64(size) > math.MaxInt32 {
		b.jump(ja(), reject)
		return
	}
	if indirect {
		b.emit(asm.Mov.Reg32(asm.R3, regX), asm.Add.Imm(asm.R3, int32(off)),
			asm.Mov.Reg(asm.R1, asm.R3), asm.Add.Imm(asm.R1, int32(size)))
		b.jump(asm.Instruction{OpCode: asm.JGT.Op(asm.RegSource), Dst: asm.R1, Src: regLinear}, reject)
		b.emit(asm.Add.Reg(asm.R3, regData))
	} else {
		b.jump(asm.Instruction{OpCode: asm.JLT.Op(asm.ImmSource), Dst: regLinear, Constant: int64(off) + int64(size)}, reject)
		b.emit(asm.Mov.Reg(asm.R3, regData), asm.Add.Imm(asm.R3, int32(off)))
	}
	b.emit(asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, slotRead), asm.Mov.Imm(asm.R2, int32(size)),
		asm.FnProbeReadKernel.Call())
	b.jump(asm.Instruction{OpCode: asm.JNE.Op(asm.ImmSource), Dst: asm.R0}, reject)
	switch size {
	case 1:
		b.emit(asm.LoadMem(dst, asm.RFP, slotRead, asm.Byte))
	case 2:
		b.emit(asm.LoadMem(dst, asm.RFP, slotRead, asm.Half), asm.HostTo(asm.BE, dst, asm.Half))
	default:
		b.emit(asm.LoadMem(dst, asm.RFP, slotRead, asm.Word), asm.HostTo(asm.BE, dst, asm.Word))
	}
}

// returnNonZero ends the filter with 0 when reg is zero and 1 otherwise:
// the caller sees a bool.
func (b *filterBuilder) returnNonZero(reg asm.Register) {
	b.emit(asm.Mov.Imm(asm.R0, 0),
		asm.Instruction{OpCode: jump32(asm.JEq), Dst: reg, Offset: 1},
		asm.Mov.Imm(asm.R0, 1), asm.Return())
}

func registerOf(r bpf.Register) asm.Register {
	if r == bpf.RegX {
		return regX
	}
	return regA
}

var aluOps = map[bpf.ALUOp]asm.ALUOp{
	bpf.ALUOpAdd: asm.Add, bpf.ALUOpSub: asm.Sub, bpf.ALUOpMul: asm.Mul, bpf.ALUOpDiv: asm.Div,
	bpf.ALUOpOr: asm.Or, bpf.ALUOpAnd: asm.And, bpf.ALUOpShiftLeft: asm.LSh, bpf.ALUOpShiftRight: asm.RSh,
	bpf.ALUOpMod: asm.Mod, bpf.ALUOpXor: asm.Xor,
}

// jumpOps maps classic conditions to eBPF jumps; BitsNotSet is JSet with the branches swapped.
var jumpOps = map[bpf.JumpTest]asm.JumpOp{
	bpf.JumpEqual: asm.JEq, bpf.JumpNotEqual: asm.JNE, bpf.JumpGreaterThan: asm.JGT, bpf.JumpLessThan: asm.JLT,
	bpf.JumpGreaterOrEqual: asm.JGE, bpf.JumpLessOrEqual: asm.JLE, bpf.JumpBitsSet: asm.JSet, bpf.JumpBitsNotSet: asm.JSet,
}

// TranslatePacketFilter turns a classic BPF program over a packet that
// starts at its IP header into the body of packet_filter: the same verdicts,
// reading the packet with probe reads (tracing programs get no packet
// pointers) and returning 1 to keep the packet, 0 to leave it out.
func TranslatePacketFilter(prog []bpf.Instruction) (asm.Instructions, error) {
	if len(prog) == 0 {
		return nil, errors.New("the packet filter is empty")
	}
	b := &filterBuilder{}
	b.emit(asm.Mov.Reg(regData, asm.R1), asm.Mov.Reg(regLinear, asm.R2),
		asm.StoreMem(asm.RFP, slotLen, asm.R3, asm.Word),
		asm.Mov.Imm32(regA, 0), asm.Mov.Imm32(regX, 0))
	for n := range scratchUsed(prog) {
		b.emit(asm.StoreImm(asm.RFP, scratchSlot(n), 0, asm.Word))
	}
	starts := make([]int, len(prog))
	for i, ins := range prog {
		starts[i] = len(b.body)
		if err := b.translate(i, ins, len(prog)); err != nil {
			return nil, fmt.Errorf("instruction %d (%v): %w", i, ins, err)
		}
	}
	rejectAt := len(b.body)
	if slices.ContainsFunc(b.jumps, func(j jumpTarget) bool { return j.target == reject }) {
		b.emit(asm.Mov.Imm(asm.R0, 0), asm.Return()) // the verifier refuses unreachable code
	}
	for _, j := range b.jumps {
		to := rejectAt
		if j.target != reject {
			to = starts[j.target]
		}
		off := to - j.at - 1
		if off > math.MaxInt16 {
			return nil, errors.New("the packet filter is too long for eBPF jumps")
		}
		b.body[j.at].Offset = int16(off)
	}
	return b.body, nil
}

func scratchSlot(n int) int16 { return int16(slotScratch - 8*n) }

func scratchUsed(prog []bpf.Instruction) map[int]bool {
	used := map[int]bool{}
	for _, ins := range prog {
		switch ins := ins.(type) {
		case bpf.LoadScratch:
			used[ins.N] = true
		case bpf.StoreScratch:
			used[ins.N] = true
		}
	}
	return used
}

func (b *filterBuilder) translate(i int, ins bpf.Instruction, n int) error {
	target := func(skip uint32) (int, error) {
		t := i + 1 + int(skip)
		if t >= n {
			return 0, errors.New("jumps past the end")
		}
		return t, nil
	}
	switch ins := ins.(type) {
	case bpf.LoadAbsolute:
		if ins.Size != 1 && ins.Size != 2 && ins.Size != 4 {
			return fmt.Errorf("load of %d bytes", ins.Size)
		}
		b.load(regA, ins.Off, ins.Size, false)
	case bpf.LoadIndirect:
		if ins.Size != 1 && ins.Size != 2 && ins.Size != 4 {
			return fmt.Errorf("load of %d bytes", ins.Size)
		}
		b.load(regA, ins.Off, ins.Size, true)
	case bpf.LoadMemShift:
		b.load(regX, ins.Off, 1, false)
		b.emit(asm.And.Imm32(regX, 0xf), asm.LSh.Imm32(regX, 2))
	case bpf.LoadConstant:
		b.emit(asm.Mov.Imm32(registerOf(ins.Dst), int32(ins.Val)))
	case bpf.LoadScratch:
		if ins.N < 0 || ins.N > 15 {
			return errors.New("scratch slot out of range")
		}
		b.emit(asm.LoadMem(registerOf(ins.Dst), asm.RFP, scratchSlot(ins.N), asm.Word))
	case bpf.StoreScratch:
		if ins.N < 0 || ins.N > 15 {
			return errors.New("scratch slot out of range")
		}
		b.emit(asm.StoreMem(asm.RFP, scratchSlot(ins.N), registerOf(ins.Src), asm.Word))
	case bpf.LoadExtension:
		if ins.Num != bpf.ExtLen {
			return errors.New("only the packet length extension is supported")
		}
		b.emit(asm.LoadMem(regA, asm.RFP, slotLen, asm.Word))
	case bpf.ALUOpConstant:
		op, ok := aluOps[ins.Op]
		if !ok {
			return errors.New("unknown arithmetic operation")
		}
		if (ins.Op == bpf.ALUOpDiv || ins.Op == bpf.ALUOpMod) && ins.Val == 0 {
			return errors.New("division by zero")
		}
		if (ins.Op == bpf.ALUOpShiftLeft || ins.Op == bpf.ALUOpShiftRight) && ins.Val >= 32 {
			return errors.New("shift by 32 or more")
		}
		b.emit(op.Imm32(regA, int32(ins.Val)))
	case bpf.ALUOpX:
		op, ok := aluOps[ins.Op]
		if !ok {
			return errors.New("unknown arithmetic operation")
		}
		if ins.Op == bpf.ALUOpDiv || ins.Op == bpf.ALUOpMod { // classic BPF rejects the packet on X == 0
			b.jump(asm.Instruction{OpCode: jump32(asm.JEq), Dst: regX}, reject)
		}
		b.emit(op.Reg32(regA, regX))
	case bpf.NegateA:
		b.emit(asm.Neg.Imm32(regA, 0))
	case bpf.Jump:
		t, err := target(ins.Skip)
		if err != nil {
			return err
		}
		b.jump(ja(), t)
	case bpf.JumpIf:
		return b.condJump(i, ins.Cond, asm.ImmSource, ins.Val, uint32(ins.SkipTrue), uint32(ins.SkipFalse), target)
	case bpf.JumpIfX:
		return b.condJump(i, ins.Cond, asm.RegSource, 0, uint32(ins.SkipTrue), uint32(ins.SkipFalse), target)
	case bpf.TAX:
		b.emit(asm.Mov.Reg32(regX, regA))
	case bpf.TXA:
		b.emit(asm.Mov.Reg32(regA, regX))
	case bpf.RetA:
		b.returnNonZero(regA)
	case bpf.RetConstant:
		ret := int32(0)
		if ins.Val != 0 {
			ret = 1
		}
		b.emit(asm.Mov.Imm(asm.R0, ret), asm.Return())
	default:
		return errors.New("not supported in a packet filter")
	}
	return nil
}

func (b *filterBuilder) condJump(i int, test bpf.JumpTest, src asm.Source, val, skipTrue, skipFalse uint32,
	target func(uint32) (int, error)) error {
	op, ok := jumpOps[test]
	if !ok {
		return errors.New("unknown jump condition")
	}
	if test == bpf.JumpBitsNotSet {
		skipTrue, skipFalse = skipFalse, skipTrue
	}
	t, err := target(skipTrue)
	if err != nil {
		return err
	}
	f, err := target(skipFalse)
	if err != nil {
		return err
	}
	b.jump(cond(op, src, val), t)
	if f != i+1 {
		b.jump(ja(), f)
	}
	return nil
}

// injectPacketFilter returns insns with the stub's body replaced by body,
// or insns unchanged when the program does not call the stub.
func injectPacketFilter(insns, body asm.Instructions) asm.Instructions {
	start := -1
	for i, ins := range insns {
		if ins.Symbol() == packetFilterStub {
			start = i
			break
		}
	}
	if start < 0 {
		return insns
	}
	end := start + 1
	for end < len(insns) && insns[end].Symbol() == "" {
		end++
	}
	out := make(asm.Instructions, 0, len(insns)-(end-start)+len(body))
	out = append(out, insns[:start]...)
	out = append(out, body[0].WithMetadata(insns[start].Metadata))
	out = append(out, body[1:]...)
	return append(out, insns[end:]...)
}
