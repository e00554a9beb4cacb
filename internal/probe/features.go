package probe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Features are what the loader adapts the one BPF object to. Each is probed
// on the running kernel, never inferred from its version.
type Features struct {
	// KernelSeq: BPF atomic fetch-and-add (5.12) and syscall programs
	// (5.14), which the kernel-side sequence counter needs. Without them the
	// recorder numbers events in ring-buffer order.
	KernelSeq bool
	// SkStorage: tracing programs may use socket storage (5.11). Without it
	// per-socket state lives in hash maps keyed by the socket.
	SkStorage bool
	// Arguments tracepoints gained over time, from their BTF prototypes:
	// kfree_skb's drop reason (5.17), tcp_send_reset's reason (6.10) and
	// tcp_retransmit_skb's error (6.13; before, it fires only on success).
	DropReasons, ResetReasons, RetransErr bool
	// DropRxSk: kfree_skb's rx_sk (6.12), the receiving socket of a drop.
	DropRxSk bool
}

// String says how the loader adapts, for events and record.
func (f Features) String() string {
	seq := "sequence numbers from the kernel's counter"
	if !f.KernelSeq {
		seq = "sequence numbers in ring-buffer order (no BPF atomic fetch or syscall programs)"
	}
	state := "per-socket state in socket storage"
	if !f.SkStorage {
		state = "per-socket state in hash maps (no socket storage for tracing programs)"
	}
	out := seq + "; " + state
	if !f.DropReasons {
		out += "; drops without reasons (kfree_skb has none before 5.17)"
	}
	if !f.ResetReasons {
		out += "; resets sent without reasons (tcp_send_reset has none before 6.10)"
	}
	return out
}

var featureCache struct {
	sync.Once
	f   Features
	err error
}

// ProbeFeatures probes the running kernel once; it needs the privileges
// that loading programs needs. It lifts the memlock limit first: kernels
// before 5.11 charge BPF memory to it, and a probe that runs before
// anything else is loaded would otherwise fail there with EPERM.
func ProbeFeatures() (Features, error) {
	featureCache.Do(func() {
		if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
			featureCache.err = fmt.Errorf("raising the memlock limit: %w", err)
			return
		}
		f := &featureCache.f
		fetch, err := haveAtomicFetch()
		if err != nil {
			featureCache.err = err
			return
		}
		syscallProgs := features.HaveProgramType(ebpf.Syscall)
		if syscallProgs != nil && !errors.Is(syscallProgs, ebpf.ErrNotSupported) {
			featureCache.err = fmt.Errorf("probing syscall programs: %w", syscallProgs)
			return
		}
		f.KernelSeq = fetch && syscallProgs == nil
		f.SkStorage, featureCache.err = haveTracingSkStorage()
		f.DropReasons = tracepointHasArgs("kfree_skb", 3)
		f.ResetReasons = tracepointHasArgs("tcp_send_reset", 3)
		f.RetransErr = tracepointHasArgs("tcp_retransmit_skb", 3)
		f.DropRxSk = tracepointHasArgs("kfree_skb", 4)
	})
	return featureCache.f, featureCache.err
}

// haveAtomicFetch loads a program that fetch-adds on its stack: kernels
// before 5.12 reject the instruction as using reserved fields (EINVAL).
func haveAtomicFetch() (bool, error) {
	spec := &ebpf.ProgramSpec{
		Type: ebpf.SocketFilter,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R1, 0),
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R1, 1),
			asm.FetchAdd.Mem(asm.RFP, asm.R1, asm.DWord, -8),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "GPL",
	}
	return probeLoad(spec, "atomic fetch-and-add")
}

