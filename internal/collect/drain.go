package collect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// drainFunc turns what a family's maps counted since the previous drain
// into events, through d.emit.
type drainFunc func(d *drainer) error

// drainer reads the aggregation maps every interval. The kernel's counters
// are cumulative; the drainer keeps the previous values and reports the
// difference, so an update racing with a drain is reported next time rather
// than lost.
type drainer struct {
	sess       *probe.Session
	seq        *sequencer
	order      binary.ByteOrder
	begin, now uint64 // the interval, CLOCK_BOOTTIME
	gen        uint64
	pending    [][]byte
	// prev holds each family's values at the previous drain (prevOf), by family id.
	prev map[uint16]any
	// noExpire: the kernel cannot take hash entries out atomically (expire).
	noExpire bool
}

type napiKey struct {
	napi uint64
	cpu  int
}

type softirqKey struct {
	vec uint32
	cpu int
}

func newDrainer(sess *probe.Session, seq *sequencer, order binary.ByteOrder, begin uint64) *drainer {
	return &drainer{
		sess: sess, seq: seq, order: order, begin: begin, prev: map[uint16]any{},
	}
}

// prevOf is a family's values at the previous drain, kept between drains.
func prevOf[K comparable, V any](d *drainer, family wire.EventFamily) map[K]V {
	m, ok := d.prev[uint16(family)].(map[K]V)
	if !ok {
		m = map[K]V{}
		d.prev[uint16(family)] = m
	}
	return m
}

// emit encodes a wire event (a *probe.Skbtrace...Event whose first field is
// its header) for writing once sequence numbers are known.
func (d *drainer) emit(typ event.Type, cpu uint32, ev any) error {
	b, err := binary.Append(nil, d.order, ev)
	if err != nil {
		return fmt.Errorf("encoding a %s event: %w", typ.Action(), err)
	}
	var h wire.EventHeader
	d.order.PutUint64(b[unsafe.Offsetof(h.TsNs):], d.now)
	d.order.PutUint32(b[unsafe.Offsetof(h.Cpu):], cpu)
	d.order.PutUint16(b[unsafe.Offsetof(h.Type):], uint16(typ))
	d.pending = append(d.pending, b)
	return nil
}

// number gives the pending events consecutive sequence numbers.
func (d *drainer) number() error {
	if len(d.pending) == 0 {
		return nil
	}
	first, err := d.seq.reserve(uint64(len(d.pending)))
	if err != nil {
		return err
	}
	var h wire.EventHeader
	for i, b := range d.pending {
		d.order.PutUint64(b[unsafe.Offsetof(h.Seq):], first+uint64(i))
	}
	return nil
}

// perCPU iterates a per-CPU map, calling fn with each key's per-CPU values.
func perCPU[K comparable, V any](m *ebpf.Map, fn func(K, []V) error) error {
	if m == nil {
		return nil
	}
	var (
		key    K
		values []V
	)
	it := m.Iterate()
	for it.Next(&key, &values) {
		if err := fn(key, values); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading map %s: %w", m, err)
	}
	return nil
}

// entries calls fn with each key and value of a map of one value per key
// (none for a family not loaded).
func entries[K comparable, V any](m *ebpf.Map, fn func(K, V) error) error {
	if m == nil {
		return nil
	}
	return probe.EachEntry(m, fn)
}

func drainDevXmit(d *drainer) error {
	return drainDev(d, probe.SkbtraceMapDevXmitSlots, probe.SkbtraceMapDevXmitStats, prevOf[uint64, wire.DevStats](d, wire.EventFamilyFAMILY_DEV_XMIT), event.TypeDevXmit)
}

func drainDevRecv(d *drainer) error {
	return drainDev(d, probe.SkbtraceMapDevRecvSlots, probe.SkbtraceMapDevRecvStats, prevOf[uint64, wire.DevStats](d, wire.EventFamilyFAMILY_DEV_RECV), event.TypeDevRecv)
}

