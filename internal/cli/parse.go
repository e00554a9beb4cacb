package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/units"
)

type parseFlags struct {
	json    bool
	filters filterFlags
	partial partialFlag
}

func parseCmd(e *env) *cobra.Command {
	var flags parseFlags
	var inputs []string
	c := &cobra.Command{
		Use:   "parse [TRACE...] [flags]",
		Short: "print a trace as text, one line per event, in sequence order",
		Long: `parse prints a trace recorded by skbtrace record, in the line format of the
original skbtrace:

  SEQ SEC.NSEC cpu=N action=NAME [FLAG] key=value ...

Lines are ordered by the kernel's sequence number. A summary (events, lost
events, sequence gaps, a torn tail) goes to standard error. A damaged trace
is printed up to the damage (or past it, from the next intact block), then
parse fails with the offset, or only warns with --partial.`,
		Example: `  skbtrace parse run.trace
  skbtrace parse -i run.trace --filter-port 5201 --json
  skbtrace record -o - -d 5 | skbtrace parse -`,
		RunE: func(c *cobra.Command, args []string) error {
			inputs, err := inputArgs(c, args, inputs)
			if err != nil {
				return err
			}
			// Standard input is read as a stream below the file sniffer's
			// buffer, which then reads only what has come.
			stdin := e.stdin
			var stdinStream *streamReader
			if slices.Contains(inputs, "-") && isStreamPath("-", stdin) {
				stdinStream = newStreamReader(stdin, streamTick)
				defer stdinStream.Close()
				stdin = stdinStream
			}
			tf, filter, err := traceInputs(inputs, stdin, &flags.filters)
			if err != nil {
				return err
			}
			defer tf.close()
			streams := make([]*streamReader, len(tf.names))
			for i, name := range tf.names {
				switch {
				case name == "-":
					streams[i] = stdinStream
				case isStreamPath(name, nil):
					streams[i] = newStreamReader(tf.ins[i], streamTick)
					defer streams[i].Close()
					tf.ins[i] = streams[i]
				}
			}
			return parseTraces(tf, e.stdout, e.stderr, &filter, flags.json, flags.partial, streams)
		},
	}
	c.Flags().StringSliceVarP(&inputs, "input", "i", []string{"skbtrace.trace"}, inputHelp)
	c.Flags().BoolVar(&flags.json, "json", false, "one JSON object per line, with the text form's field names")
	flags.filters.bind(c.Flags())
	flags.partial.bind(c.Flags())
	return c
}

// inputHelp describes -i of the commands that read a recording.
const inputHelp = "trace `FILE` (or give it as an argument), or - for standard input; several (comma-separated or repeated, or a pattern such as 'run.trace.*') are read in order as one recording, as record --max-size writes them"

// replay reads a whole trace into sum, handing fn the events that pass the
// filter. Damage is returned as a *trace.FormatError or *trace.TruncatedError
// after every good event was handed over.
func replay(in io.Reader, filter *event.Filter, sum *analyze.Summary, fn func(*event.Event) error) (*trace.Reader, error) {
	r, err := trace.NewReader(in)
	if err != nil {
		return nil, err
	}
	return r, analyze.Replay(r, filter, sum, fn)
}

// replayFiles reads the files of one recording in order as one trace, as
// replay does; read counts the bytes read, and is -1 when a file is not a
// trace (that error names it).
func replayFiles(tf *traceFiles, filter *event.Filter, sum *analyze.Summary, fn func(*event.Event) error) (read int64, err error) {
	rs := make([]*trace.Reader, 0, len(tf.ins))
	for i, in := range tf.ins {
		r, err := trace.NewReader(in)
		if err != nil {
			if len(tf.ins) > 1 {
				err = fmt.Errorf("reading %s: %w", tf.names[i], err)
			}
			return -1, err
		}
		rs = append(rs, r)
	}
	err = analyze.ReplayFiles(rs, filter, sum, fn)
	for _, r := range rs {
		read += r.Offset()
	}
	// Offsets are within a file: name the one being read.
	if ferr, ok := err.(*analyze.FileError); ok {
		err = fmt.Errorf("reading %s: %w", tf.names[ferr.Index], ferr.Err)
	}
	return read, err
}

// readPart says what a damaged trace's results cover: the events before
// the damage, or those of every intact block when reading resumed past it.
func readPart(err error) string {
	var ferr *trace.FormatError
	if errors.As(err, &ferr) && ferr.Resumed > 0 {
		return "of the intact blocks"
	}
	return "before it"
}

