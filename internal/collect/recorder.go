package collect

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/units"
	"github.com/skbtrace/skbtrace/internal/version"
	"github.com/skbtrace/skbtrace/internal/wire"
)

const (
	// drainInterval bounds how long events wait in the ring: the kernel wakes
	// the reader only when the ring fills up.
	drainInterval  = 100 * time.Millisecond
	flushInterval  = 200 * time.Millisecond // the format promises at most a second
	lossInterval   = time.Second
	statusInterval = time.Second
)

// Options configure a recording.
type Options struct {
	Families  []*event.Family
	Filter    probe.Filter
	RingBytes uint32
	// Interval is how often aggregated families are drained and how long
	// tcp_retrans folds a socket's retransmits (default one second).
	Interval time.Duration
	// RTTInterval is the least time between two tcp_rtt samples of a socket (default 10 ms).
	RTTInterval time.Duration
	// Status receives a one-line live status (for a terminal), or nil.
	Status io.Writer
	// Required makes Start fail when a family cannot run, instead of
	// skipping it: families named by the user.
	Required bool
	// Sample is the share of each interval the per-packet families stay
	// attached (0 or 1: always). Their events then cover those windows
	// exactly: rates stay right, totals cover that share of the time.
	Sample float64
}

// Totals is what a recording wrote.
type Totals struct {
	Events map[string]uint64 // per family (action) name
	Lost   map[string]uint64 // per family name: the ring buffer was full
	// Full is per family name the samples a kernel map could not keep (also in Lost's trace records).
	Full     map[string]uint64
	Bytes    int64
	Duration time.Duration
}

// Recording is an attached set of families. Close detaches everything.
type Recording struct {
	opts    Options
	sess    *probe.Session
	host    hostFacts
	start   time.Time
	sampled []event.Hook // the per-packet families' hooks, when sampling
	// sampledFamilies are the families those hooks belong to.
	sampledFamilies []string
	// paused are the variables that pause sampled families' parts of shared programs.
	paused []string
	// lingerers are the sampled families that follow what they began to its end.
	lingerers []*lingerer
	// Running are the families attached, with the hook chosen for each
	// attach point; Skipped those this kernel cannot run, and why.
	Running []Running
	Skipped []Skipped
	// flushes carries Flush's requests to Run's loop; running and ended
	// say whether that loop is there to answer.
	flushes chan chan error
	running chan struct{}
	ended   chan struct{}
}

// Running is a family attached, and the hooks it uses on this kernel.
type Running struct {
	Family  *event.Family
	Hooks   []event.Hook
	Without []string // optional hooks that did not attach: what the family loses, and why
}

// Skipped is a family left out because this kernel cannot run it.
type Skipped struct {
	Family *event.Family
	Reason error
}