// slotValues reads a per-CPU slot cache: each CPU's slots name the key they hold.
func slotValues[S, V any](m *ebpf.Map, key func(*S) uint64, value func(*S) *V, fn func(k uint64, cpu int, v *V)) error {
	if m == nil {
		return nil
	}
	var slots []S
	for idx := uint32(0); idx < m.MaxEntries(); idx++ {
		if err := m.Lookup(idx, &slots); err != nil {
			return fmt.Errorf("reading map %s: %w", m, err)
		}
		for cpu := range slots {
			if k := key(&slots[cpu]); k != 0 {
				fn(k, cpu, value(&slots[cpu]))
			}
		}
	}
	return nil
}

func drainDev(d *drainer, slotsName, mapName string, prev map[uint64]wire.DevStats, typ event.Type) error {
	sums := map[uint64]*wire.DevStats{}
	add := func(k uint64, v *wire.DevStats) {
		if v.Ready == 0 {
			return
		}
		sum := sums[k]
		if sum == nil {
			sum = &wire.DevStats{}
			sums[k] = sum
		}
		sum.Ignored |= v.Ignored
		sum.Netns, sum.Ifindex, sum.Name = v.Netns, v.Ifindex, v.Name
		sum.Skbs += v.Skbs
		sum.Bytes += v.Bytes
		sum.Segs += v.Segs
		sum.Errors += v.Errors
		sum.GroIn += v.GroIn
		for i := range sum.Hist {
			sum.Hist[i] += v.Hist[i]
		}
		if v.Gen == d.gen && v.MaxBytes > sum.MaxBytes {
			sum.MaxBytes = v.MaxBytes
		}
	}
	err := slotValues(d.sess.Map(slotsName),
		func(s *wire.DevSlot) uint64 { return s.Key },
		func(s *wire.DevSlot) *wire.DevStats { return &s.Stats },
		func(k uint64, _ int, v *wire.DevStats) { add(k, v) })
	if err != nil {
		return err
	}
	err = perCPU(d.sess.Map(mapName), func(k uint64, vs []wire.DevStats) error {
		for i := range vs {
			add(k, &vs[i])
		}
		return nil
	})
	if err != nil {
		return err
	}
	for k, sum := range sums {
		p := prev[k]
		prev[k] = *sum
		if sum.Ignored != 0 || (sum.Skbs == p.Skbs && sum.GroIn == p.GroIn && sum.Errors == p.Errors) {
			continue
		}
		ev := wire.DevEvent{
			BeginNs: d.begin, Name: sum.Name, Ifindex: sum.Ifindex, Netns: sum.Netns,
			Skbs: sum.Skbs - p.Skbs, Bytes: sum.Bytes - p.Bytes, Segs: sum.Segs - p.Segs,
			Errors: sum.Errors - p.Errors, GroIn: sum.GroIn - p.GroIn, MaxBytes: sum.MaxBytes,
		}
		for i := range ev.Hist {
			ev.Hist[i] = sum.Hist[i] - p.Hist[i]
		}
		if err := d.emit(typ, 0, &ev); err != nil {
			return err
		}
	}
	return nil
}

func drainNapi(d *drainer) error {
	sums := map[napiKey]*wire.NapiStats{}
	add := func(k uint64, cpu int, v *wire.NapiStats) {
		if v.Ready == 0 || v.Ignored != 0 {
			return
		}
		key := napiKey{k, cpu}
		sum := sums[key]
		if sum == nil {
			sum = &wire.NapiStats{Netns: v.Netns, Ifindex: v.Ifindex, Name: v.Name, Budget: v.Budget}
			sums[key] = sum
		}
		sum.Polls += v.Polls
		sum.Work += v.Work
		sum.Exhausted += v.Exhausted
	}
	err := slotValues(d.sess.Map(probe.SkbtraceMapNapiSlots),
		func(s *wire.NapiSlot) uint64 { return s.Key },
		func(s *wire.NapiSlot) *wire.NapiStats { return &s.Stats }, add)
	if err != nil {
		return err
	}
	err = perCPU(d.sess.Map(probe.SkbtraceMapNapiPolls), func(k uint64, vs []wire.NapiStats) error {
		for cpu := range vs {
			add(k, cpu, &vs[cpu])
		}
		return nil
	})
	if err != nil {
		return err
	}
	prev := prevOf[napiKey, wire.NapiStats](d, wire.EventFamilyFAMILY_NAPI_POLL)
	for key, v := range sums {
		p := prev[key]
		prev[key] = *v
		if v.Polls == p.Polls {
			continue
		}
		ev := wire.NapiEvent{
			BeginNs: d.begin, Name: v.Name, Ifindex: v.Ifindex, Netns: v.Netns,
			Polls: v.Polls - p.Polls, Work: v.Work - p.Work, Exhausted: v.Exhausted - p.Exhausted, Budget: v.Budget,
		}
		if err := d.emit(event.TypeNapiPoll, uint32(key.cpu), &ev); err != nil {
			return err
		}
	}
	return nil
}

