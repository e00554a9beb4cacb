package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report/parquet"
	"github.com/skbtrace/skbtrace/internal/report/perfetto"
	"github.com/skbtrace/skbtrace/internal/units"
)

// exporter takes a trace's events as they are replayed; Close writes the
// output, Discard leaves what was there before untouched.
type exporter interface {
	Add(*event.Event) error
	Close() error
	Discard()
}

func exportCmd(e *env) *cobra.Command {
	var perfettoOut, parquetDir string
	var inputs []string
	var filters filterFlags
	var partial partialFlag
	c := &cobra.Command{
		Use:   "export [TRACE...] [--perfetto FILE] [--parquet DIR] [filters]",
		Short: "write a trace for the systems people already run: Perfetto timelines, Parquet tables",
		Long: `export reads a trace once and writes it as:

  --perfetto FILE  Chrome/Perfetto trace events: a process per namespace, a
                   thread per connection with its send-limit reasons as
                   slices, cwnd, srtt and throughput as counters, drops,
                   retransmits and state changes as instants, softirq time
                   per CPU; open it in ui.perfetto.dev (docs/export.md)
  --parquet DIR    Parquet tables: one per event family, flows (as stat
                   counts them), per-second series per flow and per device,
                   with the host and the recording on every row, for DuckDB,
                   Spark or ClickHouse across many hosts

The outputs are moved into place only when complete: a run that fails,
a damaged trace included, leaves an earlier FILE and DIR as they were.
--partial exports what can be read of a damaged trace (a crashed recording)
and warns of the damage.`,
		Example: `  skbtrace export run.trace --perfetto run.json
  skbtrace export run.trace --parquet exports/$(hostname)
  duckdb -c "select host, local, peer, bytes from 'exports/*/flows.parquet'"`,
		RunE: func(c *cobra.Command, args []string) error {
			if perfettoOut == "" && parquetDir == "" {
				return usagef("give --perfetto FILE, --parquet DIR or both")
			}
			if parquetDir == "-" {
				return usagef("--parquet takes a directory: its tables are several files")
			}
			inputs, err := inputArgs(c, args, inputs)
			if err != nil {
				return err
			}
			tf, filter, err := traceInputs(inputs, e.stdin, &filters)
			if err != nil {
				return err
			}
			defer tf.close()
			sum := analyze.NewSummary()
			var outs []exporter
			if perfettoOut != "" {
				x, err := newPerfettoFile(perfettoOut, e.stdout, e.stderr, sum)
				if err != nil {
					return err
				}
				outs = append(outs, x)
			}
			if parquetDir != "" {
				x, err := parquet.New(parquetDir, sum)
				if err != nil {
					for _, o := range outs {
						o.Discard()
					}
					return err
				}
				outs = append(outs, parquetOut{x, parquetDir, e.stderr})
			}
			_, rerr := replayFiles(tf, &filter, sum, func(ev *event.Event) error {
				for _, x := range outs {
					if err := x.Add(ev); err != nil {
						return err
					}
				}
				return nil
			})
			// A damaged trace is exported only as far as it can be read and
			// only when --partial accepts it; when nothing could be read, or
			// without --partial, earlier outputs stay as they were.
			if rerr != nil && (!isDamage(rerr) || sum.Matched == 0 || !partial.writes(true)) {
				for _, x := range outs {
					x.Discard()
				}
				switch {
				case !isDamage(rerr):
					return rerr
				case sum.Matched == 0:
					return fmt.Errorf("%w (no event could be read; nothing exported)", rerr)
				}
				return partial.settle(e.stderr, rerr, fmt.Sprintf("%s %s could be read", units.Count(sum.Matched, "event", "events"), readPart(rerr)), fileOutputs(perfettoOut, parquetDir))
			}
			var errs []error
			for _, x := range outs {
				errs = append(errs, x.Close())
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if rerr != nil {
				return partial.settle(e.stderr, rerr, fmt.Sprintf("exported %s %s", units.Count(sum.Matched, "event", "events"), readPart(rerr)), nil)
			}
			return nil
		},
	}
	c.Flags().StringSliceVarP(&inputs, "input", "i", []string{"skbtrace.trace"}, inputHelp)
	c.Flags().StringVar(&perfettoOut, "perfetto", "", "write Chrome/Perfetto trace events to `FILE` (- for standard output)")
	c.Flags().StringVar(&parquetDir, "parquet", "", "write Parquet tables into `DIR`")
	filters.bind(c.Flags())
	partial.bind(c.Flags())
	return c
}

// parquetOut says what the Parquet export wrote once its tables are in place.
type parquetOut struct {
	*parquet.Exporter
	dir    string
	stderr io.Writer
}

func (p parquetOut) Close() error {
	if err := p.Exporter.Close(); err != nil {
		return err
	}
	wroteDir(p.stderr, p.dir, p.Written())
	return nil
}

// perfettoFile writes Perfetto's trace events into a pendingFile.
type perfettoFile struct {
	*perfetto.Exporter
	f   *pendingFile
	buf *bufio.Writer
}

func newPerfettoFile(path string, stdout, stderr io.Writer, sum *analyze.Summary) (*perfettoFile, error) {
	f, err := createPending(path, stdout, stderr)
	if err != nil {
		return nil, err
	}
	buf := bufio.NewWriterSize(f, 1<<20)
	return &perfettoFile{Exporter: perfetto.New(buf, sum), f: f, buf: buf}, nil
}

func (p *perfettoFile) Close() error {
	if err := errors.Join(p.Exporter.Close(), p.buf.Flush()); err != nil {
		p.f.discard()
		return fmt.Errorf("writing %s: %w", p.f.path, err)
	}
	return p.f.commit()
}

func (p *perfettoFile) Discard() { p.f.discard() }
