package record

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/skbtrace/skbtrace/internal/trace"
)

// MinFileSize is the least --max-size: a file holds at least its header, the
// name tables and one whole block (up to a few hundred KB).
const MinFileSize = 1 << 20

// Rotator writes a recording into numbered files of at most MaxSize bytes
// each (BASE.000, BASE.001, ...), as tcpdump's -C and -W: each file starts
// with the header and every name table so far, resumes the numbering where
// the previous one stopped and ends with an end record, so it reads on its
// own; with MaxFiles, the oldest files are removed. Give it to
// trace.NewWriter as the output.
type Rotator struct {
	base     string
	maxSize  int64
	maxFiles int

	s       stream
	file    *os.File
	tw      *trace.Writer
	size    int64
	blocks  int
	index   int
	nextSeq uint64
	// Files are the files written and still present, oldest first.
	Files []string
	// Removed counts the files removed to stay within MaxFiles.
	Removed int
}

// NewRotator checks the limits; files are created as the recording writes.
func NewRotator(base string, maxSize int64, maxFiles int) (*Rotator, error) {
	if maxSize < MinFileSize {
		return nil, fmt.Errorf("a file size of %d bytes is below the least, %d (1 MiB)", maxSize, MinFileSize)
	}
	if maxFiles < 0 {
		return nil, errors.New("a negative number of files")
	}
	return &Rotator{base: base, maxSize: maxSize, maxFiles: maxFiles}, nil
}

// FileName is the name of the rotation's file number i.
func FileName(base string, i int) string { return fmt.Sprintf("%s.%03d", base, i) }

// Write takes the header, then one block per call.
func (r *Rotator) Write(p []byte) (int, error) {
	if !r.s.begun {
		if err := r.s.takeHeader(p); err != nil {
			return 0, err
		}
		return len(p), r.open(nil)
	}
	info, err := r.s.scan(p, nil)
	if err != nil {
		return 0, err
	}
	// The file must keep room for the end record that closes it.
	if r.blocks > 0 && r.size+int64(len(p))+trace.EndBlockLen > r.maxSize {
		first := r.nextSeq
		if info.events > 0 {
			first = min(first, info.minSeq)
		}
		if err := r.finish(); err != nil {
			return 0, err
		}
		if err := r.open(&trace.Resume{FirstSeq: first, Cause: trace.ResumeRotation}); err != nil {
			return 0, err
		}
	}
	if info.events > 0 {
		r.nextSeq = max(r.nextSeq, info.maxSeq+1)
	}
	n, err := r.file.Write(p)
	r.size += int64(n)
	r.blocks++
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", r.file.Name(), err)
	}
	return n, nil
}

// open starts the next file and removes the oldest beyond MaxFiles.
func (r *Rotator) open(resume *trace.Resume) error {
	name := FileName(r.base, r.index)
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("creating trace file: %w", err)
	}
	counted := &countingWriter{w: f}
	tw, err := r.s.begin(counted, resume)
	if err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	r.file, r.tw, r.size, r.blocks = f, tw, counted.n, 0
	r.index++
	r.Files = append(r.Files, name)
	for r.maxFiles > 0 && len(r.Files) > r.maxFiles {
		if err := os.Remove(r.Files[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the oldest trace file: %w", err)
		}
		r.Files = r.Files[1:]
		r.Removed++
	}
	return nil
}

// finish closes the current file with an end record: the next file goes on
// from the sequence number it gives.
func (r *Rotator) finish() error {
	if err := r.tw.AppendEnd(trace.End{NextSeq: r.nextSeq}); err != nil {
		return err
	}
	if err := r.tw.Flush(); err != nil {
		return err
	}
	return r.file.Close()
}

// Close closes the last file; the recording wrote its own end record there.
func (r *Rotator) Close() error {
	if r.file == nil {
		return nil
	}
	return r.file.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
