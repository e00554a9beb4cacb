package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// sniffInput says what an input is when it is not a trace, by name
// ("capture.pcap is a pcap capture, not a skbtrace trace: use skbtrace
// pcap"); in is buffered so that the trace reader reads on from its start.
func sniffInput(name string, in io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(in, 1<<20) // trace.NewReader's size: it reads through this one
	if start, _ := br.Peek(len(trace.Magic)); string(start) != trace.Magic {
		start, err := br.Peek(512)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		if nt := trace.Identify(start); nt != nil {
			if name == "-" {
				name = "standard input"
			}
			return nil, errors.New(nt.Named(name))
		}
	}
	return br, nil
}

// fileStart is what the start of a trace file says of its recording.
type fileStart struct {
	header trace.Header
	// firstSeq is where a rotation's later file goes on (its resume
	// record); rotated says it has one.
	firstSeq uint64
	rotated  bool
}

// readStart reads a trace file's header and its first block's records up to
// the first event; ok is false when the file cannot tell (the reading that
// follows reports why).
func readStart(path string) (s fileStart, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return s, false
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return s, false
	}
	s.header = r.Header
	for {
		rec, err := r.Next()
		if err != nil || event.IsEvent(rec.Type) || rec.Type == trace.RecordEnd {
			return s, err == nil || errors.Is(err, io.EOF)
		}
		if rec.Type == trace.RecordResume {
			res, err := trace.DecodeResume(r.ByteOrder(), rec.Body)
			if err != nil {
				return s, false
			}
			if res.Cause == trace.ResumeRotation {
				s.firstSeq, s.rotated = res.FirstSeq, true
			}
			return s, true
		}
	}
}

// oneRecording refuses files that are not one recording's rotation in
// order: every file of a rotation carries the recording's header, and each
// after the first goes on past where the one before it began.
func oneRecording(names []string) error {
	var prev fileStart
	for i, name := range names {
		s, ok := readStart(name)
		if !ok {
			return nil
		}
		if i == 0 {
			prev = s
			continue
		}
		first := names[i-1]
		if s.header != prev.header {
			return fmt.Errorf("%s and %s are files of different recordings (%s; %s): only the files of one recording, as record --max-size writes them, are read as one",
				first, name, began(&prev.header), began(&s.header))
		}
		switch {
		case !s.rotated && !prev.rotated:
			return fmt.Errorf("%s and %s both begin the same recording (a copy?): only the files of its rotation (BASE.000, BASE.001 ...) are read as one", first, name)
		case !s.rotated || s.firstSeq <= prev.firstSeq:
			return fmt.Errorf("%s does not follow %s in their recording's rotation (a copy, or the files out of order): give each file once, oldest first", name, first)
		}
		prev = s
	}
	return nil
}

// began says when and where a recording began.
func began(h *trace.Header) string {
	return fmt.Sprintf("begun %s on %s", h.Start().Format("2006-01-02 15:04:05.000"), h.Hostname)
}