// haveTracingSkStorage calls bpf_sk_storage_get from a BTF tracepoint with
// wrong arguments: a kernel that knows the helper there rejects the
// arguments (EACCES), one that does not rejects the call (EINVAL).
func haveTracingSkStorage() (bool, error) {
	spec := &ebpf.ProgramSpec{
		Type:       ebpf.Tracing,
		AttachType: ebpf.AttachTraceRawTp,
		AttachTo:   "tcp_destroy_sock",
		Instructions: asm.Instructions{
			asm.FnSkStorageGet.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "GPL",
	}
	prog, err := newProbeProgram(spec)
	if err == nil {
		prog.Close()
		return true, nil
	}
	switch {
	case errors.Is(err, unix.EACCES):
		return true, nil
	case errors.Is(err, unix.EINVAL):
		return false, nil
	case errors.Is(err, unix.EPERM):
		return false, fmt.Errorf("probing socket storage in tracing programs: %w", ErrPermission)
	}
	return false, fmt.Errorf("probing socket storage in tracing programs: %w", err)
}

func probeLoad(spec *ebpf.ProgramSpec, what string) (bool, error) {
	prog, err := newProbeProgram(spec)
	switch {
	case err == nil:
		prog.Close()
		return true, nil
	case errors.Is(err, unix.EINVAL):
		return false, nil
	case errors.Is(err, unix.EPERM):
		return false, fmt.Errorf("probing %s: %w", what, ErrPermission)
	}
	return false, fmt.Errorf("probing %s: %w", what, err)
}

// withoutAtomicFetch replaces each fetch-and-add with a zero in the
// register that would receive the old value: the sequence counter's only
// use, whose numbers the recorder then assigns itself.
func withoutAtomicFetch(insns asm.Instructions) asm.Instructions {
	out := make(asm.Instructions, len(insns))
	copy(out, insns)
	for i, ins := range out {
		if ins.OpCode.Class() == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode && ins.OpCode.AtomicOp() == asm.FetchAdd {
			mov := asm.Mov.Imm(ins.Src, 0)
			mov.Metadata = ins.Metadata
			out[i] = mov
		}
	}
	return out
}

func tracepointHasArgs(name string, n int) bool {
	got, err := TracepointArgs(name)
	return err == nil && got >= n
}

// TracepointArgs is how many arguments a tracepoint passes to tp_btf
// programs on this kernel, from its BTF prototype (btf_trace_<name>, whose
// first parameter is the tracepoint's private data).
func TracepointArgs(name string) (int, error) {
	spec, err := kernelTypes.Kernel()
	if err != nil {
		return 0, fmt.Errorf("reading kernel BTF: %w", err)
	}
	var typedef *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+name, &typedef); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return 0, fmt.Errorf("tracepoint %s is not in this kernel", name)
		}
		return 0, fmt.Errorf("looking up tracepoint %s in kernel BTF: %w", name, err)
	}
	ptr, ok := typedef.Type.(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("tracepoint %s: btf_trace_%s is not a function pointer", name, name)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return 0, fmt.Errorf("tracepoint %s: btf_trace_%s is not a function pointer", name, name)
	}
	return len(proto.Params) - 1, nil
}

// FunctionArgs is how many arguments a kernel function takes, from BTF;
// an error says it is not there to trace.
func FunctionArgs(name string) (int, error) {
	spec, err := kernelTypes.Kernel()
	if err != nil {
		return 0, fmt.Errorf("reading kernel BTF: %w", err)
	}
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		if errors.Is(err, btf.ErrNotFound) {
			return 0, fmt.Errorf("function %s is not in this kernel's BTF", name)
		}
		return 0, fmt.Errorf("looking up function %s in kernel BTF: %w", name, err)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return 0, fmt.Errorf("function %s has no prototype in kernel BTF", name)
	}
	return len(proto.Params), nil
}

// newProbeProgram loads a feature probe with the process's decoded kernel
// BTF (ebpf.NewProgram would decode it afresh for a tracing program's target).
func newProbeProgram(spec *ebpf.ProgramSpec) (*ebpf.Program, error) {
	coll, err := ebpf.NewCollectionWithOptions(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"probe": spec}},
		ebpf.CollectionOptions{Cache: kernelTypes})
	if err != nil {
		return nil, err
	}
	defer coll.Close()
	return coll.DetachProgram("probe"), nil
}
