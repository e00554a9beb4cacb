package probe

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

func isFetchAdd(ins asm.Instruction) bool {
	return ins.OpCode.Class() == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode && ins.OpCode.AtomicOp() == asm.FetchAdd
}

// Kernels before 5.12 reject the object's fetch-and-adds wherever they are,
// dead code included: none may survive the rewrite, and nothing else may change.
func TestWithoutAtomicFetchRemovesEveryFetchAdd(t *testing.T) {
	spec, err := LoadSkbtrace()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for name, ps := range spec.Programs {
		out := withoutAtomicFetch(ps.Instructions)
		if len(out) != len(ps.Instructions) {
			t.Fatalf("%s: %d instructions became %d", name, len(ps.Instructions), len(out))
		}
		for i, ins := range ps.Instructions {
			if !isFetchAdd(ins) {
				if out[i].OpCode != ins.OpCode || out[i].Constant != ins.Constant {
					t.Fatalf("%s: instruction %d changed: %v -> %v", name, i, ins, out[i])
				}
				continue
			}
			found++
			if isFetchAdd(out[i]) || out[i].Dst != ins.Src || out[i].Constant != 0 {
				t.Fatalf("%s: instruction %d is %v, want r%d = 0", name, i, out[i], ins.Src)
			}
		}
	}
	if found == 0 {
		t.Fatal("the object has no fetch-and-add: the sequence counter changed, and this test with it")
	}
}

func TestLastLinesAreTheVerifiersConclusion(t *testing.T) {
	log := []string{"0: R1=ctx()", "1: (79) r2 = *(u64 *)(r1 +16)", "func 'tcp_retransmit_skb' doesn't have 3-th argument", "invalid bpf_context access off=16 size=8", "processed 2 insns (limit 1000000)", ""}
	got := lastLines(log, 2)
	want := "func 'tcp_retransmit_skb' doesn't have 3-th argument / invalid bpf_context access off=16 size=8"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if lastLines(nil, 3) != "(no verifier log)" {
		t.Fatal("an empty log must say so")
	}
}