func drainSoftirq(d *drainer) error {
	m := d.sess.Map(probe.SkbtraceMapSoftirqs)
	if m == nil {
		return nil
	}
	prev := prevOf[softirqKey, wire.SoftirqStats](d, wire.EventFamilyFAMILY_SOFTIRQ)
	for _, vec := range []uint32{netTxSoftirq, netRxSoftirq} {
		var vs []wire.SoftirqStats
		if err := m.Lookup(vec, &vs); err != nil {
			return fmt.Errorf("reading softirq times: %w", err)
		}
		for cpu, v := range vs {
			key := softirqKey{vec, cpu}
			p := prev[key]
			prev[key] = v
			if v.Entries == p.Entries {
				continue
			}
			ev := wire.SoftirqEvent{BeginNs: d.begin, Entries: v.Entries - p.Entries, TimeNs: v.TimeNs - p.TimeNs, Vec: vec}
			if err := d.emit(event.TypeSoftirq, uint32(cpu), &ev); err != nil {
				return err
			}
		}
	}
	return nil
}

// Softirq vectors, as the kernel numbers them (enum in linux/interrupt.h).
const (
	netTxSoftirq = 2
	netRxSoftirq = 3
)

func drainQdisc(d *drainer) error {
	prev := prevOf[wire.QdiscKey, wire.QdiscStats](d, wire.EventFamilyFAMILY_QDISC)
	return entries(d.sess.Map(probe.SkbtraceMapQdiscs), func(k wire.QdiscKey, v wire.QdiscStats) error {
		p, seen := prev[k]
		prev[k] = v
		if v.Enqueues == p.Enqueues && v.Dequeues == p.Dequeues && v.Drops == p.Drops {
			return nil
		}
		if !seen {
			// The qdisc's own counters started at its creation: count from when the recording first saw it.
			p.Drops, p.Requeues, p.Overlimits = v.DropsBase, v.RequeuesBase, v.OverlimitsBase
		}
		ev := wire.QdiscEvent{
			BeginNs: d.begin, Dev: v.Dev, Kind: v.Kind, Ifindex: k.Ifindex, Netns: k.Netns, Handle: k.Handle, Parent: k.Parent,
			Enqueues: v.Enqueues - p.Enqueues, Dequeues: v.Dequeues - p.Dequeues,
			Drops: uint64(v.Drops - p.Drops), Requeues: uint64(v.Requeues - p.Requeues), Overlimits: uint64(v.Overlimits - p.Overlimits),
			Backlog: v.Backlog, Qlen: v.Qlen,
		}
		if v.Gen == d.gen {
			ev.BacklogMax, ev.QlenMax = v.BacklogMax, v.QlenMax
		}
		return d.emit(event.TypeQdisc, 0, &ev)
	})
}

