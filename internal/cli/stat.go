package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/report"
)

func statCmd(e *env) *cobra.Command {
	var input string
	var asJSON bool
	var filters filterFlags
	c := &cobra.Command{
		Use:   "stat [flags]",
		Short: "summarize a trace: per connection, device and CPU, drops and loss",
		Long: `stat summarizes a recording the way btt summarizes blktrace: per connection
(duration, bytes, throughput, share of time in each send-limit reason,
retransmits, RTT, cwnd range, resets), per device (packets/s and segments per
skb at transmit and receive: TSO/GSO and GRO at work), per CPU (network
softirq time), drops by reason and location, and lost events.`,
		Example: `  skbtrace stat -i run.trace
  skbtrace stat -i run.trace --filter-port 5201 --json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			in, closeIn, filter, err := traceInput(input, e.stdin, &filters)
			if err != nil {
				return err
			}
			defer closeIn()
			sum := analyze.NewSummary()
			st := analyze.NewStat()
			_, rerr := replay(in, &filter, sum, func(ev *event.Event) error { st.Add(ev); return nil })
			if rerr != nil && !isDamage(rerr) {
				return rerr
			}
			view := report.NewStatView(st, sum)
			if asJSON {
				err = report.WriteStatJSON(e.stdout, view)
			} else {
				err = report.WriteStatText(e.stdout, view)
			}
			if err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			if rerr != nil {
				return fmt.Errorf("%w (the summary covers everything before it)", rerr)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&input, "input", "i", "skbtrace.trace", "trace `FILE`, or - for standard input")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON document")
	filters.bind(c.Flags())
	return c
}
