package record

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// FlightOptions configure the flight recorder.
type FlightOptions struct {
	Triggers []Trigger
	// Pre and Post are how much before and after a firing its window holds.
	Pre, Post time.Duration
	// RingBytes bounds the recent past kept in memory.
	RingBytes int
	// MaxWindowsPerMinute rate-limits new windows (a trigger storm): firings
	// over it open none and are counted.
	MaxWindowsPerMinute int
	// MaxTriggerRecords bounds the trigger records of one window; more
	// firings within it are counted on the next record.
	MaxTriggerRecords int
	// MaxWindow bounds how long firings may keep extending one window (a
	// trigger that fires all the time would otherwise record everything);
	// default 4 times Pre+Post, at least 30 s.
	MaxWindow time.Duration
}

// FlightStats say what the flight recorder did.
type FlightStats struct {
	Firings    uint64        // events that matched a trigger
	Windows    int           // windows written (merged ones count once)
	Suppressed uint64        // firings over the rate limit, which opened no window
	Written    time.Duration // event time the windows cover
	Blocks     int           // blocks written of those seen
	Seen       int
	// ShortPre counts windows whose past the ring could not hold in full.
	ShortPre int
}

// Flight keeps the recording's recent past in a bounded ring of blocks and
// writes only the windows around trigger firings to out: a resume record
// and the firing's trigger record, the blocks from Pre before it, and every
// block until Post after the last firing that extended it. Give it to
// trace.NewWriter as the output.
type Flight struct {
	o   FlightOptions
	out io.Writer
	s   stream
	tw  *trace.Writer // on out: the header, name tables, resume, trigger and end records

	ring      []ringBlock
	ringBytes int
	metaDone  int   // name tables already on out
	open      bool  // a window is being written
	until     int64 // its end, wall-clock ns
	opened    int64 // when it began, for Written
	// firstFiring opened the window; MaxWindow after it, it ends.
	firstFiring int64
	records     int // trigger records in the open window
	opens       []int64
	endSeen     bool // the recording's own end record went out
	pending     uint64
	firingNow   []firing
	stats       FlightStats
	// spaceHorizon is the newest time the ring dropped for space: a window
	// reaching back before it misses some of its past.
	spaceHorizon int64
	// droppedSinceClose: blocks left out since the last window closed, so
	// the next one cannot continue it.
	droppedSinceClose bool
	writtenSeq        uint64 // the highest sequence number written, plus one
}

type ringBlock struct {
	data []byte
	info blockInfo
}

type firing struct {
	t    *Trigger
	what string
	seq  uint64
	time int64
}

// NewFlight checks the options.
func NewFlight(out io.Writer, o FlightOptions) (*Flight, error) {
	switch {
	case len(o.Triggers) == 0:
		return nil, errors.New("no trigger given")
	case o.Pre < 0 || o.Post < 0:
		return nil, errors.New("a negative window")
	case o.RingBytes < MinFileSize:
		return nil, fmt.Errorf("a ring of %d bytes is below the least, %d (1 MiB)", o.RingBytes, MinFileSize)
	}
	if o.MaxWindowsPerMinute <= 0 {
		o.MaxWindowsPerMinute = 6
	}
	if o.MaxTriggerRecords <= 0 {
		o.MaxTriggerRecords = 16
	}
	if o.MaxWindow <= 0 {
		o.MaxWindow = max(4*(o.Pre+o.Post), 30*time.Second)
	}
	return &Flight{o: o, out: out}, nil
}

// Stats says what was written so far.
func (f *Flight) Stats() FlightStats { return f.stats }

// Write takes the header, then one block per call.
func (f *Flight) Write(p []byte) (int, error) {
	if !f.s.begun {
		if err := f.s.takeHeader(p); err != nil {
			return 0, err
		}
		tw, err := f.s.begin(f.out, nil)
		if err != nil {
			return 0, err
		}
		f.tw = tw
		return len(p), nil
	}
	f.firingNow = f.firingNow[:0]
	info, err := f.s.scan(p, func(ev *event.Event) {
		for i := range f.o.Triggers {
			t := &f.o.Triggers[i]
			if what, ok := t.Match(ev, &f.s); ok {
				f.firingNow = append(f.firingNow, firing{t, what, ev.Seq, ev.Time})
				break
			}
		}
	})
	if err != nil {
		return 0, err
	}
	f.stats.Seen++
	if f.open && info.events > 0 && info.minTime > f.until {
		f.close()
	}
	// Outside a window a block is kept for a later window's past (a copy:
	// the writer reuses its buffer); inside one it goes out at once.
	buffered := !f.open
	if buffered {
		f.ring = append(f.ring, ringBlock{append([]byte(nil), p...), info})
		f.ringBytes += len(p)
	}
	for _, fr := range f.firingNow {
		f.stats.Firings++
		if f.open {
			f.until = max(f.until, min(fr.time+int64(f.o.Post), f.firstFiring+int64(f.o.MaxWindow)))
			if err := f.trigger(fr); err != nil {
				return 0, err
			}
			continue
		}
		if f.continues(fr) {
			if err := f.reopen(fr); err != nil {
				return 0, err
			}
			continue
		}
		if !f.allowed(fr.time) {
			f.stats.Suppressed++
			f.pending++
			continue
		}
		if err := f.openWindow(fr); err != nil {
			return 0, err
		}
	}
	if f.open && !buffered {
		if err := f.emit(p, info); err != nil {
			return 0, err
		}
	}
	f.evict(info)
	return len(p), nil
}

