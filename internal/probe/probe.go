package probe

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// contextUnit keeps the per-CPU context that --context reads. It is not
// one of Config.Units: Open fails when it cannot run.
var contextUnit = Unit{
	Name: "context",
	Slots: [][]event.Hook{
		{{Program: SkbtraceProgContextSoftirqEnter, Kind: event.BTFTracepoint, Name: "softirq_entry"}},
		{{Program: SkbtraceProgContextSoftirqExit, Kind: event.BTFTracepoint, Name: "softirq_exit"}},
		{{Program: SkbtraceProgContextHardirqEnter, Kind: event.BTFTracepoint, Name: "irq_handler_entry"}},
		{{Program: SkbtraceProgContextHardirqExit, Kind: event.BTFTracepoint, Name: "irq_handler_exit"}},
	},
}

// Unit is a group of hooks that runs whole or not at all: an event family.
type Unit struct {
	Name string
	// Slots are the unit's attach points, each with its alternatives in
	// order of preference: the first that loads and attaches is used.
	Slots [][]event.Hook
	// Optional are attach points the unit runs without, at a cost each names.
	Optional []event.OptionalSlot
	// Required makes Open fail when the unit cannot run; otherwise it is
	// skipped, with the reason, and the others run.
	Required bool
}

// ChooseOptional adds to hooks the first of o's hooks that try accepts or,
// when none does, adds to without what the unit goes without and why each
// hook failed.
func ChooseOptional(o event.OptionalSlot, hooks []event.Hook, without []string, try func(event.Hook) error) ([]event.Hook, []string) {
	var errs []string
	for _, h := range o.Hooks {
		if err := try(h); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", h, err))
			continue
		}
		if !slices.Contains(hooks, h) {
			hooks = append(hooks, h)
		}
		return hooks, without
	}
	return hooks, append(without, fmt.Sprintf("%s (%s)", o.Without, strings.Join(errs, "; ")))
}

// UnitStatus is what became of a unit: the hooks it runs on, or why it
// does not run.
type UnitStatus struct {
	Name  string
	Hooks []event.Hook
	// Without says, for each optional slot that did not attach, what the
	// unit loses and why the hooks failed.
	Without []string
	Err     error
}

// Config selects the units to load and sizes the ring buffer.
type Config struct {
	Units     []Unit
	RingBytes uint32 // a power of two of at least one page; 0 keeps the object's default
	Filter    Filter
	// Interval is how long tcp_retrans folds a socket's retransmits; 0 keeps one second.
	Interval time.Duration
	// RTTInterval is the least time between two tcp_rtt samples of a socket; 0 keeps 10 ms.
	RTTInterval time.Duration
	// Consts sets read-only program variables (feature switches of programs
	// that several families share) before load.
	Consts map[string]any
}

// Session is a loaded and attached set of programs. Close detaches and
// unloads everything; it is safe to call more than once.
type Session struct {
	spec     *ebpf.CollectionSpec
	coll     *ebpf.Collection // the maps and global variables every program shares
	progs    map[string]*ebpf.Program
	progErrs map[string]error
	links    map[event.Hook]link.Link
	ring     *ringbuf.Reader
	features Features
	units    []UnitStatus
	// packetFilter replaces the packet_filter stub in every program that calls it (-F).
	packetFilter asm.Instructions
}

// ErrPermission is returned when the caller may not load BPF programs.
var ErrPermission = errors.New("permission denied (run as root or grant CAP_BPF+CAP_PERFMON)")

// Open creates the shared maps, then loads and attaches each unit on its
// own, so that a program this kernel rejects costs only its unit.
func Open(cfg Config) (*Session, error) {
	feat, err := ProbeFeatures() // lifts the memlock limit too
	if err != nil {
		return nil, err
	}
	spec, err := LoadSkbtrace()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF object: %w", err)
	}
	if err := configure(spec, cfg, feat); err != nil {
		return nil, err
	}
	maps := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	coll, err := ebpf.NewCollectionWithOptions(maps, ebpf.CollectionOptions{Cache: kernelTypes})
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("creating BPF maps: %w", ErrPermission)
		}
		return nil, fmt.Errorf("creating BPF maps: %w", err)
	}
	s := &Session{spec: spec, coll: coll, progs: map[string]*ebpf.Program{}, progErrs: map[string]error{},
		links: map[event.Hook]link.Link{}, features: feat}
	if cfg.Filter.Packets != nil {
		if s.packetFilter, err = TranslatePacketFilter(cfg.Filter.Packets); err != nil {
			coll.Close()
			return nil, fmt.Errorf("translating the packet filter to eBPF: %w", err)
		}
	}
	if feat.KernelSeq {
		// The first run also probes whether programs can be run at all, by
		// running a socket filter on a packet it then frees: done before
		// attaching, that free is not recorded as a drop.
		err := s.loadProgram(event.Hook{Program: SkbtraceProgSeqReserve})
		if err == nil {
			_, err = s.ReserveSeq(0)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	if cfg.Filter.Contexts != 0 {
		// Before the families, so that none writes an event under a context not yet known.
		if st := s.openUnit(contextUnit); st.Err != nil {
			s.Close()
			return nil, fmt.Errorf("following softirq and interrupt entry for the context filter: %w", st.Err)
		}
	}
	for _, u := range cfg.Units {
		st := s.openUnit(u)
		if st.Err != nil && u.Required {
			s.Close()
			return nil, fmt.Errorf("event family %s cannot run: %w", u.Name, st.Err)
		}
		s.units = append(s.units, st)
	}
	s.ring, err = ringbuf.NewReader(coll.Maps[SkbtraceMapEvents])
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("opening the event ring buffer: %w", err)
	}
	return s, nil
}

