package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/units"
)

func labCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "lab",
		Short: "reproduce throughput faults in network namespaces and show the signals that prove them",
		Long: `lab builds two network namespaces joined by a veth pair, runs traffic through
them as a control and with a fault, records both with skbtrace, and shows
the kernel signal that proves the fault. Everything it creates is removed
when it ends, also on errors and Ctrl-C.

Unlike the rest of skbtrace, the lab runs other programs in its namespaces:
ip, tc and ss (iproute2), ethtool, nft, sysctl, taskset, sh and cat, and
iperf3, python3 and ping as workloads. A scenario whose program is missing
is reported skipped, naming it; the others still run.`,
	}
	c.AddCommand(labListCmd(e), labRunCmd(e), labDemoCmd(e), labCompareCmd(e), labTableCmd(e))
	return c
}

func labDemoCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "demo",
		Short:   "tell seed 001's story: a send buffer too small, what skbtrace shows, the fix",
		Example: `  sudo skbtrace lab demo`,
		Args:    noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if err := host.CheckTracingCaps(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return lab.Story(ctx, e.stdout)
		},
	}
}

func labListCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "list the scenarios: the lab's faults (all), their variants and the noise runs",
		Example: `  skbtrace lab list
  skbtrace lab list | awk '$1 == "all" {print $2}'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LIST\tSCENARIO\tEXPECTED FINDING\tFAULT")
			for _, s := range lab.Catalog() {
				expect := or(s.Expect, "none")
				if len(s.Also) > 0 {
					expect += ", then " + strings.Join(s.Also, ", ")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Set, s.Name, expect, s.Fault)
			}
			return tw.Flush()
		},
	}
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func labRunCmd(e *env) *cobra.Command {
	var asJSON, keep, withDoctor, deep, calibrate bool
	var htmlDir, traceDir string
	var peer bool
	var wire []string
	c := &cobra.Command{
		Use:   "run NAME... | all | variants | noise | matrix | nic",
		Short: "run scenarios: control, fault, and the signal that proves it",
		Long: `run runs scenarios by name or by list: all (the lab's fault for each finding),
variants (the same findings by other mechanisms), noise (healthy runs with
background traffic, where the doctor must stay quiet) or matrix (all three).
nic lists the device faults for real drivers: run them with --wire on two
NICs cabled to each other (make nics does, in QEMU guests); a fault the
driver cannot make is reported as skipped, with the reason.`,
		Example: `  skbtrace lab run sndbuf-limited
  skbtrace lab run all --json
  skbtrace lab run variants noise --doctor
  skbtrace lab run --wire eth0,eth1 --doctor nic`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("name the scenarios to run, or all (see skbtrace lab list)")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			var run []*lab.Scenario
			for _, name := range args {
				list, ok := lab.Select(name)
				if !ok {
					return usagef("no scenario or list %q (see skbtrace lab list)", name)
				}
				run = append(run, list...)
			}
			if deep && !withDoctor {
				return usagef("--deep is the doctor's: give --doctor too")
			}
			if peer && !withDoctor {
				return usagef("--with-agent is the doctor's: give --doctor too")
			}
			if htmlDir != "" && !withDoctor {
				return usagef("--html-dir writes the doctor's pages: give --doctor too")
			}
			if len(wire) != 0 && (len(wire) != 2 || wire[0] == "" || wire[1] == "" || wire[0] == wire[1]) {
				return usagef("--wire takes two devices, the sender's and the receiver's: --wire eth0,eth1")
			}
			for _, dir := range []string{htmlDir, traceDir} {
				if dir == "" {
					continue
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return fmt.Errorf("creating %s: %w", dir, err)
				}
			}
			if err := host.CheckTracingCaps(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var reports []*lab.Report
			failed, disagreed, remedyFailed := 0, 0, 0
			for _, s := range run {
				if !asJSON {
					fmt.Fprintf(e.stderr, "skbtrace: lab: running %s ...\n", s.Name)
				}
				rep, err := s.Run(ctx, lab.RunOptions{Keep: keep, Doctor: withDoctor, Deep: deep, Calibrate: calibrate, HTMLDir: htmlDir, TraceDir: traceDir, Peer: peer, Wire: wire})
				if err != nil {
					return err
				}
				reports = append(reports, rep)
				if rep.Skipped != "" {
					if !asJSON {
						fmt.Fprintf(e.stdout, "%s: skipped: %s\n", rep.Name, rep.Skipped)
					}
					continue
				}
				if !rep.Reproduced {
					failed++
				}
				if rep.Doctor != nil && !rep.Doctor.Agrees {
					disagreed++
				}
				if rep.RemedyFailed != "" {
					remedyFailed++
				}
				if !asJSON {
					printLabReport(e, rep)
				}
			}
			for _, d := range []struct{ dir, ext string }{{traceDir, ".trace"}, {htmlDir, ".html"}} {
				if d.dir != "" {
					var files []string
					for _, r := range reports {
						if p := filepath.Join(d.dir, r.Name+d.ext); r.Skipped == "" && regularFile(p) {
							files = append(files, p)
						}
					}
					wroteDir(e.stderr, d.dir, files)
				}
			}
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
				enc.SetIndent("", "  ")
				if err := enc.Encode(reports); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d scenarios did not reproduce their fault", failed, len(reports))
			}
			if disagreed > 0 {
				return fmt.Errorf("the doctor's top finding differs from the expected one in %d of %d scenarios", disagreed, len(reports))
			}
			if remedyFailed > 0 {
				return fmt.Errorf("the remedy could not be applied or measured in %d of %d scenarios", remedyFailed, len(reports))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "reports as one JSON array")
	c.Flags().BoolVar(&withDoctor, "doctor", false, "observe each fault run with skbtrace doctor and print its findings beside the expected one")
	c.Flags().BoolVar(&deep, "deep", false, "the doctor records the per-packet families all the time, as doctor --deep does (default: sampled, as doctor does)")
	c.Flags().BoolVar(&calibrate, "calibrate", false, "run each fault's load once more with the doctor's remedy applied: what the remedy gains, beside the impact the doctor estimated")
	c.Flags().BoolVar(&keep, "keep", false, "leave the namespaces in place to inspect them (remove with ip netns del)")
	c.Flags().StringVar(&htmlDir, "html-dir", "", "with --doctor, write each fault run's doctor page to `DIR`/NAME.html")
	c.Flags().BoolVar(&peer, "with-agent", false, "with --doctor, the doctor watches the sender's namespace alone and joins an agent's evidence from the receiver's (doctor --peer)")
	c.Flags().StringVar(&traceDir, "trace-dir", "", "write each fault run's recording to `DIR`/NAME.trace, for parse, stat and export")
	c.Flags().StringSliceVar(&wire, "wire", nil, "run on two existing devices cabled to each other, `SENDER,RECEIVER` (NICs), moved into the scenario's namespaces and handed back with their settings restored, instead of a veth pair")
	return c
}

// remedySource says whose remedy a calibration run applied.
var remedySource = map[string]string{
	lab.RemedyDoctor:   "the doctor's first remedy, run as printed",
	lab.RemedyWorkload: "the doctor's first remedy, a change to the application, made by the workload's switch",
	lab.RemedyScenario: "the doctor's remedy names no setting a command can change",
}

func printLabReport(e *env, r *lab.Report) {
	verdict := "reproduced"
	if !r.Reproduced {
		verdict = "NOT reproduced"
	}
	fmt.Fprintf(e.stdout, "%s: %s (%.0f s)\n", r.Name, verdict, r.Seconds)
	fmt.Fprintf(e.stdout, "  fault:    %s\n", r.Fault)
	fmt.Fprintf(e.stdout, "  control:  %s  %.0f ops/s\n", strings.TrimSpace(bitsPerSecond(r.ControlBps)), r.ControlOps)
	fmt.Fprintf(e.stdout, "  faulty:   %s  %.0f ops/s\n", strings.TrimSpace(bitsPerSecond(r.FaultBps)), r.FaultOps)
	if r.ReverseBps > 0 {
		fmt.Fprintf(e.stdout, "  reverse:  %s  (the fault's load from the receiver back)\n", strings.TrimSpace(bitsPerSecond(r.ReverseBps)))
	}
	if r.FixedBps > 0 {
		fmt.Fprintf(e.stdout, "  fixed:    %s  %.0f ops/s, %s of the control's: the fault cost %s (%s of the control's), the doctor estimated %s\n",
			strings.TrimSpace(bitsPerSecond(r.FixedBps)), r.FixedOps, units.Percent(r.Restored), units.Percent(r.Gain), units.Percent(r.ControlCost), units.Percent(r.PredictedImpact))
		if r.ControlAfterBps > 0 {
			fmt.Fprintf(e.stdout, "            a second pair: the remedy %s, the control measured again beside it %s\n",
				strings.TrimSpace(bitsPerSecond(r.FixedAgainBps)), strings.TrimSpace(bitsPerSecond(r.ControlAfterBps)))
		}
		if r.Restored < lab.RestoreBar {
			if why := r.RestoreWithinSpread(); why != "" {
				fmt.Fprintf(e.stdout, "            short, and not judged: %s\n", why)
			}
		}
		if r.LatencyGain > 0 {
			fmt.Fprintf(e.stdout, "            its wait: the remedy took %s of it away\n", units.Percent(r.LatencyGain))
		}
		fmt.Fprintf(e.stdout, "  remedy:   %s (%s)\n", r.Remedy, remedySource[r.RemedyFrom])
		if r.RemedyPartial != "" {
			fmt.Fprintf(e.stdout, "            it cannot restore it all: %s\n", r.RemedyPartial)
		}
	}
	if r.RemedyFailed != "" {
		fmt.Fprintf(e.stdout, "  remedy:   %s (%s) FAILED: %s\n", r.Remedy, remedySource[r.RemedyFrom], r.RemedyFailed)
	}
	fmt.Fprintf(e.stdout, "  signal:   %s\n", r.Signal)
	if r.Expect != "" {
		fmt.Fprintf(e.stdout, "  expected finding: %s\n", r.Expect)
	}
	if d := r.Doctor; d != nil {
		verdict := "agrees"
		if !d.Agrees {
			verdict = "DISAGREES"
		}
		fmt.Fprintf(e.stdout, "  doctor:   %s (top finding of warning or above: %s)\n", verdict, or(d.Top, "none"))
		if len(d.Findings) > 0 && d.Top != "" {
			fmt.Fprintf(e.stdout, "            estimated impact %.0f %%, %s\n", d.Findings[0].Impact*100, d.Findings[0].Confidence)
		}
		for _, f := range d.Findings {
			fmt.Fprintf(e.stdout, "            [%s] %s: %s\n", f.Severity, f.ID, f.Title)
		}
		if d.Healthy != "" {
			fmt.Fprintf(e.stdout, "            healthy: %s\n", d.Healthy)
		}
	}
}

func labTableCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "table REPORTS.json",
		Short: "the calibration table (Markdown) of a lab run --doctor --calibrate --json: each remedy as applied, the throughput healthy, with the fault and remedied",
		Example: `  sudo skbtrace lab run matrix --doctor --calibrate --json > lab.json
  skbtrace lab table lab.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("reading lab reports: %w", err)
			}
			defer f.Close()
			var reports []lab.Report
			if err := json.NewDecoder(f).Decode(&reports); err != nil {
				return fmt.Errorf("reading lab reports %s: %w (want the JSON array of lab run --json)", args[0], err)
			}
			return lab.WriteCalibrationTable(e.stdout, reports)
		},
	}
}

