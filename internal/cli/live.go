package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func liveCmd(e *env) *cobra.Command {
	var flags recordFlags
	var asJSON bool
	c := &cobra.Command{
		Use:   "live [flags] [-- COMMAND ARGS...]",
		Short: "record and print events in one process",
		Long: `live is record and parse joined by a pipe, like 'blktrace -o - | blkparse -i -':
the same trace is produced in memory and printed as it arrives. A command
after -- is ended with the recording, as record ends it.`,
		Example: `  skbtrace live -e tcp_conn
  skbtrace live --filter-port 5201 -- iperf3 -c 127.0.0.1 -t 5`,
		RunE: func(c *cobra.Command, args []string) error {
			job, err := flags.job(c, args, e.stderr)
			if err != nil {
				return err
			}
			filter, err := flags.filters.eventFilter()
			if err != nil {
				return err
			}
			// A pipe of the kernel's, not io.Pipe: its reads take deadlines,
			// which let parse print while the recorder is quiet.
			pr, pw, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("creating the pipe from the recorder: %w", err)
			}
			recErr := make(chan error, 1)
			go func() {
				err := job.run(pw, e.stderr)
				pw.Close()
				recErr <- err
			}()
			perr := parseLive(pr, e.stdout, e.stderr, &filter, asJSON)
			pr.Close()
			if err := <-recErr; err != nil {
				return err
			}
			return perr
		},
	}
	flags.bind(c.Flags())
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	c.Flags().SetInterspersed(false)
	return c
}
