package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/collect"
)

func eventsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "events",
		Short: "list the event families and whether each can run on this kernel",
		Long: `events lists every event family, the tracepoints it attaches to, and
whether it can run on this kernel; for those that cannot, why.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FAMILY\tSTATUS\tHOOKS\tDESCRIPTION")
			for _, f := range collect.Families {
				status := "ok"
				if err := f.CanRun(); err != nil {
					status = "cannot run: " + err.Error()
				}
				var hooks []string
				for _, h := range f.Hooks {
					hooks = append(hooks, h.String())
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, status, strings.Join(hooks, ","), f.Description)
			}
			return tw.Flush()
		},
	}
}
