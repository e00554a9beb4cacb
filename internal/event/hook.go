package event

// Hook is one kernel attach point of a family: plain data, which the
// loader (probe) attaches and `skbtrace events` lists without loading.
type Hook struct {
	Program string // program name in the BPF object (wire.Prog...)
	Kind    HookKind
	Group   string // tracepoint group, for classic tracepoints
	Name    string // tracepoint or kernel function name
	// Args, for fentry and fexit, is how many arguments the program
	// expects the function to take: a kernel whose function takes another
	// number does not get the hook. For a BTF tracepoint, the fewest it
	// must pass: a tracepoint's later version (0, any).
	Args int
}

// HookKind says how a program attaches.
type HookKind int

const (
	// Tracepoint is a classic tracepoint (needs tracefs for its id).
	Tracepoint HookKind = iota
	// BTFTracepoint is a tp_btf program (needs the kernel's BTF).
	BTFTracepoint
	// Iterator is a BPF iterator over a map: loaded with its family, run on
	// demand rather than attached to an event.
	Iterator
	// FEntry and FExit attach to a kernel function's entry and return,
	// where a kernel lacks the tracepoint (needs BTF and ftrace).
	FEntry
	FExit
)

func (h Hook) String() string {
	switch h.Kind {
	case BTFTracepoint:
		return "tp_btf/" + h.Name
	case Iterator:
		return "iter/" + h.Name
	case FEntry:
		return "fentry/" + h.Name
	case FExit:
		return "fexit/" + h.Name
	}
	return h.Group + ":" + h.Name
}

// OptionalSlot is an attach point, with its alternatives, that a family
// can do without.
type OptionalSlot struct {
	Hooks   []Hook
	Without string // what the family loses where none of Hooks attaches
}

// TracepointHook attaches prog to the classic tracepoint group:name.
func TracepointHook(prog, group, name string) Hook {
	return Hook{Program: prog, Kind: Tracepoint, Group: group, Name: name}
}

// BTFHook attaches prog to the tp_btf tracepoint name.
func BTFHook(prog, name string) Hook {
	return Hook{Program: prog, Kind: BTFTracepoint, Name: name}
}

// FEntryHook attaches prog to the entry of fn, which must take args arguments.
func FEntryHook(prog, fn string, args int) Hook {
	return Hook{Program: prog, Kind: FEntry, Name: fn, Args: args}
}

// FExitHook attaches prog to the return of fn, which must take args arguments.
func FExitHook(prog, fn string, args int) Hook {
	return Hook{Program: prog, Kind: FExit, Name: fn, Args: args}
}

// IterHook is prog, an iterator over the family's socket-storage map.
func IterHook(prog string) Hook {
	return Hook{Program: prog, Kind: Iterator, Name: "bpf_sk_storage_map"}
}

// Slots gives each hook an attach point of its own, with no alternative.
func Slots(hooks ...Hook) [][]Hook {
	out := make([][]Hook, len(hooks))
	for i, h := range hooks {
		out[i] = []Hook{h}
	}
	return out
}