// continues says whether a firing's window overlaps the last one with
// nothing left out between them: then the two are one window.
func (f *Flight) continues(fr firing) bool {
	return f.stats.Windows > 0 && !f.droppedSinceClose && fr.time-int64(f.o.Pre) <= f.until &&
		fr.time < f.firstFiring+int64(f.o.MaxWindow)
}

// reopen carries the last window on: the blocks since it closed, then on.
func (f *Flight) reopen(fr firing) error {
	f.open, f.opened = true, f.until
	f.until = max(f.until, fr.time+int64(f.o.Post))
	return f.flushRing(fr, f.ring)
}

// flushRing writes the firing's trigger record and then blocks, the ring's
// newest, and empties the ring.
func (f *Flight) flushRing(fr firing, blocks []ringBlock) error {
	if err := f.trigger(fr); err != nil {
		return err
	}
	for _, b := range blocks {
		if err := f.emit(b.data, b.info); err != nil {
			return err
		}
	}
	clear(f.ring)
	f.ring, f.ringBytes = f.ring[:0], 0
	return nil
}

// allowed says whether a new window may open at t under the rate limit.
func (f *Flight) allowed(t int64) bool {
	recent := f.opens[:0]
	for _, o := range f.opens {
		if t-o < int64(time.Minute) {
			recent = append(recent, o)
		}
	}
	f.opens = recent
	return len(f.opens) < f.o.MaxWindowsPerMinute
}

// openWindow writes what the ring holds from Pre before the firing on,
// behind the name tables, a resume record and the firing's trigger record.
func (f *Flight) openWindow(fr firing) error {
	from := fr.time - int64(f.o.Pre)
	first := 0
	for first < len(f.ring) && f.ring[first].info.events > 0 && f.ring[first].info.maxTime < from {
		first++
	}
	if from < f.spaceHorizon {
		f.stats.ShortPre++
	}
	blocks := f.ring[first:]
	f.droppedSinceClose = f.droppedSinceClose || first > 0
	firstSeq := fr.seq
	for _, b := range blocks {
		if b.info.events > 0 {
			firstSeq = min(firstSeq, b.info.minSeq)
		}
	}
	for _, m := range f.s.meta[f.metaDone:] {
		if err := f.tw.Append(m.typ, m.body); err != nil {
			return err
		}
	}
	f.metaDone = len(f.s.meta)
	if err := f.tw.AppendResume(trace.Resume{FirstSeq: firstSeq, Cause: trace.ResumeWindow}); err != nil {
		return err
	}
	f.open, f.until, f.records, f.firstFiring = true, fr.time+int64(f.o.Post), 0, fr.time
	f.droppedSinceClose = false
	f.opened = fr.time
	if len(blocks) > 0 && blocks[0].info.events > 0 {
		f.opened = min(f.opened, blocks[0].info.minTime)
	}
	f.opens = append(f.opens, fr.time)
	f.stats.Windows++
	return f.flushRing(fr, blocks)
}

// trigger writes a firing's trigger record, within the window's bound.
func (f *Flight) trigger(fr firing) error {
	if f.records >= f.o.MaxTriggerRecords {
		f.pending++
		return nil
	}
	f.records++
	err := f.tw.AppendTrigger(trace.Trigger{Seq: fr.seq, TimeNs: fr.time, Suppressed: f.pending, Expr: fr.t.Expr, What: fr.what})
	f.pending = 0
	if err != nil {
		return err
	}
	return f.tw.Flush()
}

// emit writes one block of the open window.
func (f *Flight) emit(data []byte, info blockInfo) error {
	if err := f.tw.Flush(); err != nil {
		return err
	}
	if _, err := f.out.Write(data); err != nil {
		return fmt.Errorf("writing the flight recorder's window: %w", err)
	}
	f.stats.Blocks++
	f.endSeen = f.endSeen || info.end
	if info.events > 0 {
		f.writtenSeq = max(f.writtenSeq, info.maxSeq+1)
	}
	return nil
}

// close ends the open window.
func (f *Flight) close() {
	f.open = false
	f.stats.Written += time.Duration(f.until - f.opened)
}

// evict drops blocks no future window can reach back to, and the oldest
// beyond the ring's size; the newest block always stays.
func (f *Flight) evict(latest blockInfo) {
	horizon := latest.maxTime - int64(f.o.Pre)
	drop := 0
	for ; drop < len(f.ring)-1; drop++ {
		b := &f.ring[drop]
		if b.info.events > 0 && b.info.maxTime >= horizon {
			if f.ringBytes <= f.o.RingBytes {
				break
			}
			f.spaceHorizon = max(f.spaceHorizon, b.info.maxTime)
		}
		f.ringBytes -= len(b.data)
	}
	if drop > 0 {
		f.droppedSinceClose = true
		n := copy(f.ring, f.ring[drop:])
		clear(f.ring[n:])
		f.ring = f.ring[:n]
	}
}

// Close ends the output: an end record, unless the recording's own went
// out inside a window.
func (f *Flight) Close() error {
	if f.tw == nil {
		return nil
	}
	if f.open {
		f.close()
	}
	if f.endSeen {
		return nil
	}
	// Numbers after the last window were left out, not lost.
	if err := f.tw.AppendEnd(trace.End{NextSeq: f.writtenSeq}); err != nil {
		return err
	}
	return f.tw.Flush()
}
