package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/report/flame"
)

func compareCmd(e *env) *cobra.Command {
	var asJSON bool
	var flameOut string
	c := &cobra.Command{
		Use:   "compare A B",
		Short: "say what changed between two runs: profiles, traces or doctor reports",
		Long: `compare takes two runs of one workload, A the baseline and B the other: two
profiles (skbtrace profile -o X.pb.gz), two traces (skbtrace record) or two
doctor reports (skbtrace doctor --json), from two kernels, two settings or two
hosts. It prints what differs, ranked by its share of the change: throughput,
packet rate, CPU per packet (or per byte, for bulk streams) overall and per
network-stack phase, send-limit shares, drops and retransmissions, and the
settings that differ (kernel, sysctls, offloads, MTU, qdiscs, CPU
mitigations), and names the regression in one line. --flame writes a
differential flame graph of two profiles, normalized per packet.`,
		Example: `  skbtrace compare good.pb.gz bad.pb.gz --flame diff.html
  skbtrace doctor --json -- iperf3 -c 10.0.0.2 | skbtrace compare monday.json -
  skbtrace compare monday.json tuesday.json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("compare takes two files, A and B, got %d", len(args))
			}
			if args[0] == "-" && args[1] == "-" {
				return usagef("standard input (-) is one of the runs, not both")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			a, err := loadRun(args[0], e.stdin)
			if err != nil {
				return err
			}
			b, err := loadRun(args[1], e.stdin)
			if err != nil {
				return err
			}
			res, err := compare.Compare(a, b)
			if err != nil {
				return err
			}
			if flameOut != "" {
				page, err := report.CompareFlame(res)
				if err != nil {
					return err
				}
				if err := writeFile(flameOut, e.stdout, e.stderr, func(w io.Writer) error { return flame.WriteHTML(w, page) }); err != nil {
					return err
				}
				if flameOut == "-" {
					return nil // the page is the output
				}
			}
			if asJSON {
				err = report.WriteCompareJSON(e.stdout, res)
			} else {
				err = report.WriteCompareText(e.stdout, res)
			}
			if err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON document")
	c.Flags().StringVar(&flameOut, "flame", "", "write a differential flame graph page of two profiles to `FILE` (- writes it to standard output instead of the text)")
	return c
}

func loadRun(path string, stdin io.Reader) (*compare.Run, error) {
	in, closeIn, err := openInput("run", path, stdin)
	if err != nil {
		return nil, err
	}
	defer closeIn()
	name := path
	if path == "-" {
		name = "standard input"
	}
	return compare.Load(name, in, doctor.ReadReport)
}
