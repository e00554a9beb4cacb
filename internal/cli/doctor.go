package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/collect/profiler"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/units"
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
it runs as typed (in the first --netns namespace when given), and an iperf3
client's summary (or its JSON, given -J) joins the evidence, also behind ip
netns exec, nsenter, sudo, env, taskset, timeout or nice. A command that
fails is reported, and the doctor exits with its status, as time(1) does.
Each --peer agent is asked before the observation starts.`,
		Example: `  skbtrace doctor -- iperf3 -c 10.0.0.2
  skbtrace doctor -d 10 --json -o report.json
  skbtrace doctor -o report.html -- iperf3 -c 10.0.0.2
  skbtrace doctor --netns blue --trace run.trace -- ./client
  skbtrace doctor --netns blue,red -- iperf3 -c 10.0.0.2   # iperf3 runs in blue`,
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
			for _, u := range peers {
				if err := observe.CheckPeerURL(u); err != nil {
					return usageError{fmt.Errorf("--peer: %w", err)}
				}
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
				f, err := createPending(output, e.stdout, e.stderr)
				if err != nil {
					return err
				}
				pending = append(pending, f)
				out = f
			}
			opts := observe.Options{Netns: netns, Deep: deep, Timeline: format == "html"}
			if traceFile != "" {
				f, err := createPending(traceFile, e.stdout, e.stderr)
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
			status, err := runDoctor(opts, d, args, format, profOut, peer, out, e.stdout, e.stderr)
			if err != nil {
				return err
			}
			for _, p := range pending {
				if err := p.commit(); err != nil {
					return err
				}
			}
			// The report is written: the command's failure is the doctor's
			// exit status, as time(1) passes it on.
			return status
		},
	}
	c.Flags().StringVarP(&duration, "duration", "d", "", "observe this long, `DURATION` such as 10, 10s, 2m (default: 10s without a command, else until it exits)")
	c.Flags().StringSliceVar(&netns, "netns", nil, "observe the network namespaces `NAME`, comma-separated; COMMAND runs in the first, as ip netns exec would run it (default: this one and every named one)")
	c.Flags().BoolVar(&asJSON, "json", false, "write the report as JSON (as --format json)")
	c.Flags().StringVar(&format, "format", "", "report `FORMAT`: text, json or html, one self-contained page with charts (default: from the -o file's extension, .txt, .json or .html, else text)")
	c.Flags().StringVarP(&output, "output", "o", "", "write the report to `FILE` (default: standard output)")
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

// checkPeers asks every peer before the observation: one that cannot be
// reached or refuses ends the doctor at once.
func checkPeers(ctx context.Context, p peerOptions) error {
	for _, u := range p.urls {
		if err := observe.CheckPeer(ctx, nil, u, p.token); err != nil {
			return fmt.Errorf("%w (checked before observing)", err)
		}
	}
	return nil
}

// commandNetns opens the namespace COMMAND runs in: the first --netns, or
// none (this process's own).
func commandNetns(netns []string, argv []string) (*host.Netns, error) {
	if len(argv) == 0 || len(netns) == 0 || netns[0] == host.SelfNetnsName {
		return nil, nil
	}
	return host.OpenNetns(netns[0])
}

// runDoctor observes until the duration, the command or a signal ends it;
// status is the command's failure (a commandStatus), once the report is written.
func runDoctor(opts observe.Options, d time.Duration, argv []string, format string, profOut string, peer peerOptions, out, stdout, stderr io.Writer) (status, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := checkPeers(ctx, peer); err != nil {
		return nil, err
	}
	ns, err := commandNetns(opts.Netns, argv)
	if err != nil {
		return nil, err
	}
	if ns != nil {
		defer ns.Close()
	}
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
		cmd, err = observe.RunCommand(ctx, argv, stderr, ns)
		return err
	}
	opts.Ready = func(kernelEvents bool) {
		what := "counters and tcp_info only"
		if kernelEvents {
			what = "kernel events, counters and tcp_info"
		}
		fmt.Fprintf(stderr, "skbtrace: doctor observing%s (%s); stop with Ctrl-C\n", describeWindow(d, argv, ns), what)
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
		return nil, err
	}
	if obs.WorkloadErr != nil {
		return nil, obs.WorkloadErr
	}
	if cmd.Failed() {
		status = commandStatus{name: cmd.Name(), code: cmd.ExitCode}
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
			if err := writeFile(profOut, stdout, stderr, prof.WritePprof); err != nil {
				return nil, err
			}
		}
	}
	rep := doctor.Diagnose(obs.Evidence)
	switch format {
	case "json":
		err = rep.WriteJSON(out)
	case "html":
		err = rep.WriteHTML(out, obs.Timeline, "skbtrace "+version.Version)
	default:
		err = rep.WriteText(out)
	}
	if err != nil {
		return nil, err
	}
	return status, nil
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
	// A file's extension says its format; one the doctor cannot write is
	// refused rather than filled with text (-o report.pdf).
	switch ext := strings.ToLower(filepath.Ext(output)); ext {
	case ".html", ".htm":
		return "html", nil
	case ".json":
		return "json", nil
	case "", ".txt", ".text":
		return "text", nil
	default:
		return "", usagef("-o %s: the doctor writes text, json or html (.txt, .json, .html), not %s; give --format to write it as one of them", output, ext)
	}
}

func describeWindow(d time.Duration, argv []string, ns *host.Netns) string {
	var name string
	if len(argv) > 0 {
		name = filepath.Base(observe.RealCommand(argv)[0])
		if ns != nil {
			name += " (in netns " + ns.Name + ")"
		}
	}
	switch {
	case name != "" && d > 0:
		return fmt.Sprintf(" %s for at most %s", name, units.Duration(d))
	case name != "":
		return " while " + name + " runs"
	default:
		return fmt.Sprintf(" for %s", units.Duration(d))
	}
}
