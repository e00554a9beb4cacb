package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
	// streamTick is how often a waiting input wakes the output: the
	// recorder's blocks come at least every 200 ms, so an event is
	// printed within about half a second.
	streamTick = 100 * time.Millisecond
)

// isStreamPath says whether the input named path (- for stdin) may be a
// trace still being written: a pipe, FIFO, socket or terminal, not a
// regular file or an in-memory reader.
func isStreamPath(path string, stdin io.Reader) bool {
	var st os.FileInfo
	var err error
	if path == "-" {
		f, ok := stdin.(*os.File) // not an in-memory reader
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
// output is flushed when the input has waited a tick, and at least every
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

// streamReader reads a trace still being written, waking the live output
// (wake, set by parseTraces) every tick while the input waits: a Read
// blocked on a pipe could not. A pipe or socket is read with deadlines, in
// the caller's goroutine, so a bulk stream costs what it did; other inputs
// (a FIFO behind the file sniffer's buffer) by a goroutine of their own.
type streamReader struct {
	in     io.Reader
	file   *os.File // in, when its reads take deadlines
	raw    syscall.RawConn
	undo   func() // restores the input's blocking mode
	wake   func(now time.Time, waiting bool) error
	tick   time.Duration
	err    error // the input's, or the output's from a wake, returned from then on
	reader *readerGoroutine
}

func newStreamReader(in io.Reader, tick time.Duration) *streamReader {
	r := &streamReader{in: in, tick: tick, wake: func(time.Time, bool) error { return nil }}
	if f, ok := in.(*os.File); ok {
		if r.file, r.undo = pollable(f); r.file != nil {
			if raw, err := r.file.SyscallConn(); err == nil {
				r.raw = raw
			} else {
				r.undo()
				r.file, r.undo = nil, nil
			}
		}
	}
	return r
}

// pollable returns a copy of f's descriptor that the runtime's poller
// reads, so that its reads take deadlines, or nil when f is no pipe or
// socket (a terminal's mode is the shell's: left alone). undo restores the
// blocking mode the descriptor shares with f.
func pollable(f *os.File) (*os.File, func()) {
	st, err := f.Stat()
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return nil, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, nil
	}
	fd := -1
	if err := rc.Control(func(orig uintptr) { fd, _ = unix.FcntlInt(orig, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || fd < 0 {
		return nil, nil
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil || unix.SetNonblock(fd, true) != nil {
		unix.Close(fd)
		return nil, nil
	}
	// NewFile sees the descriptor non-blocking and hands it to the poller.
	nf := os.NewFile(uintptr(fd), f.Name())
	if nf.SetReadDeadline(time.Time{}) != nil {
		nf.Close()
		return nil, nil
	}
	return nf, func() {
		unix.SetNonblock(fd, flags&unix.O_NONBLOCK != 0)
		nf.Close()
	}
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	var res streamRead
	var werr error
	if r.file != nil {
		for {
			// What has come is read at once, with no deadline to arm: a
			// bulk stream pays one read(2) a chunk, as before.
			n, err := r.readNow(p)
			if err != unix.EAGAIN {
				res = streamRead{n, err}
				break
			}
			r.file.SetReadDeadline(time.Now().Add(r.tick))
			n, err = r.file.Read(p)
			r.file.SetReadDeadline(time.Time{})
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				res = streamRead{n, err}
				break
			}
			if werr = r.wake(time.Now(), true); werr != nil {
				break
			}
		}
	} else {
		if r.reader == nil {
			r.reader = startReader(r.in)
		}
		res, werr = r.reader.read(p, r.tick, r.wake)
	}
	if werr == nil {
		werr = r.wake(time.Now(), false)
	}
	r.err = res.err
	if werr != nil {
		r.err = werr
	}
	return res.n, r.err
}

// readNow reads what the input holds, unix.EAGAIN when nothing.
func (r *streamReader) readNow(p []byte) (n int, err error) {
	cerr := r.raw.Read(func(fd uintptr) bool {
		for {
			if n, err = unix.Read(int(fd), p); err != unix.EINTR {
				return true
			}
		}
	})
	switch {
	case cerr != nil:
		return 0, cerr
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// Close gives the input back as it was.
func (r *streamReader) Close() {
	if r.undo != nil {
		r.undo()
	}
	if r.reader != nil {
		close(r.reader.done)
	}
}

// readerGoroutine reads an input whose reads take no deadline, into the
// caller's buffer.
type readerGoroutine struct {
	reqs    chan []byte
	results chan streamRead
	done    chan struct{}
	timer   *time.Timer
}

type streamRead struct {
	n   int
	err error
}

func startReader(in io.Reader) *readerGoroutine {
	g := &readerGoroutine{reqs: make(chan []byte), results: make(chan streamRead, 1), done: make(chan struct{}),
		timer: time.NewTimer(time.Hour)}
	g.timer.Stop()
	go func() {
		for {
			select {
			case p := <-g.reqs:
				n, err := in.Read(p)
				g.results <- streamRead{n, err}
			case <-g.done:
				return
			}
		}
	}()
	return g
}

// read reads into p, waking every tick until the input answers. p is the
// goroutine's until then, even when a wake fails meanwhile: that error
// waits for the read.
func (g *readerGoroutine) read(p []byte, tick time.Duration, wake func(time.Time, bool) error) (streamRead, error) {
	g.reqs <- p
	var werr error
	g.timer.Reset(tick)
	defer g.timer.Stop()
	for {
		select {
		case res := <-g.results:
			return res, werr
		case now := <-g.timer.C:
			if werr == nil {
				werr = wake(now, true)
			}
			g.timer.Reset(tick)
		}
	}
}