// Start loads and attaches the selected families, each on its own: one
// this kernel rejects is skipped with the reason (an error when
// opts.Required), and the others run.
func Start(opts Options) (*Recording, error) {
	consts := map[string]any{}
	units := make([]probe.Unit, len(opts.Families))
	for i, f := range opts.Families {
		hooks, fconsts := f.Hooks, f.Consts
		if opts.Filter.Packets != nil && f.PacketFiltered != nil {
			hooks, fconsts = f.PacketFiltered, nil
		}
		units[i] = probe.Unit{Name: f.Name, Slots: hooks, Optional: f.Optional, Required: opts.Required}
		for k, v := range fconsts {
			consts[k] = v
		}
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	// The host's facts are read before anything is attached: counts taken
	// meanwhile would fall into the first interval, outside its window.
	var facts hostFacts
	if feat, ferr := probe.ProbeFeatures(); ferr == nil { // else Open says why it cannot load
		var err error
		if facts, err = readHostFacts(feat, opts.Families); err != nil {
			return nil, err
		}
	}
	sess, err := probe.Open(probe.Config{Units: units, RingBytes: opts.RingBytes, Filter: opts.Filter,
		Interval: opts.Interval, RTTInterval: opts.RTTInterval, Consts: consts})
	if err != nil {
		return nil, err
	}
	r := &Recording{sess: sess, start: time.Now(), host: facts,
		flushes: make(chan chan error), running: make(chan struct{}), ended: make(chan struct{})}
	for i, st := range sess.Units() {
		f := opts.Families[i]
		if st.Err != nil {
			r.Skipped = append(r.Skipped, Skipped{f, st.Err})
			continue
		}
		r.Running = append(r.Running, Running{f, st.Hooks, st.Without})
	}
	if opts.Sample > 0 && opts.Sample < 1 {
		r.planSampling()
	}
	if len(r.Running) == 0 {
		sess.Close()
		reason := "none selected"
		if len(r.Skipped) > 0 {
			reason = fmt.Sprintf("%s: %v", r.Skipped[0].Family.Name, r.Skipped[0].Reason)
		}
		return nil, fmt.Errorf("no event family can run on this kernel (%s)", reason)
	}
	// From here on the families are the ones that run.
	opts.Families = nil
	for _, run := range r.Running {
		opts.Families = append(opts.Families, run.Family)
	}
	r.opts = opts
	return r, nil
}

// hostFacts are what a recording reads from the host once, before it
// attaches: reading kallsyms and the kernel's BTF takes about 0.1 s of CPU,
// which the traced workload would otherwise share from its start.
type hostFacts struct {
	kallsyms *host.Kallsyms        // for skb_drop's locations
	enums    map[string]trace.Enum // drop and reset reasons, by family
	settings []byte                // host.ReadSettings as JSON
}

func readHostFacts(feat probe.Features, families []*event.Family) (hostFacts, error) {
	h := hostFacts{enums: map[string]trace.Enum{}}
	for _, f := range families {
		var kind uint16
		var enum, prefix string
		var reasons bool
		switch f.Name {
		case "skb_drop":
			kind, enum, prefix = trace.EnumDropReason, "skb_drop_reason", "SKB_DROP_REASON_"
			reasons = feat.DropReasons
			ks, err := host.LoadKallsyms()
			if err != nil {
				return h, err
			}
			h.kallsyms = ks
		case "tcp_reset":
			kind, enum, prefix = trace.EnumResetReason, "sk_rst_reason", "SK_RST_REASON_"
			reasons = feat.ResetReasons
		default:
			continue
		}
		// A kernel whose tracepoint has no reason gives 0 for every event.
		names := map[uint32]string{0: NoReason}
		if reasons {
			var err error
			if names, err = probe.KernelEnum(enum, prefix); err != nil {
				return h, err
			}
		}
		h.enums[f.Name] = trace.Enum{Kind: kind, Names: names}
	}
	settings, _ := host.ReadSettings()
	body, err := json.Marshal(settings)
	if err != nil {
		return h, fmt.Errorf("recording the host's settings: %w", err)
	}
	h.settings = body
	return h, nil
}

// Features says how the programs were adapted to this kernel.
func (r *Recording) Features() probe.Features { return r.sess.Features() }

// Close detaches and unloads; safe after Run.
func (r *Recording) Close() error { return r.sess.Close() }

// RunTime is the BPF programs' run time so far (kernel.bpf_stats_enabled).
func (r *Recording) RunTime() time.Duration { return r.sess.RunTime() }

// Header describes this host for the trace file.
func Header(command string) trace.Header {
	id := host.ReadIdentity()
	boot, wall := host.ClockAnchor()
	return trace.Header{
		ByteOrder:    trace.NativeOrder,
		BootAnchorNs: boot,
		WallAnchorNs: wall,
		CPUs:         uint32(id.CPUs),
		Hostname:     id.Hostname,
		Kernel:       id.Kernel,
		Machine:      id.Machine,
		Tool:         version.Version,
		Command:      command,
	}
}

// NoReason names the reason of drops and resets on kernels whose
// tracepoints do not give one.
const NoReason = "NO_REASON"

// Flush has a running recording write what it holds to its writer: the
// aggregated families' counts to now (a sampled window still open is cut
// there) and the writer's buffer. A reader of the trace so far (the agent's
// evidence for a window that ends now) then sees the window's last
// per-packet sample, which would otherwise wait up to an interval. It
// returns at once when Run is not running.
func (r *Recording) Flush() error {
	select {
	case <-r.running:
	default:
		return nil
	}
	done := make(chan error, 1)
	select {
	case r.flushes <- done:
	case <-r.ended:
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-r.ended:
		return nil
	}
}

// Run copies events into w until stop is closed, then detaches, drains what
// is queued, writes the runs still open in the kernel and the end record.
func (r *Recording) Run(w *trace.Writer, stop <-chan struct{}) (Totals, error) {
	close(r.running)
	defer close(r.ended)
	st := recorderState{
		opts:            r.opts,
		w:               w,
		sess:            r.sess,
		seq:             newSequencer(r.sess),
		netns:           host.NewNetnsResolver(),
		seenNetns:       map[uint32]bool{},
		counts:          map[event.Type]uint64{},
		status:          r.opts.Status,
		start:           r.start,
		sampled:         r.sampled,
		sampledFamilies: r.sampledFamilies,
		paused:          r.paused,
		lingerers:       r.lingerers,
		host:            r.host,
		flushes:         r.flushes,
	}
	err := st.prepare()
	if err == nil {
		err = st.loop(stop)
	}
	if err == nil {
		err = st.finish()
	}
	tot := Totals{Events: map[string]uint64{}, Lost: map[string]uint64{}, Full: map[string]uint64{}, Bytes: w.BytesWritten(), Duration: time.Since(r.start)}
	for t, n := range st.counts {
		tot.Events[t.Action()] += n
	}
	for _, f := range event.Families {
		if n := st.ring.total[f.ID]; n > 0 {
			tot.Lost[f.Name] = n
		}
		if n := st.full.total[f.ID]; n > 0 {
			tot.Full[f.Name] = n
		}
	}
	if st.status != nil {
		fmt.Fprint(st.status, "\r\x1b[K")
	}
	return tot, err
}

type recorderState struct {
	opts      Options
	host      hostFacts
	w         *trace.Writer
	drainer   *drainer
	kallsyms  *host.Kallsyms
	symbols   map[uint64]bool
	lastDrain time.Time
	sess      *probe.Session
	seq       *sequencer
	netns     *host.NetnsResolver
	seenNetns map[uint32]bool
	counts    map[event.Type]uint64
	ring      lossCounts // the ring buffer was full
	full      lossCounts // a kernel map could not keep a sample
	status    io.Writer
	start     time.Time
	events    uint64
	lastFlush time.Time
	lastLoss  time.Time
	lastStat  time.Time
	lastCount uint64
	// Sampling: the per-packet hooks and the variables that pause shared
	// ones, whether they are attached, and when they are next detached or
	// attached.
	sampled         []event.Hook
	sampledFamilies []string
	paused          []string
	lingerers       []*lingerer
	detached        bool
	nextFlip        time.Time
	flushes         <-chan chan error
}

// prepare writes the name tables the selected families need and sets up draining.
func (st *recorderState) prepare() error {
	for _, f := range st.opts.Families {
		if drains[f.ID] != nil && st.drainer == nil {
			st.drainer = newDrainer(st.sess, st.seq, st.w.ByteOrder(), host.BootNow())
		}
	}
	// Only the families that run: one the kernel skipped writes no table.
	for _, f := range st.opts.Families {
		if f.Name == "skb_drop" {
			st.kallsyms, st.symbols = st.host.kallsyms, map[uint64]bool{}
		}
		if e, ok := st.host.enums[f.Name]; ok {
			if err := st.w.AppendEnum(e); err != nil {
				return err
			}
		}
	}
	if err := st.w.AppendSettings(st.host.settings); err != nil {
		return err
	}
	if err := st.baselineSampled(); err != nil {
		return err
	}
	if st.sampledFamilies != nil {
		if err := st.w.AppendSample(trace.Sample{Share: st.opts.Sample, Interval: uint64(st.opts.Interval), Families: st.sampledFamilies}); err != nil {
			return err
		}
	}
	st.lastDrain = time.Now()
	st.nextFlip = st.lastDrain.Add(time.Duration(float64(st.opts.Interval) * st.opts.Sample))
	return nil
}

// drain writes what the aggregated families counted since the last drain.
func (st *recorderState) drain() error {
	if st.drainer == nil {
		return nil
	}
	return st.drainAt(host.BootNow())
}

// drainAt drains with the interval ending at now (CLOCK_BOOTTIME).
func (st *recorderState) drainAt(now uint64) error {
	d := st.drainer
	d.now = now
	d.pending = d.pending[:0]
	for _, f := range st.opts.Families {
		if drain := drains[f.ID]; drain != nil {
			if err := drain(d); err != nil {
				return err
			}
		}
	}
	if err := d.number(); err != nil {
		return err
	}
	for _, b := range d.pending {
		if err := st.symbolize(b); err != nil {
			return err
		}
		if err := st.handle(b); err != nil {
			return err
		}
	}
	d.begin = d.now
	d.gen++
	return st.sess.NextDrainGeneration(d.gen)
}

// symbolize writes a symbol record the first time a drop location appears.
func (st *recorderState) symbolize(b []byte) error {
	var e wire.SkbDropEvent
	if st.kallsyms == nil || len(b) < int(unsafe.Sizeof(e)) ||
		event.Type(st.w.ByteOrder().Uint16(b[unsafe.Offsetof(e.Hdr)+unsafe.Offsetof(e.Hdr.Type):])) != event.TypeSkbDrop {
		return nil
	}
	loc := st.w.ByteOrder().Uint64(b[unsafe.Offsetof(e.Location):])
	if st.symbols[loc] {
		return nil
	}
	st.symbols[loc] = true
	name := st.kallsyms.Resolve(loc)
	if name == "" {
		return nil
	}
	return st.w.AppendSymbol(trace.Symbol{Addr: loc, Name: name})
}

func (st *recorderState) loop(stop <-chan struct{}) error {
	var rec ringbuf.Record
	now := time.Now()
	st.lastFlush, st.lastLoss, st.lastStat = now, now, now
	st.sess.SetDeadline(now.Add(drainInterval))
	for {
		select {
		case <-stop:
			return nil
		case done := <-st.flushes:
			err := st.flush(time.Now())
			done <- err
			if err != nil {
				return err
			}
		default:
		}
		err := st.sess.ReadInto(&rec)
		switch {
		case err == nil:
			st.seq.ring(rec.RawSample)
			if err := st.handle(rec.RawSample); err != nil {
				return err
			}
			// Every 64 events, time for the periodic work: a busy ring
			// never hits the read deadline, and sampling flips must keep time.
			if st.events%64 != 0 {
				continue
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The ring is empty: sleep until the next drain or sampling flip.
			wake := time.Now().Add(drainInterval)
			if st.sampledFamilies != nil && st.nextFlip.Before(wake) {
				wake = st.nextFlip
			}
			if poll := time.Now().Add(lingerPoll); st.lingering() && poll.Before(wake) {
				wake = poll
			}
			st.sess.SetDeadline(wake)
		default:
			return fmt.Errorf("reading events: %w", err)
		}
		if err := st.periodic(time.Now()); err != nil {
			return err
		}
	}
}

// flush drains the aggregated families and writes the buffer out.
func (st *recorderState) flush(now time.Time) error {
	if err := st.drain(); err != nil {
		return err
	}
	st.lastDrain = now
	if err := st.w.Flush(); err != nil {
		return err
	}
	st.lastFlush = now
	return nil
}

func (st *recorderState) periodic(now time.Time) error {
	if err := st.sample(now); err != nil {
		return err
	}
	if err := st.linger(); err != nil {
		return err
	}
	if now.Sub(st.lastDrain) >= st.opts.Interval {
		if err := st.drain(); err != nil {
			return err
		}
		st.lastDrain = now
	}
	if now.Sub(st.lastFlush) >= flushInterval {
		if err := st.w.Flush(); err != nil {
			return err
		}
		st.lastFlush = now
	}
	if now.Sub(st.lastLoss) >= lossInterval {
		if err := st.pollLoss(); err != nil {
			return err
		}
		st.lastLoss = now
	}
	if st.status != nil && now.Sub(st.lastStat) >= statusInterval {
		rate := float64(st.events-st.lastCount) / now.Sub(st.lastStat).Seconds()
		var lost uint64
		for fam := range st.ring.total {
			lost += st.ring.total[fam] + st.full.total[fam]
		}
		fmt.Fprintf(st.status, "\r\x1b[K%6.1f s  %d events  %.0f/s  %s written  %d lost",
			now.Sub(st.start).Seconds(), st.events, rate, units.SignedBytes(st.w.BytesWritten()), lost)
		st.lastStat, st.lastCount = now, st.events
	}
	return nil
}

func (st *recorderState) handle(sample []byte) error {
	var hdr wire.EventHeader
	if len(sample) < int(unsafe.Sizeof(hdr)) {
		return fmt.Errorf("kernel sent a %d-byte event, shorter than its header", len(sample))
	}
	typ := event.Type(binary.NativeEndian.Uint16(sample[unsafe.Offsetof(hdr.Type):]))
	if ino, ok := netnsOf(typ, sample); ok && !st.seenNetns[ino] {
		st.seenNetns[ino] = true
		if name := st.netns.Name(ino); name != "" {
			if err := st.w.AppendNetns(trace.Netns{Inode: ino, Name: name}); err != nil {
				return err
			}
		}
	}
	st.counts[typ]++
	st.events++
	return st.w.Append(uint16(typ), sample)
}

// netnsOf reads the namespace inode of events that carry socket addresses.
func netnsOf(typ event.Type, sample []byte) (uint32, bool) {
	var off uintptr
	switch typ {
	case event.TypeTCPConn:
		var e wire.TcpConnEvent
		off = unsafe.Offsetof(e.Addrs) + unsafe.Offsetof(e.Addrs.Netns)
	case event.TypeTCPSendlim:
		var e wire.TcpSendlimEvent
		off = unsafe.Offsetof(e.Addrs) + unsafe.Offsetof(e.Addrs.Netns)
	default:
		return 0, false
	}
	if uintptr(len(sample)) < off+4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(sample[off:]), true
}

// finish detaches, drains the ring, closes the kernel's open runs and ends the trace.
func (st *recorderState) finish() error {
	st.sess.Detach()
	var rec ringbuf.Record
	for {
		st.sess.SetDeadline(time.Now().Add(50 * time.Millisecond))
		err := st.sess.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return fmt.Errorf("draining events: %w", err)
		}
		st.seq.ring(rec.RawSample)
		if err := st.handle(rec.RawSample); err != nil {
			return err
		}
	}
	if err := st.drain(); err != nil {
		return err
	}
	seq, err := st.seq.end()
	if err != nil {
		return err
	}
	// Runs still open in the kernel. No CPU emitted them: the recorder closes them, so cpu is 0.
	now := host.BootNow()
	var events []any
	sendlim, err := st.sess.OpenSendlimRuns()
	if err != nil {
		return err
	}
	for i := range sendlim {
		// A run whose stall a send ended ends there, as the next decision
		// would have ended it; one read from the hash (5.10), where its
		// kernel totals were taken, at its last decision.
		end := now
		if sendlim[i].ResumeNs != 0 {
			end = sendlim[i].ResumeNs
		} else if sendlim[i].DecidedNs != 0 {
			end = sendlim[i].DecidedNs
		}
		sendlim[i].Ev.Hdr = wire.EventHeader{TsNs: end, Type: uint16(event.TypeTCPSendlim)}
		events = append(events, &sendlim[i].Ev)
	}
	retrans, err := st.sess.OpenRetransRuns()
	if err != nil {
		return err
	}
	for i := range retrans {
		retrans[i].Ev.Hdr = wire.EventHeader{TsNs: now, Type: uint16(event.TypeTCPRetrans)}
		events = append(events, &retrans[i].Ev)
	}
	var buf []byte
	var hdr wire.EventHeader
	for _, ev := range events {
		buf, err = binary.Append(buf[:0], st.w.ByteOrder(), ev)
		if err != nil {
			return fmt.Errorf("encoding an open run: %w", err)
		}
		st.w.ByteOrder().PutUint64(buf[unsafe.Offsetof(hdr.Seq):], seq)
		seq++
		if err := st.handle(buf); err != nil {
			return err
		}
	}
	if err := st.pollLoss(); err != nil {
		return err
	}
	if err := st.w.AppendEnd(trace.End{NextSeq: seq, BootNs: now}); err != nil {
		return err
	}
	return st.w.Flush()
}
