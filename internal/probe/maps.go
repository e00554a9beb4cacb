package probe

import (
	"errors"
	"fmt"
	"io"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/skbtrace/skbtrace/internal/wire"
	"golang.org/x/sys/unix"
)

// Lost returns, per family, the events each CPU could not queue because the
// ring buffer was full.
func (s *Session) Lost() ([][]uint64, error) {
	return s.lostCounts(SkbtraceMapLost, "lost-event")
}

// LostFull is, per family and CPU, the samples a kernel map could not keep
// (full, or its allocation refused) since the session started.
func (s *Session) LostFull() ([][]uint64, error) {
	return s.lostCounts(SkbtraceMapLostFull, "map-full")
}

func (s *Session) lostCounts(name, what string) ([][]uint64, error) {
	m := s.coll.Maps[name]
	out := make([][]uint64, wire.EventFamilyFAMILY_MAX)
	for family := range out {
		var perCPU []uint64
		if err := m.Lookup(uint32(family), &perCPU); err != nil {
			return nil, fmt.Errorf("reading %s counters: %w", what, err)
		}
		out[family] = perCPU
	}
	return out, nil
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
func (s *Session) OpenSendlimRuns() ([]wire.SendlimRun, error) {
	if !s.features.SkStorage {
		return dumpHash(s, SkbtraceMapSendlimRunsBySock, func(r *wire.SendlimRun) bool {
			return r.Ev.Reason != uint8(wire.SendlimReasonSENDLIM_IGNORED) && r.Ev.Cnt != 0
		})
	}
	return dumpStorage[wire.SendlimRun](s, SkbtraceProgSendlimOpenRuns, SkbtraceMapSendlimRuns)
}

// OpenRetransRuns returns the retransmit runs still open in the kernel.
func (s *Session) OpenRetransRuns() ([]wire.TcpRetransRun, error) {
	if !s.features.SkStorage {
		return dumpHash(s, SkbtraceMapRetransRunsBySock, func(r *wire.TcpRetransRun) bool {
			return r.Ev.State != uint8(wire.SendlimReasonSENDLIM_IGNORED) && r.Ev.Cnt != 0
		})
	}
	return dumpStorage[wire.TcpRetransRun](s, SkbtraceProgRetransOpenRuns, SkbtraceMapRetransRuns)
}

// dumpHash reads the per-socket state kept in a hash map (kernels without
// socket storage for tracing), with the iterators' selection.
func dumpHash[T any](s *Session, mapName string, keep func(*T) bool) ([]T, error) {
	var out []T
	err := EachEntry(s.coll.Maps[mapName], func(_ uint64, v T) error {
		if keep(&v) {
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// dumpStorage runs an iterator over a socket-storage map; the iterator
// writes each value it keeps, a T, verbatim.
func dumpStorage[T any](s *Session, progName, mapName string) ([]T, error) {
	prog, ok := s.progs[progName]
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

// Map returns one of the session's maps, or nil when its family is not loaded.
func (s *Session) Map(name string) *ebpf.Map { return s.coll.Maps[name] }

// ReserveSeq takes n numbers from the kernel's sequence counter, for events
// the recorder writes itself, and returns the first.
func (s *Session) ReserveSeq(n uint64) (uint64, error) {
	prog, ok := s.progs[SkbtraceProgSeqReserve]
	if !ok {
		return 0, errors.New("the seq_reserve program is not loaded")
	}
	r := wire.SeqReservation{Count: n}
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

// UnderWay says whether a family follows something to its end: one of the
// counts (int32 variables) is above zero, or the variable fresh holds a
// CLOCK_MONOTONIC time within freshFor of now.
func (s *Session) UnderWay(counts []string, fresh string, freshFor time.Duration) (bool, error) {
	for _, name := range counts {
		var n int32
		if err := s.coll.Variables[name].Get(&n); err != nil {
			return false, fmt.Errorf("reading %s: %w", name, err)
		}
		if n > 0 {
			return true, nil
		}
	}
	if fresh == "" {
		return false, nil
	}
	var at uint64
	if err := s.coll.Variables[fresh].Get(&at); err != nil {
		return false, fmt.Errorf("reading %s: %w", fresh, err)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return false, err
	}
	return at != 0 && uint64(now.Nano())-at < uint64(freshFor), nil
}

// SetPaused sets the variables that pause a family's part of a program
// shared with another family (its name in Family.Paused).
func (s *Session) SetPaused(vars []string, paused bool) error {
	var v uint32
	if paused {
		v = 1
	}
	for _, name := range vars {
		if err := s.coll.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
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
		var vs []wire.SoftirqStats
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
