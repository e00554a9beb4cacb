package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/trace"
)

type parseFlags struct {
	json    bool
	filters filterFlags
}

func parseCmd(e *env) *cobra.Command {
	var flags parseFlags
	var input string
	c := &cobra.Command{
		Use:   "parse [flags]",
		Short: "print a trace as text, one line per event, in sequence order",
		Long: `parse prints a trace recorded by skbtrace record, in the line format of the
original skbtrace:

  SEQ SEC.NSEC cpu=N action=NAME [FLAG] key=value ...

Lines are ordered by the kernel's sequence number. A summary (events, lost
events, sequence gaps, a torn tail) goes to standard error. A damaged trace
is printed up to the damage, then parse fails with the offset.`,
		Example: `  skbtrace parse -i run.trace
  skbtrace parse -i run.trace --filter-port 5201 --json
  skbtrace record -o - -d 5 | skbtrace parse -i -`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			in, closeIn, filter, err := traceInput(input, e.stdin, &flags.filters)
			if err != nil {
				return err
			}
			defer closeIn()
			return parseTrace(in, e.stdout, e.stderr, &filter, flags.json)
		},
	}
	c.Flags().StringVarP(&input, "input", "i", "skbtrace.trace", "trace `FILE`, or - for standard input")
	c.Flags().BoolVar(&flags.json, "json", false, "one JSON object per line, with the text form's field names")
	flags.filters.bind(c.Flags())
	return c
}

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

// isDamage tells a damaged trace, after which results cover what came before, from other failures.
func isDamage(err error) bool {
	var ferr *trace.FormatError
	var terr *trace.TruncatedError
	return errors.As(err, &ferr) || errors.As(err, &terr)
}

// parseTrace prints every event of a trace, then its summary on stderr.
func parseTrace(in io.Reader, stdout, stderr io.Writer, filter *event.Filter, asJSON bool) error {
	out := bufio.NewWriterSize(stdout, 1<<20)
	var buf []byte
	sum := analyze.NewSummary()
	r, rerr := replay(in, filter, sum, func(ev *event.Event) error {
		if asJSON {
			buf = report.AppendJSON(buf[:0], ev, sum.Names)
		} else {
			buf = report.AppendText(buf[:0], ev, sum.Names)
		}
		_, err := out.Write(buf)
		return err
	})
	if r == nil {
		return rerr
	}
	if err := out.Flush(); err != nil && rerr == nil {
		rerr = fmt.Errorf("writing output: %w", err)
	}
	printSummary(stderr, sum, r)
	if isDamage(rerr) {
		return fmt.Errorf("%w (every event before it was printed)", rerr)
	}
	return rerr
}

func printSummary(w io.Writer, s *analyze.Summary, r *trace.Reader) {
	var total uint64
	for _, n := range s.ByType {
		total += n
	}
	fmt.Fprintf(w, "skbtrace: %d events read, %d printed, %d bytes; lost %d", total, s.Matched, r.Offset(), s.TotalLost())
	if s.Missing > 0 {
		fmt.Fprintf(w, "; %d sequence numbers missing in %d gaps", s.Missing, s.Gaps)
	}
	if s.Late > 0 {
		fmt.Fprintf(w, "; %d events out of order", s.Late)
	}
	if s.UnknownRecs > 0 {
		fmt.Fprintf(w, "; %d records of unknown types skipped (written by a newer skbtrace?)", s.UnknownRecs)
	}
	fmt.Fprintln(w)
	if !s.Ended {
		fmt.Fprintln(w, "skbtrace: warning: the recording did not end normally (no end record): events after the last flush are missing")
	}
}