func labCompareCmd(e *env) *cobra.Command {
	var hz int
	var duration, dir string
	var asJSON bool
	c := &cobra.Command{
		Use:   "compare [PAIR...]",
		Short: "profile a good and a bad run of one workload and check that compare names the change",
		Example: `  sudo skbtrace lab compare
  sudo skbtrace lab compare nft-chain --dir profiles --frequency 499`,
		Long: `compare runs the lab's profile pairs (all, or those named): each profiles a good
and a bad run of one workload (a chain of nftables rules that never match,
TSO and GSO off, small UDP datagrams), writes both profiles to --dir, and
compares them. It fails when compare does not name what the bad run changed.`,
		RunE: func(c *cobra.Command, args []string) error {
			d, err := parseDuration(duration)
			if err != nil {
				return err
			}
			pairs, err := selectPairs(args)
			if err != nil {
				return err
			}
			if err := host.CheckTracingCaps(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			failed := 0
			var out []map[string]any
			for _, pp := range pairs {
				res, err := lab.RunPair(ctx, pp, hz, d, dir)
				if err != nil {
					return err
				}
				verdict := "named"
				if res.Err != nil {
					failed++
					verdict = "missed: " + res.Err.Error()
				}
				if asJSON {
					out = append(out, map[string]any{"pair": pp.Name, "good": res.Good, "bad": res.Bad,
						"headline": res.Comparison.Headline, "verdict": verdict})
					continue
				}
				fmt.Fprintf(e.stdout, "%s: %s\n  compare %s %s\n  %s\n  %s\n\n", pp.Name, pp.About, res.Good, res.Bad, res.Comparison.Headline, verdict)
			}
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
				enc.SetIndent("", "  ")
				if err := enc.Encode(out); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("compare missed the change in %d of %d pairs", failed, len(pairs))
			}
			return nil
		},
	}
	c.Flags().IntVar(&hz, "frequency", 999, "samples per second per CPU (`HZ`)")
	c.Flags().StringVarP(&duration, "duration", "d", "4s", "how long each run lasts (`DURATION`)")
	c.Flags().StringVar(&dir, "dir", ".", "the `DIR` the profiles are written to")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON document")
	return c
}

func selectPairs(names []string) ([]*lab.ProfilePair, error) {
	var out []*lab.ProfilePair
	for i := range lab.ProfilePairs {
		pp := &lab.ProfilePairs[i]
		if len(names) == 0 || slices.Contains(names, pp.Name) {
			out = append(out, pp)
		}
	}
	if len(out) < len(names) || len(out) == 0 {
		var all []string
		for _, pp := range lab.ProfilePairs {
			all = append(all, pp.Name)
		}
		return nil, usagef("unknown pair in %q: the pairs are %s", names, strings.Join(all, ", "))
	}
	return out, nil
}