// configure sets what programs read as constants: filters, intervals, and
// the switches that prune what this kernel lacks.
func configure(spec *ebpf.CollectionSpec, cfg Config, feat Features) error {
	if cfg.RingBytes != 0 {
		spec.Maps[SkbtraceMapEvents].MaxEntries = cfg.RingBytes
	}
	if err := setFilter(spec, cfg.Filter); err != nil {
		return err
	}
	hz := jiffiesPerSecond()
	consts := map[string]any{
		SkbtraceVarJiffiesPerSec: hz,
		SkbtraceVarWakeupBytes:   uint64(spec.Maps[SkbtraceMapEvents].MaxEntries / 8),
		SkbtraceVarUseSkStorage:  feat.SkStorage,
		// Arguments a tracepoint gained over time, read only where the prototype has them.
		SkbtraceVarRetransHasErr:  feat.RetransErr,
		SkbtraceVarResetHasReason: feat.ResetReasons,
		SkbtraceVarDropHasReason:  feat.DropReasons,
		SkbtraceVarDropHasRxSk:    feat.DropRxSk,
	}
	for name, v := range cfg.Consts {
		consts[name] = v
	}
	if cfg.Interval > 0 {
		consts[SkbtraceVarIntervalJiffies] = max(uint64(cfg.Interval)*hz/uint64(time.Second), 1)
	}
	if cfg.RTTInterval > 0 {
		tick := uint64(time.Second) / hz
		consts[SkbtraceVarRttIntervalJiffies] = max((uint64(cfg.RTTInterval)+tick-1)/tick, 1)
	}
	for name, v := range consts {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	// The fallback for socket storage (SOCK_STATE's name_by_sock maps),
	// where the kernel has socket storage: as small as the kernel allows.
	if feat.SkStorage {
		for name, m := range spec.Maps {
			if strings.HasSuffix(name, "_by_sock") {
				m.MaxEntries = 1
			}
		}
	}
	return nil
}

// openUnit picks, for each slot, the first alternative that loads and
// attaches. A unit that cannot run gives back what it attached.
func (s *Session) openUnit(u Unit) UnitStatus {
	st := UnitStatus{Name: u.Name}
	var attached []event.Hook
	for _, slot := range u.Slots {
		var errs []string
		chosen := false
		for _, h := range slot {
			fresh := s.links[h] == nil
			if err := s.useHook(h); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", h, err))
				continue
			}
			if fresh && s.links[h] != nil {
				attached = append(attached, h)
			}
			// Without socket storage nothing runs the iterator; a hook two slots share is listed once.
			if (h.Kind != event.Iterator || s.features.SkStorage) && !slices.Contains(st.Hooks, h) {
				st.Hooks = append(st.Hooks, h)
			}
			chosen = true
			break
		}
		if !chosen {
			st.Hooks, st.Err = nil, errors.New(strings.Join(errs, "; "))
			s.DetachHooks(attached)
			return st
		}
	}
	for _, o := range u.Optional {
		st.Hooks, st.Without = ChooseOptional(o, st.Hooks, st.Without, s.useHook)
	}
	return st
}

// useHook checks, loads and attaches one alternative.
func (s *Session) useHook(h event.Hook) error {
	if err := CheckHook(h); err != nil {
		return err
	}
	if h.Kind == event.Iterator && !s.features.SkStorage {
		return nil // the state is in hash maps, which user space reads directly
	}
	if err := s.loadProgram(h); err != nil {
		return err
	}
	if h.Kind == event.Iterator || s.links[h] != nil {
		return nil
	}
	return s.attachHook(h)
}

// programKey names a loaded program: a function hook's program is loaded
// for the function it attaches to, the others once.
func programKey(h event.Hook) string {
	if h.Kind == event.FEntry || h.Kind == event.FExit {
		return h.Program + "@" + h.Name
	}
	return h.Program
}

// loadProgram loads a hook's program against the shared maps, once.
func (s *Session) loadProgram(h event.Hook) error {
	key := programKey(h)
	if s.progs[key] != nil {
		return nil
	}
	if err := s.progErrs[key]; err != nil {
		return err
	}
	prog, err := s.load(h)
	if err != nil {
		s.progErrs[key] = err
		return err
	}
	s.progs[key] = prog
	return nil
}