// isDamage tells a damaged trace, after which results cover what came before, from other failures.
func isDamage(err error) bool {
	var ferr *trace.FormatError
	var terr *trace.TruncatedError
	return errors.As(err, &ferr) || errors.As(err, &terr)
}

// parseTrace prints every event of a trace, then its summary on stderr.
func parseTrace(in io.Reader, stdout, stderr io.Writer, filter *event.Filter, asJSON bool) error {
	return parseTraces(&traceFiles{names: []string{"-"}, ins: []io.Reader{in}}, stdout, stderr, filter, asJSON, false, nil)
}

// parseLive prints a trace still being written, as live's recorder writes it.
func parseLive(in io.Reader, stdout, stderr io.Writer, filter *event.Filter, asJSON bool) error {
	sr := newStreamReader(in, streamTick)
	defer sr.Close()
	return parseTraces(&traceFiles{names: []string{"-"}, ins: []io.Reader{sr}}, stdout, stderr, filter, asJSON, false, []*streamReader{sr})
}

// parseTraces prints every event of a recording's files, then the summary.
// The inputs read through streams (non-nil for a pipe, live's recorder)
// are printed as they come, each event within a second; files on disk in
// large writes.
func parseTraces(tf *traceFiles, stdout, stderr io.Writer, filter *event.Filter, asJSON bool, partial partialFlag, streams []*streamReader) error {
	out := bufio.NewWriterSize(stdout, 1<<20)
	var buf []byte
	sum := analyze.NewSummary()
	lo := &liveOutput{out: out, sum: sum}
	for _, sr := range streams {
		if sr != nil {
			sr.wake = lo.wake
		}
	}
	// A flight recorder's windows and triggers are printed inline, as
	// blkparse prints its notify records: each window where it begins, each
	// trigger before the event that fired it.
	var triggers []trace.Trigger
	sum.OnWindow = func() {
		buf = report.AppendWindow(buf[:0], sum.Windows, asJSON)
		out.Write(buf)
	}
	sum.OnTrigger = func(t trace.Trigger) { triggers = append(triggers, t) }
	printTriggers := func(upTo uint64) {
		for len(triggers) > 0 && triggers[0].Seq <= upTo {
			buf = report.AppendTrigger(buf[:0], &triggers[0], asJSON)
			out.Write(buf)
			triggers = triggers[1:]
		}
	}
	read, rerr := replayFiles(tf, filter, sum, func(ev *event.Event) error {
		printTriggers(ev.Seq)
		if asJSON {
			buf = report.AppendJSON(buf[:0], ev, sum.Names)
		} else {
			buf = report.AppendText(buf[:0], ev, sum.Names)
		}
		_, err := out.Write(buf)
		return err
	})
	if read < 0 {
		return rerr
	}
	printTriggers(math.MaxUint64)
	if err := out.Flush(); err != nil && rerr == nil {
		rerr = fmt.Errorf("writing output: %w", err)
	}
	printSummary(stderr, sum, read, len(tf.ins))
	if isDamage(rerr) {
		return partial.settle(stderr, rerr, "every event "+readPart(rerr)+" was printed", nil)
	}
	return rerr
}

func printSummary(w io.Writer, s *analyze.Summary, read int64, files int) {
	var total uint64
	for _, n := range s.ByType {
		total += n
	}
	fmt.Fprintf(w, "skbtrace: %s read, %d printed, %s", units.Count(total, "event", "events"), s.Matched, units.SignedBytes(read))
	if files > 1 {
		fmt.Fprintf(w, " in %d files", files)
	}
	fmt.Fprintf(w, "; lost %d", s.TotalLost())
	if s.Missing > 0 {
		fmt.Fprintf(w, "; %s missing in %s", units.Count(s.Missing, "sequence number", "sequence numbers"), units.Count(s.Gaps, "gap", "gaps"))
	}
	if s.Late > 0 {
		fmt.Fprintf(w, "; %s out of order", units.Count(s.Late, "event", "events"))
	}
	if s.UnknownRecs > 0 {
		fmt.Fprintf(w, "; %s of unknown types skipped (written by a newer skbtrace?)", units.Count(s.UnknownRecs, "record", "records"))
	}
	fmt.Fprintln(w)
	if !s.Ended {
		fmt.Fprintln(w, "skbtrace: warning: the recording did not end normally (no end record): events after the last flush are missing")
	}
}
