package analyze

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// Summary is what a reader learns about a recording besides its events.
type Summary struct {
	Header      trace.Header
	ByType      map[event.Type]uint64 // events read, before filtering
	Matched     uint64                // events that passed the filter
	UnknownRecs uint64                // records of types this version does not know
	// Lost counts what the kernel could not queue, per family name.
	Lost          map[string]uint64
	Gaps, Missing uint64
	Late          uint64
	Ended         bool // the recording wrote its end record
	Names         *Names
	// Sample is set when per-packet families were attached only part of the time.
	Sample *trace.Sample
	// Settings are the host's when the recording began (nil in older traces).
	Settings *host.Settings
	// Windows counts flight-recorder windows; Triggers are the triggers
	// that opened or extended them.
	Windows  int
	Triggers []trace.Trigger
	// OnWindow, when set, is called as each flight-recorder window begins,
	// after every event before it was emitted (Stat.Gap).
	OnWindow func()
	// OnTrigger, when set, is called with each trigger record as it is
	// read: before, or shortly after, the event that fired it is emitted.
	OnTrigger func(trace.Trigger)
	// held and release, set while ReplayFiles runs, count and emit the
	// events it holds back (see Held).
	held    func() int
	release func() error
}

// Held is how many events a running replay holds back: behind a sequence
// number that has not come, or behind a received reset that may be an
// abort's. A reader of a trace still being written (live, a pipe) asks
// from within its input's Read, when the input waits.
func (s *Summary) Held() int {
	if s.held == nil {
		return 0
	}
	return s.held()
}

// Release emits the events Held counts, as at the end of the trace: the
// numbers not come count as missing (and as late if they come after all),
// the reset as not an abort. Called from within the input's Read only.
func (s *Summary) Release() error {
	if s.release == nil {
		return nil
	}
	return s.release()
}

// TotalLost is the sum over families.
func (s *Summary) TotalLost() uint64 {
	var n uint64
	for _, v := range s.Lost {
		n += v
	}
	return n
}

// Names are the name tables a trace carries in-band: namespaces, the
// recording kernel's drop and reset reasons, and drop locations.
type Names struct {
	Netns        map[uint32]string
	DropReasons  map[uint32]string
	ResetReasons map[uint32]string
	Symbols      map[uint64]string
}

// NewNames returns empty tables.
func NewNames() *Names {
	return &Names{Netns: map[uint32]string{}, DropReasons: map[uint32]string{}, ResetReasons: map[uint32]string{}, Symbols: map[uint64]string{}}
}

// NetnsName implements report.Names.
func (n *Names) NetnsName(inode uint32) string { return n.Netns[inode] }

// DropReason implements report.Names.
func (n *Names) DropReason(v uint32) string { return n.DropReasons[v] }

// ResetReason implements report.Names.
func (n *Names) ResetReason(v uint32) string { return n.ResetReasons[v] }

// Symbol implements report.Names.
func (n *Names) Symbol(addr uint64) string { return n.Symbols[addr] }

// NewSummary returns an empty summary for Replay to fill.
func NewSummary() *Summary {
	return &Summary{ByType: map[event.Type]uint64{}, Lost: map[string]uint64{}, Names: NewNames()}
}

// Replay reads a whole trace into s, emitting events that pass the filter in
// sequence order; s.Names names namespaces as far as the trace has named
// them (likewise the other name tables). On damage, every good event before it has been emitted when the
// error is returned.
func Replay(r *trace.Reader, filter *event.Filter, s *Summary, emit func(*event.Event) error) error {
	return ReplayFiles([]*trace.Reader{r}, filter, s, emit)
}

