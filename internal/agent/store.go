package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// store is the recording's recent past: the trace.Writer of the recorder
// writes its header and then whole blocks (one Write each), which the store
// keeps for the window, within maxBytes. Name tables (namespaces, enums,
// symbols, sampling, settings) are kept for as long as the agent runs, so a
// window that starts after them still names everything. Each block's events
// go to the sink as it arrives.
type store struct {
	mu       sync.Mutex
	window   time.Duration
	maxBytes int
	header   []byte
	hdr      trace.Header
	blocks   []storedBlock
	bytes    int
	meta     []metaRecord
	nextSeq  uint64
	dropped  uint64 // blocks evicted early to stay within maxBytes
	sink     sink
	ev       event.Event
}

// sink takes what the store reads from each block.
type sink interface {
	event(*event.Event)
	loss(family uint16, n uint64)
	netns(inode uint32, name string)
	dropReasons(names map[uint32]string)
}

type storedBlock struct {
	at   time.Time
	data []byte
}

type metaRecord struct {
	typ  uint16
	body []byte
}

func newStore(window time.Duration, maxBytes int, sink sink) *store {
	return &store{window: window, maxBytes: maxBytes, sink: sink}
}

// Write takes the header, then one block per call.
func (s *store) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := bytes.Clone(p) // the writer reuses its buffer
	if s.header == nil {
		r, err := trace.NewReader(bytes.NewReader(data))
		if err != nil {
			return 0, fmt.Errorf("reading the recorder's header: %w", err)
		}
		s.header, s.hdr = data, r.Header
		return len(p), nil
	}
	if err := s.scan(data); err != nil {
		return 0, err
	}
	now := time.Now()
	s.blocks = append(s.blocks, storedBlock{now, data})
	s.bytes += len(data)
	s.evict(now)
	return len(p), nil
}

// scan keeps the block's name tables and hands its events on.
func (s *store) scan(block []byte) error {
	r, err := trace.NewReader(io.MultiReader(bytes.NewReader(s.header), bytes.NewReader(block)))
	if err != nil {
		return err
	}
	dec := event.NewDecoder(&s.hdr)
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the recorder's block: %w", err)
		}
		switch {
		case event.IsEvent(rec.Type):
			ok, err := dec.Decode(rec, &s.ev)
			if err != nil || !ok {
				continue
			}
			s.nextSeq = max(s.nextSeq, s.ev.Seq+1)
			s.sink.event(&s.ev)
		case rec.Type == trace.RecordLoss:
			// Losses stay with their block's window.
			if l, err := trace.DecodeLoss(r.ByteOrder(), rec.Body); err == nil {
				s.sink.loss(l.Family, l.Count)
			}
		case rec.Type == trace.RecordEnd:
			// Written per request.
		default:
			switch rec.Type {
			case trace.RecordNetns:
				if n, err := trace.DecodeNetns(r.ByteOrder(), rec.Body); err == nil {
					s.sink.netns(n.Inode, n.Name)
				}
			case trace.RecordEnum:
				if e, err := trace.DecodeEnum(r.ByteOrder(), rec.Body); err == nil && e.Kind == trace.EnumDropReason {
					s.sink.dropReasons(e.Names)
				}
			}
			s.meta = append(s.meta, metaRecord{rec.Type, bytes.Clone(rec.Body)})
		}
	}
}

func (s *store) evict(now time.Time) {
	for len(s.blocks) > 1 && (now.Sub(s.blocks[0].at) > s.window || s.bytes > s.maxBytes) {
		if now.Sub(s.blocks[0].at) <= s.window {
			s.dropped++
		}
		s.bytes -= len(s.blocks[0].data)
		s.blocks[0] = storedBlock{}
		s.blocks = s.blocks[1:]
	}
}

// recording reads the trace since a time (at block granularity: the
// recorder flushes about once a second), with the name tables first and an
// end record, so parse and stat read it whole. It reads the blocks in place: blocks
// never change once stored, so a snapshot of the list is taken under the
// lock and read without it, and neither a slow reader nor a replay holds up
// the recorder or copies the window.
func (s *store) recording(since time.Time) (io.Reader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header == nil {
		return nil, errors.New("the recording has not started")
	}
	var head, tail bytes.Buffer
	tw, err := trace.NewWriter(&head, s.hdr)
	if err != nil {
		return nil, err
	}
	for _, m := range s.meta {
		if err := tw.Append(m.typ, m.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	parts := []io.Reader{&head}
	for _, b := range s.blocks {
		if !b.at.Before(since) {
			parts = append(parts, bytes.NewReader(b.data))
		}
	}
	// The end record goes through a writer of its own, whose header is cut.
	ew, err := trace.NewWriter(&tail, s.hdr)
	if err != nil {
		return nil, err
	}
	if err := ew.Flush(); err != nil {
		return nil, err
	}
	cut := tail.Len()
	if err := ew.AppendEnd(trace.End{NextSeq: s.nextSeq}); err != nil {
		return nil, err
	}
	if err := ew.Flush(); err != nil {
		return nil, err
	}
	tail.Next(cut)
	return io.MultiReader(append(parts, &tail)...), nil
}

// stats says how much the store holds.
func (s *store) stats() (blocks, bytes int, dropped uint64, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.blocks) > 0 {
		oldest = s.blocks[0].at
	}
	return len(s.blocks), s.bytes, s.dropped, oldest
}
