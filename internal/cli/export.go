package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report/parquet"
	"github.com/skbtrace/skbtrace/internal/report/perfetto"
)

// exporter takes a trace's events as they are replayed.
type exporter interface {
	Add(*event.Event) error
	Close() error
}

func exportCmd(e *env) *cobra.Command {
	var perfettoOut, parquetDir string
	var filters filterFlags
	c := &cobra.Command{
		Use:   "export TRACE|- [--perfetto FILE] [--parquet DIR] [filters]",
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

A damaged trace is exported up to the damage, then export fails.`,
		Example: `  skbtrace export run.trace --perfetto run.json
  skbtrace export run.trace --parquet exports/$(hostname)
  duckdb -c "select host, local, peer, bytes from 'exports/*/flows.parquet'"`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if perfettoOut == "" && parquetDir == "" {
				return usagef("give --perfetto FILE, --parquet DIR or both")
			}
			in, closeIn, filter, err := traceInput(args[0], e.stdin, &filters)
			if err != nil {
				return err
			}
			defer closeIn()
			sum := analyze.NewSummary()
			var outs []exporter
			var perfettoFile *os.File
			var perfettoBuf *bufio.Writer
			if perfettoOut != "" {
				if perfettoFile, err = os.Create(perfettoOut); err != nil {
					return fmt.Errorf("creating %s: %w", perfettoOut, err)
				}
				defer perfettoFile.Close()
				perfettoBuf = bufio.NewWriterSize(perfettoFile, 1<<20)
				outs = append(outs, perfetto.New(perfettoBuf, sum))
			}
			if parquetDir != "" {
				x, err := parquet.New(parquetDir, sum)
				if err != nil {
					return err
				}
				outs = append(outs, x)
			}
			_, rerr := replay(in, &filter, sum, func(ev *event.Event) error {
				for _, x := range outs {
					if err := x.Add(ev); err != nil {
						return err
					}
				}
				return nil
			})
			if rerr != nil && !isDamage(rerr) {
				return rerr
			}
			// What was read is written even from a damaged trace.
			var errs []error
			for _, x := range outs {
				errs = append(errs, x.Close())
			}
			if perfettoBuf != nil {
				errs = append(errs, perfettoBuf.Flush(), perfettoFile.Close())
			}
			if err := errors.Join(errs...); err != nil {
				return err
			}
			if rerr != nil {
				if sum.Matched == 0 {
					return fmt.Errorf("%w (no event could be read; nothing exported)", rerr)
				}
				return fmt.Errorf("%w (exported the %d events before it)", rerr, sum.Matched)
			}
			return nil
		},
	}
	c.Flags().StringVar(&perfettoOut, "perfetto", "", "write Chrome/Perfetto trace events to `FILE`")
	c.Flags().StringVar(&parquetDir, "parquet", "", "write Parquet tables into `DIR`")
	filters.bind(c.Flags())
	return c
}
