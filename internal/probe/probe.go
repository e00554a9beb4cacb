package probe

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Hook is one kernel attach point.
type Hook struct {
	Program string // program name in the BPF object
	Kind    HookKind
	Group   string // tracepoint group, for classic tracepoints
	Name    string // tracepoint name
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
)

func (h Hook) String() string {
	switch h.Kind {
	case BTFTracepoint:
		return "tp_btf/" + h.Name
	case Iterator:
		return "iter/" + h.Name
	}
	return h.Group + ":" + h.Name
}

// Filter restricts what the kernel side emits; the zero value passes everything.
type Filter struct {
	Port       uint16
	Addr       netip.Addr
	NetnsInode uint32
	Dev        string // device name, for device-level families
	Pid        uint32 // process (thread group), for sock_io
}

// Config selects the hooks to attach and sizes the ring buffer.
type Config struct {
	Hooks     []Hook
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
	coll  *ebpf.Collection
	links map[Hook]link.Link
	ring  *ringbuf.Reader
}

// ErrPermission is returned when the caller may not load BPF programs.
var ErrPermission = errors.New("permission denied (run as root or grant CAP_BPF+CAP_PERFMON)")

// Open loads the programs the hooks need and attaches them.
func Open(cfg Config) (*Session, error) {
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("raising the memlock limit: %w", err)
	}
	spec, err := LoadSkbtrace()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF object: %w", err)
	}
	keep := map[string]bool{SkbtraceProgSeqReserve: true}
	for _, h := range cfg.Hooks {
		keep[h.Program] = true
	}
	for name := range spec.Programs {
		if !keep[name] {
			delete(spec.Programs, name)
		}
	}
	if cfg.RingBytes != 0 {
		spec.Maps[SkbtraceMapEvents].MaxEntries = cfg.RingBytes
	}
	if err := spec.Variables[SkbtraceVarWakeupBytes].Set(uint64(spec.Maps[SkbtraceMapEvents].MaxEntries / 8)); err != nil {
		return nil, fmt.Errorf("setting wakeup_bytes: %w", err)
	}
	if err := setFilter(spec, cfg.Filter); err != nil {
		return nil, err
	}
	hz := jiffiesPerSecond()
	consts := map[string]any{SkbtraceVarJiffiesPerSec: hz}
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
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}

	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loading BPF programs: the kernel's verifier rejected them: %+v", verr)
		}
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("loading BPF programs: %w", ErrPermission)
		}
		return nil, fmt.Errorf("loading BPF programs: %w", err)
	}
	s := &Session{coll: coll, links: map[Hook]link.Link{}}
	if err := s.Attach(cfg.Hooks); err != nil {
		s.Close()
		return nil, err
	}
	s.ring, err = ringbuf.NewReader(coll.Maps[SkbtraceMapEvents])
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("opening the event ring buffer: %w", err)
	}
	return s, nil
}

func setFilter(spec *ebpf.CollectionSpec, f Filter) error {
	set := func(name string, v any) error {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting filter %s: %w", name, err)
		}
		return nil
	}
	if err := set(SkbtraceVarFilterPort, f.Port); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterNetns, f.NetnsInode); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterPid, f.Pid); err != nil {
		return err
	}
	if len(f.Dev) > 15 {
		return fmt.Errorf("device name %q is longer than the kernel's 15 characters", f.Dev)
	}
	var dev [16]byte
	copy(dev[:], f.Dev)
	if err := set(SkbtraceVarFilterDev, dev); err != nil {
		return err
	}
	if !f.Addr.IsValid() {
		return nil
	}
	var family uint16 = unix.AF_INET6
	var addr [16]byte
	if f.Addr.Unmap().Is4() {
		family = unix.AF_INET
		a4 := f.Addr.Unmap().As4()
		copy(addr[:], a4[:])
	} else {
		addr = f.Addr.As16()
	}
	if err := set(SkbtraceVarFilterFamily, family); err != nil {
		return err
	}
	return set(SkbtraceVarFilterAddr, addr)
}

