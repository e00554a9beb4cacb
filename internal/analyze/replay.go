package analyze

import (
	"errors"
	"fmt"
	"io"

	"github.com/skbtrace/skbtrace/internal/event"
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
	Netns         NetnsNames
}

// TotalLost is the sum over families.
func (s *Summary) TotalLost() uint64 {
	var n uint64
	for _, v := range s.Lost {
		n += v
	}
	return n
}

// NetnsNames maps namespace inodes to the names recorded with them.
type NetnsNames map[uint32]string

// NetnsName implements report.Names.
func (n NetnsNames) NetnsName(inode uint32) string { return n[inode] }

// Inode finds a namespace by name.
func (n NetnsNames) Inode(name string) (uint32, bool) {
	for k, v := range n {
		if v == name {
			return k, true
		}
	}
	return 0, false
}

// FamilyName names a loss record's family; it is set by the collector
// package, which owns the family list, so this package stays free of it.
var FamilyName = func(id uint16) string { return fmt.Sprintf("family%d", id) }

// NewSummary returns an empty summary for Replay to fill.
func NewSummary() *Summary {
	return &Summary{ByType: map[event.Type]uint64{}, Lost: map[string]uint64{}, Netns: NetnsNames{}}
}

// Replay reads a whole trace into s, emitting events that pass the filter in
// sequence order; s.Netns names namespaces as far as the trace has named
// them. On damage, every good event before it has been emitted when the
// error is returned.
func Replay(r *trace.Reader, filter *event.Filter, s *Summary, emit func(*event.Event) error) error {
	s.Header = r.Header
	dec := event.NewDecoder(&r.Header)
	ord := NewOrderer(DefaultWindow)
	var ev event.Event
	var endSeq uint64
	out := func(e *event.Event) error {
		if !filter.Match(e, s.Netns.NetnsName) {
			return nil
		}
		s.Matched++
		return emit(e)
	}
	finish := func(err error) error {
		ferr := ord.Flush(endSeq, out)
		s.Gaps, s.Missing, s.Late = ord.Gaps, ord.Missing, ord.Late
		if err != nil {
			return err
		}
		return ferr
	}
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return finish(nil)
		}
		if err != nil {
			return finish(err)
		}
		switch {
		case event.IsEvent(rec.Type):
			ok, err := dec.Decode(rec, &ev)
			if err != nil {
				return finish(&trace.FormatError{Offset: rec.Offset, Msg: err.Error()})
			}
			if !ok {
				s.UnknownRecs++
				continue
			}
			s.ByType[ev.Type]++
			if err := ord.Push(&ev, out); err != nil {
				return finish(err)
			}
		case rec.Type == trace.RecordNetns:
			n, err := trace.DecodeNetns(r.ByteOrder(), rec.Body)
			if err != nil {
				return finish(&trace.FormatError{Offset: rec.Offset, Msg: err.Error()})
			}
			s.Netns[n.Inode] = n.Name
		case rec.Type == trace.RecordLoss:
			l, err := trace.DecodeLoss(r.ByteOrder(), rec.Body)
			if err != nil {
				return finish(&trace.FormatError{Offset: rec.Offset, Msg: err.Error()})
			}
			s.Lost[FamilyName(l.Family)] += l.Count
		case rec.Type == trace.RecordEnd:
			e, err := trace.DecodeEnd(r.ByteOrder(), rec.Body)
			if err != nil {
				return finish(&trace.FormatError{Offset: rec.Offset, Msg: err.Error()})
			}
			s.Ended, endSeq = true, e.NextSeq
		default:
			s.UnknownRecs++
		}
	}
}
