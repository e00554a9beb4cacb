package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
)

// statMemoryLimit is stat's soft memory limit: stat of a 700 MB trace
// stays within 512 MB (issue 45). Past it, on bigger traces, the collector
// takes at most half the CPU and the heap grows as it must.
const statMemoryLimit = 448 << 20

func statCmd(e *env) *cobra.Command {
	var inputs []string
	var asJSON bool
	var htmlOut string
	var filters filterFlags
	var partial partialFlag
	c := &cobra.Command{
		Use:   "stat [TRACE...] [flags]",
		Short: "summarize a trace: per connection, device and CPU, drops and loss",
		Long: `stat summarizes a recording the way btt summarizes blktrace: per connection
(duration, bytes, throughput, share of time in each send-limit reason,
retransmits, RTT, cwnd range, resets), per device (packets/s and segments per
skb at transmit and receive: TSO/GSO and GRO at work), per CPU (network
softirq time), drops by reason and location, and lost events.

A damaged trace is summarized up to the damage (or over its intact blocks),
then stat fails and writes no --html page unless --partial accepts it.`,
		Example: `  skbtrace stat run.trace
  skbtrace stat -i run.trace --filter-port 5201 --json
  skbtrace stat run.trace --html run.html`,
		RunE: func(c *cobra.Command, args []string) error {
			inputs, err := inputArgs(c, args, inputs)
			if err != nil {
				return err
			}
			// --json's document goes to standard output: so would the page.
			outputs := map[string]string{"--html": htmlOut}
			if asJSON {
				outputs["--json"] = "-"
			}
			if err := oneOnStdout(outputs); err != nil {
				return err
			}
			// The summary's memory follows the trace's connections, every one
			// kept to the end, and the collector lets the heap grow to twice
			// what is live: a soft limit collects sooner (on an 810 MB trace
			// of 640,000 connections, 453 MB peak instead of 636 MB, for 25 %
			// more CPU). GOMEMLIMIT, when set, is the user's.
			if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
				defer debug.SetMemoryLimit(debug.SetMemoryLimit(statMemoryLimit))
			}
			tf, filter, err := traceInputs(inputs, e.stdin, &filters)
			if err != nil {
				return err
			}
			defer tf.close()
			sum := analyze.NewSummary()
			st := analyze.NewStat()
			sum.OnWindow = st.Gap
			var series *timeline.Builder
			if htmlOut != "" {
				series = timeline.NewBuilder(0)
			}
			read, rerr := replayFiles(tf, &filter, sum, func(ev *event.Event) error {
				st.Add(ev)
				if series != nil {
					series.Add(ev)
				}
				return nil
			})
			// A file that is not a trace at all leaves nothing to summarize.
			if read < 0 || rerr != nil && !isDamage(rerr) {
				return rerr
			}
			view := report.NewStatViewRows(st, sum)
			if htmlOut == "-" || htmlOut != "" && partial.writes(rerr != nil) {
				var text strings.Builder
				if err := report.WriteStatText(&text, view); err != nil {
					return err
				}
				var damage string
				if rerr != nil {
					damage = rerr.Error()
				}
				if err := writeFile(htmlOut, e.stdout, e.stderr, func(w io.Writer) error {
					return report.WriteStatHTML(w, sum, st, series.Build(sum.Names.NetnsName), text.String(), damage)
				}); err != nil {
					return err
				}
			}
			switch {
			case htmlOut == "-": // the page is the output
			case asJSON:
				err = report.WriteStatJSON(e.stdout, view)
			default:
				err = report.WriteStatText(e.stdout, view)
			}
			if err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			if rerr != nil {
				return partial.settle(e.stderr, rerr, "the summary covers every event "+readPart(rerr), fileOutputs(htmlOut))
			}
			return nil
		},
	}
	c.Flags().StringSliceVarP(&inputs, "input", "i", []string{"skbtrace.trace"}, inputHelp)
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON document")
	c.Flags().StringVar(&htmlOut, "html", "", "also write the trace's story as one self-contained page to `FILE` (- writes it to standard output instead of the text): per flow the send-limit reason, throughput, cwnd, in flight, RTT, retransmits and drops over time; per CPU and per device; the settings")
	filters.bind(c.Flags())
	partial.bind(c.Flags())
	return c
}
