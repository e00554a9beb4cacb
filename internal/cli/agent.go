package cli

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/agent"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/units"
)

// agentHeapAllowance is the heap the agent may use besides its trace: the
// samples' socket readings (within 48 MiB), the totals and an evidence
// request's replay (about 100 MB at 370 connections/s, measured with
// BenchmarkAgentMemoryUnderChurn), with room for the collector: with
// 16,000 held sockets 170 MB were live, and a limit of 256 MB in all had
// the collector take a third of the agent's CPU.
const agentHeapAllowance = 256 << 20

func agentCmd(e *env) *cobra.Command {
	var (
		o         agent.Options
		listen    = addrValue(agent.DefaultListen)
		tokenFile string
		window    string
		maxTrace  string
	)
	c := &cobra.Command{
		Use:   "agent [flags]",
		Short: "keep recording and serve metrics, the doctor's evidence and the recent trace over HTTP",
		Long: `agent keeps the doctor's event families recording (the per-packet ones
sampled 5 % of each second), reads tcp_info, counters and settings every
2 s, and keeps the last --window of both (the trace within --max-trace). It serves:

  GET /metrics                      Prometheus metrics (docs/agent.md)
  GET /v1/evidence?since=&flow=     the doctor's evidence for a window, JSON;
                                    what doctor --peer joins
  GET /v1/trace?since=              the recent trace, for parse, stat, export

It listens on loopback unless told otherwise, and refuses another address
without a token; /v1/ always needs the token when one is set, /metrics too
unless --open-metrics.`,
		Example: `  skbtrace agent
  skbtrace agent --listen 10.0.0.2:9464 --token-file /etc/skbtrace/token --open-metrics
  curl -H "Authorization: Bearer $(cat token)" 'http://10.0.0.2:9464/v1/evidence?since=5m'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if tokenFile != "" {
				token, err := readToken(tokenFile)
				if err != nil {
					return err
				}
				o.Token = token
			}
			if (o.TLSCert == "") != (o.TLSKey == "") {
				return usagef("--tls-cert and --tls-key go together")
			}
			if err := agent.CheckListen(string(listen), o.Token); err != nil {
				return err
			}
			d, err := parseDuration(window)
			if err != nil {
				return err
			}
			o.Window, o.Log = d, e.stderr
			if o.MaxTraceBytes, err = parseSize(maxTrace); err != nil {
				return usagef("--max-trace: %v", err)
			}
			// The window's trace is most of what the agent keeps; each evidence
			// request's replay is garbage that would otherwise let the heap
			// grow to twice what is live. GOMEMLIMIT, when set, decides.
			cg, err := host.ReadCgroupMemory()
			if err != nil {
				fmt.Fprintf(e.stderr, "skbtrace: warning: %v\n", err)
			}
			host.SetGoMemoryLimit(int64(o.MaxTraceBytes)+agentHeapAllowance, 0, cg)
			ln, err := net.Listen("tcp", string(listen))
			if err != nil {
				return fmt.Errorf("listening on %s: %w", string(listen), err)
			}
			a, err := agent.Start(o)
			if err != nil {
				ln.Close()
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			served := make(chan error, 1)
			// The agent ends when it can no longer serve.
			go func() {
				err := a.Serve(ctx, ln)
				if err != nil {
					stop()
				}
				served <- err
			}()
			scheme := "http"
			if o.TLSCert != "" {
				scheme = "https"
			}
			fmt.Fprintf(e.stderr, "skbtrace: agent serving on %s://%s (window %s); stop with Ctrl-C\n", scheme, ln.Addr(), units.Duration(o.Window))
			runErr := a.Run(ctx)
			stop()
			if err := <-served; err != nil && runErr == nil {
				runErr = fmt.Errorf("serving: %w", err)
			}
			return runErr
		},
	}
	f := c.Flags()
	f.Var(&listen, "listen", "`ADDR` to serve on (another than loopback needs --token-file)")
	f.StringVar(&tokenFile, "token-file", "", "bearer token `FILE`: required on /v1/, and on /metrics unless --open-metrics")
	f.BoolVar(&o.OpenMetrics, "open-metrics", false, "serve /metrics without the token")
	f.StringVar(&o.TLSCert, "tls-cert", "", "serve HTTPS with this certificate `FILE`")
	f.StringVar(&o.TLSKey, "tls-key", "", "and this key `FILE`")
	f.StringSliceVar(&o.Netns, "netns", nil, "watch the network namespaces `NAME`, comma-separated (default: this one and every named one, also later ones)")
	f.StringVar(&window, "window", "10m", "keep this much of the past (`DURATION`: 10m, 1h)")
	f.StringVar(&maxTrace, "max-trace", "64M", "keep at most this much of the window's trace (`SIZE`); older blocks go first")
	f.BoolVar(&o.NoKernelEvents, "no-kernel-events", false, "record no kernel events: tcp_info, counters and settings only")
	return c
}
