package cli

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

// lineWatcher is an output that says when a line starting with a prefix was written.
type lineWatcher struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newLineWatcher() *lineWatcher { return &lineWatcher{written: make(chan struct{}, 1)} }

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	select {
	case w.written <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *lineWatcher) has(prefix string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.HasPrefix(w.buf.String(), prefix) || strings.Contains(w.buf.String(), "\n"+prefix)
}

// waitFor waits up to within for a line starting with prefix.
func (w *lineWatcher) waitFor(t *testing.T, prefix string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for !w.has(prefix) {
		select {
		case <-w.written:
		case <-deadline:
			w.mu.Lock()
			defer w.mu.Unlock()
			t.Fatalf("no line %q within %v of its event's block; printed so far:\n%s", prefix, within, w.buf.String())
		}
	}
}

// TestParseOfAStreamPrintsEachEventAsItComes writes a trace block by block
// into a pipe that stays open, as live's recorder and `record -o - |`
// do, and wants each event printed while the writer is still writing: at
// once when in order, and within holdMax when a sequence number before
// it never comes (lost in a full ring). Parse buffered a MiB of output and
// the orderer held everything behind a gap until the trace ended.
func TestParseOfAStreamPrintsEachEventAsItComes(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(in io.Reader, out io.Writer, errs io.Writer) error
		// pipe gives the command an operating-system pipe (parse -i -)
		// rather than an in-process one (live).
		pipe bool
	}{
		{"live", func(in io.Reader, out, errs io.Writer) error {
			return parseLive(in, out, errs, &event.Filter{}, false)
		}, false},
		{"parse -i -", func(in io.Reader, out, errs io.Writer) error {
			if code := Main([]string{"parse", "-i", "-"}, in, out, errs); code != 0 {
				return io.ErrUnexpectedEOF
			}
			return nil
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var in io.Reader
			var wr io.WriteCloser
			if c.pipe {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				in, wr = r, w
			} else {
				r, w := io.Pipe()
				in, wr = r, w
			}
			out, errs := newLineWatcher(), &bytes.Buffer{}
			done := make(chan error, 1)
			go func() { done <- c.run(in, out, errs) }()

			w, err := tracetest.NewWriter(wr, trace.NativeOrder)
			if err != nil {
				t.Fatal(err)
			}
			a := tracetest.Addrs(netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:5201"), 1)
			conn := uint16(event.TypeTCPConn)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(w.Event(conn, tracetest.Conn(0, 1_000, 0, 0xffff888100000000, a, 7, 2, 100, "client")))
			must(w.Event(conn, tracetest.Conn(1, 2_000, 1, 0xffff888100000000, a, 2, 1, 0, "")))
			must(w.Flush())
			out.waitFor(t, "1 ", time.Second)
			// Sequence number 2 never comes.
			must(w.Event(conn, tracetest.Conn(3, 3_000, 1, 0xffff888100000000, a, 1, 4, 100, "client")))
			must(w.Flush())
			out.waitFor(t, "3 ", holdMax+time.Second)

			must(w.AppendEnd(trace.End{NextSeq: 4, BootNs: 4_000}))
			must(w.Flush())
			wr.Close()
			if err := <-done; err != nil {
				t.Fatalf("parse failed: %v: %s", err, errs)
			}
			if !regexp.MustCompile(`\b1 sequence numbers? missing in 1 gaps?\b`).MatchString(errs.String()) {
				t.Errorf("the summary does not count the number that never came: %s", errs)
			}
		})
	}
}

// TestLiveOutputFlushesByTimeWhileInputFlows: a stream that never waits
// (the parser is the slower side) still has its lines flushed every
// flushEvery, not when a MiB has gathered; and each wake does not flush.
func TestLiveOutputFlushesByTimeWhileInputFlows(t *testing.T) {
	var sink bytes.Buffer
	lo := &liveOutput{out: bufio.NewWriterSize(&sink, 1<<20), sum: analyze.NewSummary()}
	t0 := time.Now()
	lo.out.WriteString("0 line\n")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(lo.wake(t0, true)) // the input waits: out at once
	if sink.String() != "0 line\n" {
		t.Fatalf("a waiting input did not flush: %q", sink.String())
	}
	lo.out.WriteString("1 line\n")
	must(lo.wake(t0.Add(flushEvery/2), false))
	if sink.Len() != len("0 line\n") {
		t.Fatalf("flushed again after %v with input flowing: %q", flushEvery/2, sink.String())
	}
	must(lo.wake(t0.Add(flushEvery), false))
	if !strings.HasSuffix(sink.String(), "1 line\n") {
		t.Fatalf("not flushed %v after the last flush while input flows: %q", flushEvery, sink.String())
	}
}
