package record

import (
	"bytes"
	"fmt"
	"io"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// stream follows a trace as a trace.Writer writes it: the header in one
// Write, then one whole block per Write. It keeps the name tables, so that
// whatever starts a new file or window can name everything seen before.
type stream struct {
	header      trace.Header
	begun       bool
	dec         event.Decoder
	meta        []metaRecord
	ev          event.Event
	dropReasons map[uint32]string
	symbols     map[uint64]string // drop locations, as the recorder names them before their first drop
}

type metaRecord struct {
	typ  uint16
	body []byte
}

// blockInfo is what a block holds, by sequence number and time.
type blockInfo struct {
	events           int
	minSeq, maxSeq   uint64
	minTime, maxTime int64
	end              bool // the block holds the recording's end record
}

// takeHeader reads the header, the first Write.
func (s *stream) takeHeader(p []byte) error {
	r, err := trace.NewReader(bytes.NewReader(p))
	if err != nil {
		return fmt.Errorf("reading the recorder's header: %w", err)
	}
	s.header, s.begun = r.Header, true
	s.dec = event.NewDecoder(&s.header)
	return nil
}

// scan reads a block: it keeps its name tables and hands each event to fn
// (which must not keep it).
func (s *stream) scan(block []byte, fn func(*event.Event)) (blockInfo, error) {
	var info blockInfo
	err := trace.BlockRecords(s.header.ByteOrder, block, func(rec trace.Record) error {
		switch {
		case event.IsEvent(rec.Type):
			ok, err := s.dec.Decode(rec, &s.ev)
			if err != nil || !ok {
				return nil
			}
			if info.events == 0 {
				info.minSeq, info.maxSeq, info.minTime, info.maxTime = s.ev.Seq, s.ev.Seq, s.ev.Time, s.ev.Time
			}
			info.events++
			info.minSeq, info.maxSeq = min(info.minSeq, s.ev.Seq), max(info.maxSeq, s.ev.Seq)
			info.minTime, info.maxTime = min(info.minTime, s.ev.Time), max(info.maxTime, s.ev.Time)
			if fn != nil {
				fn(&s.ev)
			}
		case isNameTable(rec.Type):
			s.meta = append(s.meta, metaRecord{rec.Type, bytes.Clone(rec.Body)})
			switch rec.Type {
			case trace.RecordEnum:
				if e, err := trace.DecodeEnum(s.header.ByteOrder, rec.Body); err == nil && e.Kind == trace.EnumDropReason {
					s.dropReasons = e.Names
				}
			case trace.RecordSym:
				if sym, err := trace.DecodeSymbol(s.header.ByteOrder, rec.Body); err == nil {
					if s.symbols == nil {
						s.symbols = map[uint64]string{}
					}
					s.symbols[sym.Addr] = sym.Name
				}
			}
		case rec.Type == trace.RecordEnd:
			info.end = true
		}
		return nil
	})
	if err != nil {
		return info, fmt.Errorf("reading the recorder's block: %w", err)
	}
	return info, nil
}

// dropReason names a drop reason as the recording kernel does.
func (s *stream) dropReason(v uint32) string {
	if n, ok := s.dropReasons[v]; ok {
		return n
	}
	return fmt.Sprint(v)
}

// location names a drop location as symbol+offset, or "" when the recorder could not.
func (s *stream) location(addr uint64) string { return s.symbols[addr] }

// isNameTable says whether a record holds what names or qualifies the whole
// recording (namespaces, kernel enums and symbols, sampling, settings), as
// opposed to events, losses and the records that mark its own structure.
func isNameTable(typ uint16) bool {
	switch typ {
	case trace.RecordNetns, trace.RecordEnum, trace.RecordSym, trace.RecordSample, trace.RecordSettings:
		return true
	}
	return false
}

// begin starts a trace on w: the header, the name tables so far and, when
// given, a resume record, as one block. The writer it returns appends the
// end record later; blocks in between go to w as they are.
func (s *stream) begin(w io.Writer, resume *trace.Resume) (*trace.Writer, error) {
	tw, err := trace.NewWriter(w, s.header)
	if err != nil {
		return nil, err
	}
	for _, m := range s.meta {
		if err := tw.Append(m.typ, m.body); err != nil {
			return nil, err
		}
	}
	if resume != nil {
		if err := tw.AppendResume(*resume); err != nil {
			return nil, err
		}
	}
	return tw, tw.Flush()
}
