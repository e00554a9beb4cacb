package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
)

const (
	// flushEvery bounds how long printed lines wait in the output buffer
	// while the input keeps coming (as tcpdump -l, but by time, not by line:
	// a bulk stream keeps its large writes).
	flushEvery = 200 * time.Millisecond
	// holdMax bounds how long the replay may hold events back behind a
	// sequence number that has not come (lost in a full ring) or a reset
	// that may be an abort's. The recorder writes a block at least every
	// 200 ms, so a number two CPUs raced for comes well within it.
	holdMax = 500 * time.Millisecond
	// streamChunk is what the input goroutine reads at once; streamChunks
	// how many such reads may wait for the parser.
	streamChunk  = 256 << 10
	streamChunks = 4
)

// isStreamPath says whether the input named path (- for stdin) may be a
// trace still being written: a pipe, FIFO, socket or terminal, not a
// regular file or an in-memory reader.
func isStreamPath(path string, stdin io.Reader) bool {
	var st os.FileInfo
	var err error
	if path == "-" {
		f, ok := stdin.(*os.File)
		if !ok {
			return false
		}
		st, err = f.Stat()
	} else {
		st, err = os.Stat(path)
	}
	return err == nil && !st.Mode().IsRegular()
}

// liveOutput prints a trace that is still being written as it comes: the
// output is flushed whenever the input waits, and at least every
// flushEvery while it does not, and what the replay holds back is let go
// after holdMax. It works from within the input's Read (streamReader), in
// the replay's goroutine, so nothing is shared.
type liveOutput struct {
	out       *bufio.Writer
	sum       *analyze.Summary
	lastFlush time.Time
	heldSince time.Time // when sum.Held became non-zero, or zero
}

// wake does what is due at now; waiting says the input has nothing to read.
func (l *liveOutput) wake(now time.Time, waiting bool) error {
	if l.sum.Held() == 0 {
		l.heldSince = time.Time{}
	} else if l.heldSince.IsZero() {
		l.heldSince = now
	} else if now.Sub(l.heldSince) >= holdMax {
		if err := l.sum.Release(); err != nil {
			return err
		}
		l.heldSince = time.Time{}
	}
	if l.out.Buffered() > 0 && (waiting || now.Sub(l.lastFlush) >= flushEvery) {
		l.lastFlush = now
		if err := l.out.Flush(); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}
	return nil
}

// streamReader reads its input in a goroutine of its own, so that its
// Read learns when the input waits and, while it does, wakes the live
// output every tick: a Read blocked on a pipe could do neither.
type streamReader struct {
	chunks chan streamRead
	free   chan []byte
	done   chan struct{}
	cur    []byte // what is left of the chunk being read
	buf    []byte // cur's buffer, returned to free when it is used up
	err    error
	wake   func(now time.Time, waiting bool) error
	tick   time.Duration
}

type streamRead struct {
	buf []byte
	n   int
	err error
}

func newStreamReader(in io.Reader, wake func(time.Time, bool) error, tick time.Duration) *streamReader {
	r := &streamReader{chunks: make(chan streamRead, streamChunks), free: make(chan []byte, streamChunks),
		done: make(chan struct{}), wake: wake, tick: tick}
	for range streamChunks {
		r.free <- make([]byte, streamChunk)
	}
	go func() {
		for {
			var buf []byte
			select {
			case buf = <-r.free:
			case <-r.done:
				return
			}
			n, err := in.Read(buf)
			// Never blocks: there are as many slots as buffers.
			r.chunks <- streamRead{buf, n, err}
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.buf != nil {
			r.free <- r.buf
			r.buf = nil
		}
		var c streamRead
		select {
		case c = <-r.chunks:
		default:
			var err error
			c, err = r.await()
			if err != nil {
				return 0, err
			}
		}
		r.buf, r.cur, r.err = c.buf, c.buf[:c.n], c.err
	}
	if err := r.wake(time.Now(), false); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// await waits for the input, waking the output at once and every tick.
func (r *streamReader) await() (streamRead, error) {
	if err := r.wake(time.Now(), true); err != nil {
		return streamRead{}, err
	}
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		select {
		case c := <-r.chunks:
			return c, nil
		case now := <-t.C:
			if err := r.wake(now, true); err != nil {
				return streamRead{}, err
			}
		}
	}
}

// Close stops the input goroutine once its read in progress returns.
func (r *streamReader) Close() { close(r.done) }