// drainSockIO writes each process's socket calls in the interval, and
// deletes the entries of processes that made none and exited: no call can
// come from them any more, and the map would otherwise fill for good.
func drainSockIO(d *drainer) error {
	prev := prevOf[wire.SockIoKey, wire.SockIoStats](d, wire.EventFamilyFAMILY_SOCK_IO)
	m := d.sess.Map(probe.SkbtraceMapSockIo)
	var gone []wire.SockIoKey
	err := perCPU(m, func(k wire.SockIoKey, vs []wire.SockIoStats) error {
		var sum wire.SockIoStats
		for _, v := range vs {
			sum.Calls += v.Calls
			sum.Bytes += v.Bytes
			sum.Errors += v.Errors
			for i := range sum.Hist {
				sum.Hist[i] += v.Hist[i]
			}
			if v.Comm[0] != 0 {
				sum.Comm = v.Comm
			}
		}
		p, seen := prev[k]
		prev[k] = sum
		if sum.Calls == p.Calls {
			if seen && !processExists(k.Pid) {
				gone = append(gone, k)
			}
			return nil
		}
		if sum.Calls < p.Calls { // a new entry for a reused pid: counted from zero
			p = wire.SockIoStats{}
		}
		ev := wire.SockIoEvent{
			BeginNs: d.begin, Pid: k.Pid, Dir: k.Dir, Comm: sum.Comm,
			Calls: sum.Calls - p.Calls, Bytes: sum.Bytes - p.Bytes, Errors: sum.Errors - p.Errors,
		}
		for i := range ev.Hist {
			ev.Hist[i] = sum.Hist[i] - p.Hist[i]
		}
		return d.emit(event.TypeSockIO, 0, &ev)
	})
	if err != nil {
		return err
	}
	for _, k := range gone {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting the socket calls of exited process %d: %w", k.Pid, err)
		}
		delete(prev, k)
	}
	return nil
}

// processExists says whether a process (thread group) of this id lives,
// a zombie included: signal 0 checks without sending.
func processExists(pid uint32) bool {
	return unix.Kill(int(pid), 0) != unix.ESRCH
}

func drainSkbDrop(d *drainer) error {
	prev := prevOf[wire.DropKey, wire.DropStats](d, wire.EventFamilyFAMILY_SKB_DROP)
	return perCPU(d.sess.Map(probe.SkbtraceMapDrops), func(k wire.DropKey, vs []wire.DropStats) error {
		var sum wire.DropStats
		var first uint64
		for _, v := range vs {
			sum.Cnt += v.Cnt
			if v.Dev[0] != 0 {
				sum.Dev = v.Dev
			}
			if v.Cnt > 0 && v.Gen == d.gen && (first == 0 || v.FirstNs < first) {
				first = v.FirstNs
				sum.Protocol, sum.L4proto, sum.Addrs = v.Protocol, v.L4proto, v.Addrs
			}
		}
		p := prev[k]
		prev[k] = sum
		if sum.Cnt == p.Cnt {
			return nil
		}
		if first == 0 {
			first = d.begin
		}
		ev := wire.SkbDropEvent{
			BeginNs: first, Location: k.Location, Dev: sum.Dev, Ifindex: k.Ifindex, Netns: k.Netns,
			Reason: k.Reason, Protocol: sum.Protocol, L4proto: sum.L4proto, Cnt: sum.Cnt - p.Cnt, Addrs: sum.Addrs,
		}
		ev.Addrs.NetnsByAddr = uint16(k.NetnsByAddr)
		return d.emit(event.TypeSkbDrop, 0, &ev)
	})
}

// drainSkLimit writes each socket's limit hits in the interval, and takes
// out of the map the entries that had none (expire).
func drainSkLimit(d *drainer) error {
	prev := prevOf[wire.SkLimitKey, wire.SkLimitStats](d, wire.EventFamilyFAMILY_SK_LIMIT)
	m := d.sess.Map(probe.SkbtraceMapSkLimits)
	var idle []wire.SkLimitKey
	err := entries(m, func(k wire.SkLimitKey, v wire.SkLimitStats) error {
		p, seen := prev[k]
		prev[k] = v
		if v.Cnt == p.Cnt {
			if seen {
				idle = append(idle, k)
			}
			return nil
		}
		return emitSkLimit(d, k, v, p)
	})
	if err != nil {
		return err
	}
	return expire(d, m, idle, prev, func(k wire.SkLimitKey, v, p wire.SkLimitStats) error {
		if v.Cnt == p.Cnt {
			return nil
		}
		return emitSkLimit(d, k, v, p)
	})
}

// emitSkLimit writes v's count less p's; a count below p's is a new entry's, counted from zero.
func emitSkLimit(d *drainer, k wire.SkLimitKey, v, p wire.SkLimitStats) error {
	if v.Cnt < p.Cnt {
		p.Cnt = 0
	}
	ev := wire.SkLimitEvent{BeginNs: d.begin, Sock: k.Sock, Addrs: v.Addrs, Cnt: v.Cnt - p.Cnt, Kind: uint8(k.Kind)}
	return d.emit(event.TypeSkLimit, 0, &ev)
}
