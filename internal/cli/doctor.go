package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/collect/profiler"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/version"
)

func doctorCmd(e *env) *cobra.Command {
	var (
		duration  string
		netns     []string
		asJSON    bool
		format    string
		output    string
		traceFile string
		deep      bool
		profOut   string
		peers     []string
		peerToken string
	)
	c := &cobra.Command{
		Use:   "doctor [flags] [-- COMMAND ARGS...]",
		Short: "observe a workload and rank what limits its throughput, with evidence and fixes",
		Long: `doctor observes the host for the duration, or while COMMAND runs, then prints
findings ranked by the throughput at stake: kernel events (as root), tcp_info
of every TCP socket, CPU time per CPU and per process, protocol and device
counters, offload and buffer settings. Each finding has its evidence, an explanation and the commands that
fix it (docs/findings.md). The command's own output goes to standard error;
it runs as typed, and an iperf3 client's summary (or its JSON, given -J)
joins the evidence.`,
		Example: `  skbtrace doctor -- iperf3 -c 10.0.0.2
  skbtrace doctor -d 10 --json -o report.json
  skbtrace doctor -o report.html -- iperf3 -c 10.0.0.2
  skbtrace doctor --netns blue --trace run.trace -- ./client`,
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 0 && len(args) > 0 {
				return usagef("unexpected argument %q (put the command to run after --)", args[0])
			}
			d, err := parseDuration(duration)
			if err != nil {
				return err
			}
			if d == 0 && len(args) == 0 {
				d = 10 * time.Second
			}
			if asJSON {
				format = "json"
			}
			if format, err = doctorFormat(format, output); err != nil {
				return err
			}
			if err := oneOnStdout(map[string]string{"the report (-o)": orStdout(output), "--trace": traceFile, "--profile": profOut}); err != nil {
				return err
			}
			// The report and the recording replace earlier files only
			// when the doctor succeeds.
			var pending []*pendingFile
			defer func() {
				for _, p := range pending {
					p.discard()
				}
			}()
			out := e.stdout
			if output != "" && output != "-" {
				f, err := createPending(output, e.stdout)
				if err != nil {
					return err
				}
				pending = append(pending, f)
				out = f
			}
			opts := observe.Options{Netns: netns, Deep: deep, Timeline: format == "html"}
			if traceFile != "" {
				f, err := createPending(traceFile, e.stdout)
				if err != nil {
					return err
				}
				pending = append(pending, f)
				opts.Trace = f
			}
			var peer peerOptions
			if len(peers) > 0 {
				if peer, err = newPeerOptions(peers, peerToken); err != nil {
					return err
				}
			}
			if err := runDoctor(opts, d, args, format, profOut, peer, out, e.stdout, e.stderr); err != nil {
				return err
			}
			for _, p := range pending {
				if err := p.commit(); err != nil {
					return err
				}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&duration, "duration", "d", "", "observe this long (`DURATION`: 10, 10s, 2m; default 10s without a command, else until it exits)")
	c.Flags().StringSliceVar(&netns, "netns", nil, "observe these network namespaces (`NAME`; default: this one and every named one)")
	c.Flags().BoolVar(&asJSON, "json", false, "write the report as JSON (as --format json)")
	c.Flags().StringVar(&format, "format", "", "report `FORMAT`: text, json or html (one self-contained page with charts; default: from the -o file's extension, else text)")
	c.Flags().StringVarP(&output, "output", "o", "", "write the report to `FILE` (default standard output)")
	c.Flags().BoolVar(&deep, "deep", false, "record the per-packet families (segments per skb, softirq time, socket call sizes, where bytes wait) all the time rather than 5% of each second: exact counts, more cost")
	c.Flags().StringVar(&traceFile, "trace", "", "keep the kernel-event recording in `FILE` for parse and stat")
	c.Flags().StringVar(&profOut, "profile", "", "profile the CPUs at 99 Hz too: the phase table joins the report (for compare) and the profile goes to `FILE` (pprof)")
	c.Flags().StringSliceVar(&peers, "peer", nil, "join the evidence of the skbtrace agent at each `URL` (the other ends of the flows): receiver-side causes judged from the receiver's data")
	c.Flags().StringVar(&peerToken, "peer-token-file", "", "the peers' bearer token `FILE` (default: $SKBTRACE_PEER_TOKEN)")
	c.Flags().SetInterspersed(false)
	return c
}

// peerOptions are the agents whose evidence joins the report.
type peerOptions struct {
	urls  []string
	token string
}

func newPeerOptions(urls []string, tokenFile string) (peerOptions, error) {
	p := peerOptions{urls: urls, token: os.Getenv("SKBTRACE_PEER_TOKEN")}
	if tokenFile != "" {
		token, err := readToken(tokenFile)
		if err != nil {
			return p, err
		}
		p.token = token
	} else if err := checkToken(p.token, "$SKBTRACE_PEER_TOKEN"); err != nil {
		return p, err
	}
	return p, nil
}

// joinPeers asks each agent for the observation's window; a peer that
// cannot be reached or refuses becomes a note.
func joinPeers(ctx context.Context, ev *doctor.Evidence, p peerOptions, since time.Time) {
	for i, u := range p.urls {
		host, remote, err := observe.FetchPeer(ctx, nil, u, p.token, since)
		if err != nil {
			ev.Notes = append(ev.Notes, "peer not joined: "+err.Error())
			continue
		}
		label := fmt.Sprintf("peer%d", i+1)
		if host != "" {
			label = host
		}
		if j := ev.JoinPeer(u, label, host, remote); j.Flows == 0 {
			ev.Notes = append(ev.Notes, fmt.Sprintf("peer %s (%s) saw none of this host's flows: check that it watches their namespace", u, host))
		}
	}
}

// runDoctor observes until the duration, the command or a signal ends it.
func runDoctor(opts observe.Options, d time.Duration, argv []string, format string, profOut string, peer peerOptions, out, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var cmd *doctor.Command
	opts.Workload = func(ctx context.Context) error {
		if d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		if len(argv) == 0 {
			<-ctx.Done()
			return nil
		}
		var err error
		cmd, err = observe.RunCommand(ctx, argv, stderr)
		return err
	}
	opts.Ready = func(kernelEvents bool) {
		what := "counters and tcp_info only"
		if kernelEvents {
			what = "kernel events, counters and tcp_info"
		}
		fmt.Fprintf(stderr, "skbtrace: doctor observing%s (%s); stop with Ctrl-C\n", describeWindow(d, argv), what)
	}
	var prof *profile.Profile
	var profErr error
	if profOut != "" {
		workload := opts.Workload
		opts.Workload = func(ctx context.Context) error {
			ran := false
			var workErr error
			prof, profErr = profiler.Collect(ctx, profiler.Options{Hz: 99, Version: version.Version,
				Workload: func(ctx context.Context) error {
					ran = true
					workErr = workload(ctx)
					return workErr
				}})
			if !ran {
				// Profiling could not start (no privileges): observe without it.
				return workload(ctx)
			}
			return workErr
		}
	}
	obs, err := observe.Observe(ctx, opts)
	if err != nil {
		return err
	}
	if obs.WorkloadErr != nil {
		return obs.WorkloadErr
	}
	obs.Evidence.Command = cmd
	if len(peer.urls) > 0 {
		joinPeers(ctx, obs.Evidence, peer, time.Now().Add(-time.Duration(obs.Evidence.Seconds*float64(time.Second))))
	}
	if profOut != "" {
		if prof == nil {
			obs.Evidence.Notes = append(obs.Evidence.Notes, "not profiled: "+profErr.Error())
		} else {
			obs.Evidence.Profile = prof.Summary()
			if err := writeFile(profOut, stdout, prof.WritePprof); err != nil {
				return err
			}
		}
	}
	rep := doctor.Diagnose(obs.Evidence)
	switch format {
	case "json":
		return rep.WriteJSON(out)
	case "html":
		return rep.WriteHTML(out, obs.Timeline, "skbtrace "+version.Version)
	}
	return rep.WriteText(out)
}

// doctorFormat picks the report's format from --format or the file name.
func doctorFormat(format, output string) (string, error) {
	switch format {
	case "text", "json", "html":
		return format, nil
	case "":
	default:
		return "", usagef("--format %q: use text, json or html", format)
	}
	switch {
	case strings.HasSuffix(output, ".html"), strings.HasSuffix(output, ".htm"):
		return "html", nil
	case strings.HasSuffix(output, ".json"):
		return "json", nil
	}
	return "text", nil
}

func describeWindow(d time.Duration, argv []string) string {
	switch {
	case len(argv) > 0 && d > 0:
		return fmt.Sprintf(" %s for at most %v", argv[0], d)
	case len(argv) > 0:
		return " while " + argv[0] + " runs"
	default:
		return fmt.Sprintf(" for %v", d)
	}
}