func attach(h Hook, prog *ebpf.Program) (link.Link, error) {
	if prog == nil {
		return nil, fmt.Errorf("program %s is not in the BPF object", h.Program)
	}
	switch h.Kind {
	case BTFTracepoint:
		return link.AttachTracing(link.TracingOptions{Program: prog})
	default:
		if err := EnsureTracefs(); err != nil {
			return nil, err
		}
		return link.Tracepoint(h.Group, h.Name, prog, nil)
	}
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

// Lost returns, per family, the events each CPU could not queue because the
// ring buffer was full.
func (s *Session) Lost() ([][]uint64, error) {
	m := s.coll.Maps[SkbtraceMapLost]
	out := make([][]uint64, SkbtraceEventFamilyFAMILY_MAX)
	for family := range out {
		var perCPU []uint64
		if err := m.Lookup(uint32(family), &perCPU); err != nil {
			return nil, fmt.Errorf("reading lost-event counters: %w", err)
		}
		out[family] = perCPU
	}
	return out, nil
}

// Attach attaches the hooks not attached yet; families that share a
// program share its attachment.
func (s *Session) Attach(hooks []Hook) error {
	for _, h := range hooks {
		if h.Kind == Iterator || s.links[h] != nil {
			continue
		}
		l, err := attach(h, s.coll.Programs[h.Program])
		if err != nil {
			if errors.Is(err, unix.EPERM) {
				return fmt.Errorf("attaching %s: %w", h, ErrPermission)
			}
			return fmt.Errorf("attaching %s: %w", h, err)
		}
		s.links[h] = l
	}
	return nil
}

// DetachHooks removes these hooks' programs; Attach puts them back.
func (s *Session) DetachHooks(hooks []Hook) {
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

// NextSeq is the sequence number the next event will take. After Detach no
// program takes numbers any more, so user space may number events from here.
func (s *Session) NextSeq() (uint64, error) {
	var seq uint64
	if err := s.coll.Variables[SkbtraceVarSeqCounter].Get(&seq); err != nil {
		return 0, fmt.Errorf("reading the sequence counter: %w", err)
	}
	return seq, nil
}

// OpenSendlimRuns returns the send-limit runs still open in the kernel,
// the ones that would have been emitted at the socket's next ACK or close.
func (s *Session) OpenSendlimRuns() ([]SkbtraceSendlimRun, error) {
	return dumpStorage[SkbtraceSendlimRun](s, SkbtraceProgSendlimOpenRuns, SkbtraceMapSendlimRuns)
}

// OpenRetransRuns returns the retransmit runs still open in the kernel.
func (s *Session) OpenRetransRuns() ([]SkbtraceTcpRetransRun, error) {
	return dumpStorage[SkbtraceTcpRetransRun](s, SkbtraceProgRetransOpenRuns, SkbtraceMapRetransRuns)
}

// dumpStorage runs an iterator over a socket-storage map; the iterator
// writes each value it keeps, a T, verbatim.
func dumpStorage[T any](s *Session, progName, mapName string) ([]T, error) {
	prog, ok := s.coll.Programs[progName]
	if !ok {
		return nil, nil
	}
	it, err := link.AttachIter(link.IterOptions{Program: prog, Map: s.coll.Maps[mapName]})
	if err != nil {
		return nil, fmt.Errorf("attaching iterator %s: %w", progName, err)
	}
	defer it.Close()
	rd, err := it.Open()
	if err != nil {
		return nil, fmt.Errorf("opening iterator %s: %w", progName, err)
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("reading iterator %s: %w", progName, err)
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	if len(data)%size != 0 {
		return nil, fmt.Errorf("iterator %s returned %d bytes, not a multiple of %d", progName, len(data), size)
	}
	out := make([]T, len(data)/size)
	for i := range out {
		out[i] = *(*T)(unsafe.Pointer(&data[i*size]))
	}
	return out, nil
}

// Close detaches and unloads everything.
func (s *Session) Close() error {
	s.Detach()
	if s.ring != nil {
		s.ring.Close()
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

// Map returns one of the session's maps, or nil when its family is not loaded.
func (s *Session) Map(name string) *ebpf.Map { return s.coll.Maps[name] }

// ReserveSeq takes n numbers from the kernel's sequence counter, for events
// the recorder writes itself, and returns the first.
func (s *Session) ReserveSeq(n uint64) (uint64, error) {
	prog, ok := s.coll.Programs[SkbtraceProgSeqReserve]
	if !ok {
		return 0, errors.New("the seq_reserve program is not loaded")
	}
	r := SkbtraceSeqReservation{Count: n}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&r)), unsafe.Sizeof(r))
	if _, err := prog.Run(&ebpf.RunOptions{Context: buf, ContextOut: buf}); err != nil {
		return 0, fmt.Errorf("reserving sequence numbers: %w", err)
	}
	return r.First, nil
}

// NextDrainGeneration starts a new aggregation interval: fields that
// describe one interval (maxima, first times) reset at their next update.
func (s *Session) NextDrainGeneration(gen uint64) error {
	if err := s.coll.Variables[SkbtraceVarDrainGen].Set(gen); err != nil {
		return fmt.Errorf("starting drain generation %d: %w", gen, err)
	}
	return nil
}

// ForgetSoftirqStarts clears the softirq entry times a detached softirq_exit
// never saw, so that the first exit after re-attaching does not count the
// time since then. Call it only while the softirq hooks are detached.
func (s *Session) ForgetSoftirqStarts() error {
	m := s.coll.Maps[SkbtraceMapSoftirqs]
	if m == nil {
		return nil
	}
	for _, vec := range []uint32{2, 3} { // NET_TX, NET_RX
		var vs []SkbtraceSoftirqStats
		if err := m.Lookup(vec, &vs); err != nil {
			return fmt.Errorf("reading softirq times: %w", err)
		}
		for i := range vs {
			vs[i].StartNs = 0
		}
		if err := m.Put(vec, vs); err != nil {
			return fmt.Errorf("resetting softirq entry times: %w", err)
		}
	}
	return nil
}
