package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/collect/profiler"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/report/flame"
	"github.com/skbtrace/skbtrace/internal/version"
)

func profileCmd(e *env) *cobra.Command {
	var duration, cpuList, output, format string
	var hz int
	var softwareClock bool
	c := &cobra.Command{
		Use:   "profile [flags] [-- CMD ARGS...]",
		Short: "sample where the CPU goes, per network-stack phase and per packet",
		Long: `profile samples kernel and user stacks on every CPU (or --cpu) with a BPF
program on the CPU's cycle counter, or on the kernel's cpu-clock where there
is none, and counts the packets and bytes the devices move in the same window.
Each kernel sample is attributed to a network-stack phase by its frames
(syscall entry/exit with the Spectre/Meltdown stubs apart, socket, TCP, UDP,
IP, netfilter, qdisc, device transmit, NAPI/GRO, copy, memory, scheduler),
and the phase table gives each phase's share of the busy CPU time and its
nanoseconds per packet and per byte.

It profiles for -d, or while CMD runs. -o writes the profile: pprof (for go
tool pprof, Pyroscope, speedscope, and skbtrace compare), folded stacks (for
flamegraph.pl) or an interactive flame graph page; the format follows the
file name (.pb.gz, .folded, .html) unless --format says.`,
		Example: `  skbtrace profile -d 10 -o run.pb.gz
  skbtrace profile --frequency 999 --cpu 0-1 -o flame.html -- iperf3 -c 10.0.0.2 -u -l 64 -b 0 -t 10
  skbtrace compare before.pb.gz after.pb.gz`,
		RunE: func(c *cobra.Command, args []string) error {
			d, err := parseDuration(duration)
			if err != nil {
				return err
			}
			if d == 0 && len(args) == 0 {
				return usagef("give a duration (-d 10) or a command to profile (-- CMD)")
			}
			if hz < 1 || hz > 10000 {
				return usagef("--frequency %d: the sampling rate must be between 1 and 10000 Hz", hz)
			}
			if format, err = profileFormat(format, output); err != nil {
				return err
			}
			var cpus []int
			if cpuList != "" {
				if cpus, err = host.ParseCPUList(cpuList); err != nil {
					return usagef("--cpu: %v", err)
				}
			}
			if err := host.CheckTracingCaps(); err != nil {
				return fmt.Errorf("profiling: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			p, err := profiler.Collect(ctx, profiler.Options{Duration: d, Hz: hz, CPUs: cpus, Command: args,
				Stdout: e.stderr, Stderr: e.stderr, SoftwareClock: softwareClock, Version: version.Version,
				Ready: func(clock string, cpus []int) {
					fmt.Fprintf(e.stderr, "skbtrace: profiling %d CPUs at %d Hz on %s; Ctrl-C ends\n", len(cpus), hz, clock)
				}})
			if err != nil {
				return err
			}
			if output != "-" {
				if err := report.WriteProfileText(e.stdout, p); err != nil {
					return fmt.Errorf("writing output: %w", err)
				}
			}
			if output == "" {
				return nil
			}
			return writeFile(output, e.stdout, e.stderr, func(w io.Writer) error {
				switch format {
				case "pprof":
					return p.WritePprof(w)
				case "folded":
					return p.WriteFolded(w)
				}
				return flame.WriteHTML(w, report.ProfileFlame(p))
			})
		},
	}
	f := c.Flags()
	f.StringVarP(&duration, "duration", "d", "", "how long to profile, `DURATION` such as 5, 5s, 2m (default: while CMD runs)")
	f.IntVar(&hz, "frequency", 99, "samples per second per CPU (`HZ`)")
	f.StringVar(&cpuList, "cpu", "", "only these CPUs (`LIST`: 0-3,6)")
	f.StringVarP(&output, "output", "o", "", "write the profile to `FILE` (- writes it to standard output instead of the text)")
	f.StringVar(&format, "format", "", "`FORMAT`: pprof, folded or html (default: from the -o file name, else pprof)")
	f.BoolVar(&softwareClock, "cpu-clock", false, "sample on the kernel's cpu-clock even where the CPU has cycle counters")
	return c
}

// profileFormat picks the output format from --format or the file name.
func profileFormat(format, output string) (string, error) {
	switch format {
	case "pprof", "folded", "html":
		return format, nil
	case "":
	default:
		return "", usagef("--format %q: use pprof, folded or html", format)
	}
	switch {
	case strings.HasSuffix(output, ".html"), strings.HasSuffix(output, ".htm"):
		return "html", nil
	case strings.HasSuffix(output, ".folded"), strings.HasSuffix(output, ".txt"):
		return "folded", nil
	}
	return "pprof", nil
}