func (s *Session) load(h event.Hook) (*ebpf.Program, error) {
	name := h.Program
	ps := s.spec.Programs[name]
	if ps == nil {
		return nil, fmt.Errorf("program %s is not in the BPF object", name)
	}
	ps = ps.Copy()
	if h.Kind == event.FEntry || h.Kind == event.FExit {
		ps.AttachTo = h.Name
	}
	if !s.features.KernelSeq {
		ps.Instructions = withoutAtomicFetch(ps.Instructions)
	}
	if s.packetFilter != nil {
		ps.Instructions = injectPacketFilter(ps.Instructions, s.packetFilter)
	}
	one := &ebpf.CollectionSpec{Maps: s.spec.Maps, Variables: s.spec.Variables, Types: s.spec.Types,
		ByteOrder: s.spec.ByteOrder, Programs: map[string]*ebpf.ProgramSpec{name: ps}}
	c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: s.coll.Maps, Cache: kernelTypes})
	if err != nil {
		var verr *ebpf.VerifierError
		switch {
		case errors.As(err, &verr):
			return nil, fmt.Errorf("loading program %s: the kernel's verifier rejected it: %s", name, lastLines(verr.Log, 3))
		case errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("loading program %s: %w", name, ErrPermission)
		}
		return nil, fmt.Errorf("loading program %s: %w", name, err)
	}
	defer c.Close()
	return c.DetachProgram(name), nil
}

// lastLines are the verifier's conclusion: its log ends with the reason.
func lastLines(log []string, n int) string {
	var out []string
	for i := len(log) - 1; i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(log[i]); l != "" && !strings.HasPrefix(l, "processed ") {
			out = append([]string{l}, out...)
		}
	}
	if len(out) == 0 {
		return "(no verifier log)"
	}
	return strings.Join(out, " / ")
}

// RunTime sums the kernel's run time of the loaded programs: zero unless
// kernel.bpf_stats_enabled is 1.
func (s *Session) RunTime() time.Duration {
	var d time.Duration
	for _, p := range s.progs {
		if st, err := p.Stats(); err == nil {
			d += st.Runtime
		}
	}
	return d
}

// Features says how the programs were adapted to this kernel.
func (s *Session) Features() Features { return s.features }

// Units says, for each unit in the order given, the hooks it runs on or why it does not run.
func (s *Session) Units() []UnitStatus { return s.units }

func (s *Session) attachHook(h event.Hook) error {
	prog := s.progs[programKey(h)]
	if prog == nil {
		return fmt.Errorf("program %s is not loaded", h.Program)
	}
	var l link.Link
	var err error
	switch h.Kind {
	case event.BTFTracepoint, event.FEntry, event.FExit:
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	default:
		if err = EnsureTracefs(); err == nil {
			l, err = link.Tracepoint(h.Group, h.Name, prog, nil)
		}
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("attaching %s: %w", h, ErrPermission)
		}
		return fmt.Errorf("attaching %s: %w", h, err)
	}
	s.links[h] = l
	return nil
}

// ReadInto blocks until an event is available, the deadline passes
// (os.ErrDeadlineExceeded) or the session is closed (os.ErrClosed). The
// kernel wakes the reader only when the ring fills up, so callers should set
// a deadline: events queued without a wakeup are returned once it passes.
// The record's buffer is reused, so reading allocates nothing per event.
func (s *Session) ReadInto(rec *ringbuf.Record) error {
	err := s.ring.ReadInto(rec)
	if errors.Is(err, ringbuf.ErrClosed) {
		return os.ErrClosed
	}
	return err
}

// SetDeadline bounds the next ReadInto calls.
func (s *Session) SetDeadline(t time.Time) { s.ring.SetDeadline(t) }

// Attach attaches again hooks that DetachHooks removed.
func (s *Session) Attach(hooks []event.Hook) error {
	for _, h := range hooks {
		if h.Kind == event.Iterator || s.links[h] != nil {
			continue
		}
		if err := s.attachHook(h); err != nil {
			return err
		}
	}
	return nil
}

// DetachHooks removes these hooks' programs; Attach puts them back.
func (s *Session) DetachHooks(hooks []event.Hook) {
	for _, h := range hooks {
		if l := s.links[h]; l != nil {
			l.Close()
			delete(s.links, h)
		}
	}
}

// Detach removes every program from its hook; reading may continue to drain
// what is already queued.
func (s *Session) Detach() {
	for h, l := range s.links {
		l.Close()
		delete(s.links, h)
	}
}

// Close detaches and unloads everything.
func (s *Session) Close() error {
	s.Detach()
	if s.ring != nil {
		s.ring.Close()
	}
	for name, p := range s.progs {
		p.Close()
		delete(s.progs, name)
	}
	if s.coll != nil {
		s.coll.Close()
		s.coll = nil
	}
	return nil
}

// jiffiesPerSecond is the kernel's HZ: the coarse clocks advance once a tick.
func jiffiesPerSecond() uint64 {
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &res); err != nil || res.Nano() <= 0 {
		return 1000 // the most common HZ; only the once-a-second rule depends on it
	}
	return uint64(time.Second / time.Duration(res.Nano()))
}