// ReplayFiles reads the files of one recording in order (the files of a
// rotation, oldest first) as one trace: only the last one's end record ends
// it, and each later file's resume record carries the numbering on.
func ReplayFiles(rs []*trace.Reader, filter *event.Filter, s *Summary, emit func(*event.Event) error) error {
	if len(rs) == 0 {
		return errors.New("no trace to read")
	}
	s.Header = rs[0].Header
	ord := NewOrderer(DefaultWindow)
	var aborts abortJoiner
	var ev event.Event
	var endSeq uint64
	matched := func(e *event.Event) error {
		if !filter.Match(e, s.Names.NetnsName) {
			return nil
		}
		s.Matched++
		return emit(e)
	}
	out := func(e *event.Event) error { return aborts.Push(e, matched) }
	s.held = func() int { return len(ord.pending) + len(aborts.queue) }
	s.release = func() error {
		if err := ord.Flush(0, out); err != nil {
			return err
		}
		return aborts.Flush(matched)
	}
	defer func() { s.held, s.release = nil, nil }()
	finish := func(err error) error {
		ferr := ord.Flush(endSeq, out)
		if ferr == nil {
			ferr = aborts.Flush(matched)
		}
		s.Gaps, s.Missing, s.Late = ord.Gaps, ord.Missing, ord.Late
		if err != nil {
			return err
		}
		return ferr
	}
	window := func() error {
		if err := aborts.Flush(matched); err != nil {
			return err
		}
		if s.OnWindow != nil {
			s.OnWindow()
		}
		return nil
	}
	for i, r := range rs {
		// An earlier file's end record ends only that file.
		s.Ended, endSeq = false, 0
		if err := replayRecords(r, s, ord, &ev, out, window, &endSeq); err != nil {
			if len(rs) > 1 {
				err = &FileError{Index: i, Err: err}
			}
			return finish(err)
		}
	}
	if err := finish(nil); err != nil {
		return err
	}
	return unknownNetns(filter, s.Names)
}

// unknownNetns refuses a namespace filter by a name the trace never gave
// while it named others: a mistyped name would otherwise read as a
// recording with nothing in it.
func unknownNetns(filter *event.Filter, names *Names) error {
	if filter == nil || filter.NetnsName == "" {
		return nil
	}
	var known []string
	for _, name := range names.Netns {
		if name == filter.NetnsName {
			return nil
		}
		known = append(known, name)
	}
	if len(known) == 0 {
		return nil // nothing was recorded: no name to be wrong about
	}
	slices.Sort(known)
	return fmt.Errorf("--filter-netns %s: the trace names no such namespace (it names %s)", filter.NetnsName, strings.Join(known, ", "))
}

// FileError says which of several files an error of ReplayFiles is in.
type FileError struct {
	Index int
	Err   error
}

func (e *FileError) Error() string { return fmt.Sprintf("file %d: %v", e.Index+1, e.Err) }
func (e *FileError) Unwrap() error { return e.Err }

// replayRecords reads one file's records into s and ord.
func replayRecords(r *trace.Reader, s *Summary, ord *Orderer, ev *event.Event, out func(*event.Event) error, window func() error, endSeq *uint64) error {
	dec := event.NewDecoder(&r.Header)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case event.IsEvent(rec.Type):
			ok, err := dec.Decode(rec, ev)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			if !ok {
				s.UnknownRecs++
				continue
			}
			s.ByType[ev.Type]++
			if err := ord.Push(ev, out); err != nil {
				return err
			}
		case rec.Type == trace.RecordNetns:
			n, err := trace.DecodeNetns(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Names.Netns[n.Inode] = n.Name
		case rec.Type == trace.RecordLoss:
			l, err := trace.DecodeLoss(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Lost[event.FamilyName(l.Family)] += l.Count
		case rec.Type == trace.RecordEnum:
			e, err := trace.DecodeEnum(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			switch e.Kind {
			case trace.EnumDropReason:
				s.Names.DropReasons = e.Names
			case trace.EnumResetReason:
				s.Names.ResetReasons = e.Names
			}
		case rec.Type == trace.RecordSym:
			sym, err := trace.DecodeSymbol(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Names.Symbols[sym.Addr] = sym.Name
		case rec.Type == trace.RecordSample:
			smp, err := trace.DecodeSample(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Sample = &smp
		case rec.Type == trace.RecordSettings:
			var set host.Settings
			if err := json.Unmarshal(rec.Body, &set); err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: "settings record: " + err.Error()}
			}
			s.Settings = &set
		case rec.Type == trace.RecordResume:
			res, err := trace.DecodeResume(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			if err := ord.Resume(res.FirstSeq, out); err != nil {
				return err
			}
			if res.Cause == trace.ResumeWindow {
				s.Windows++
				if err := window(); err != nil {
					return err
				}
			}
		case rec.Type == trace.RecordTrigger:
			t, err := trace.DecodeTrigger(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Triggers = append(s.Triggers, t)
			if s.OnTrigger != nil {
				s.OnTrigger(t)
			}
		case rec.Type == trace.RecordEnd:
			e, err := trace.DecodeEnd(r.ByteOrder(), rec.Body)
			if err != nil {
				return &trace.FormatError{Offset: rec.Offset, Msg: err.Error()}
			}
			s.Ended, *endSeq = true, e.NextSeq
		default:
			s.UnknownRecs++
		}
	}
}
