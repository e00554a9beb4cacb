package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

func loadCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "load",
		Short: "generate traffic: bulk TCP, request/response TCP, UDP at a rate",
		Long: `load is skbtrace's traffic generator, for the lab and on its own. Run a
server, then a client against it; the client prints results per interval and
in total, as the sender measured them (UDP also reports what the server
received). Either side can run inside a named network namespace.`,
		Example: `  skbtrace load server --listen 10.0.0.2:5201 --netns blue
  skbtrace load client 10.0.0.2:5201 -d 10 -P 2 --cc cubic
  skbtrace load client 10.0.0.2:5201 --mode rr -l 100 --writes 2      # Nagle x delayed ACK
  skbtrace load client 10.0.0.2:5201 --mode udp -l 64 --rate 100M --json`,
	}
	c.AddCommand(loadServerCmd(e), loadClientCmd(e))
	return c
}

func loadServerCmd(e *env) *cobra.Command {
	var netns, duration string
	listen := addrValue(":5201")
	c := &cobra.Command{
		Use:   "server [flags]",
		Short: "accept load clients (TCP and UDP on one port) until interrupted",
		Example: `  skbtrace load server
  skbtrace load server --listen 10.0.0.2:5201 --netns blue -d 60s`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			d, err := parseDuration(duration)
			if err != nil {
				return err
			}
			var srv *load.Server
			open := func() (err error) {
				srv, err = load.Listen(string(listen))
				return err
			}
			if netns != "" {
				ns, oerr := host.OpenNetns(netns)
				if oerr != nil {
					return oerr
				}
				defer ns.Close()
				err = ns.Do(open)
			} else {
				err = open()
			}
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			fmt.Fprintf(e.stderr, "skbtrace: load server listening on %s (tcp and udp)\n", srv.Addr())
			return srv.Serve(ctx)
		},
	}
	c.Flags().Var(&listen, "listen", "`ADDR` to listen on, TCP and UDP")
	c.Flags().StringVar(&netns, "netns", "", "listen inside this named network namespace (`NAME`)")
	c.Flags().StringVarP(&duration, "duration", "d", "", "stop after this long, `DURATION` (default: until interrupted)")
	return c
}

func loadClientCmd(e *env) *cobra.Command {
	var o load.Options
	var mode, duration, rate string
	var asJSON bool
	c := &cobra.Command{
		Use:   "client ADDR [flags]",
		Short: "send traffic to a load server and report the throughput",
		Example: `  skbtrace load client 10.0.0.2:5201 -d 10 -P 4
  skbtrace load client 10.0.0.2:5201 --mode rr --writes 2 --json
  skbtrace load client 10.0.0.2:5201 --mode udp --rate 500M -l 1400`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("load client takes the server's address, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Addr, o.Mode = args[0], load.Mode(mode)
			var err error
			if o.Duration, err = parseDuration(duration); err != nil {
				return err
			}
			if rate != "" {
				if o.RateBps, err = parseRate(rate); err != nil {
					return err
				}
			}
			o.Defaults()
			if err := o.Check(); err != nil {
				return usageError{err}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			var progress func(load.Interval)
			if !asJSON {
				progress = func(iv load.Interval) {
					fmt.Fprintf(e.stdout, "[%6.2f-%6.2f s]  %s  %.0f ops/s\n", iv.Start, iv.End, bitsPerSecond(iv.Bps), iv.OpsPerSec)
				}
			}
			res, err := load.Run(ctx, o, progress)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(e.stdout, "total %.2f s: %s, %s, %.0f ops/s", res.Seconds, units.Bytes(res.Bytes), bitsPerSecond(res.Bps), res.OpsPerSec)
			switch o.Mode {
			case load.RR:
				fmt.Fprintf(e.stdout, ", %.0f us per transaction", res.AvgRTTus)
			case load.UDP:
				fmt.Fprintf(e.stdout, ", %s received, %d lost", units.Count(res.Received, "datagram", "datagrams"), res.Lost)
			}
			fmt.Fprintln(e.stdout)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&mode, "mode", "bulk", "traffic `MODE`: bulk, rr (request/response) or udp")
	f.StringVarP(&duration, "duration", "d", "5", "how long to send (`DURATION`: 5, 5s, 2m)")
	f.IntVarP(&o.Streams, "parallel", "P", 1, "`N` parallel connections")
	f.IntVarP(&o.Size, "length", "l", 0, "`BYTES` per write, request or datagram (default: 128K bulk, 100 rr, 1400 udp)")
	f.IntVar(&o.Response, "response", 10, "rr: `BYTES` per response")
	f.IntVar(&o.Writes, "writes", 1, "rr: `N` writes each request is split into (2 shows the Nagle x delayed-ACK stall)")
	f.BoolVar(&o.NoDelay, "nodelay", false, "set TCP_NODELAY")
	f.IntVar(&o.SndBuf, "sndbuf", 0, "SO_SNDBUF `BYTES` (default: autotuning)")
	f.IntVar(&o.RcvBuf, "rcvbuf", 0, "SO_RCVBUF `BYTES`")
	f.StringVar(&o.CC, "cc", "", "congestion control `ALGORITHM` for these sockets (cubic, bbr, reno ...)")
	f.StringVar(&rate, "rate", "", "udp: bits per second, `RATE` such as 100M, 1G (default: as fast as possible)")
	f.DurationVar(&o.Interval, "interval", time.Second, "`DURATION` between interval reports")
	f.StringVar(&o.DialNetns, "netns", "", "connect from inside this named network namespace (`NAME`)")
	f.BoolVar(&asJSON, "json", false, "results as one JSON document")
	return c
}

// parseRate accepts bits per second with an optional k, M or G suffix (powers of 1000).
func parseRate(s string) (float64, error) {
	mult := 1.0
	switch s[len(s)-1] {
	case 'k', 'K':
		mult, s = 1e3, s[:len(s)-1]
	case 'm', 'M':
		mult, s = 1e6, s[:len(s)-1]
	case 'g', 'G':
		mult, s = 1e9, s[:len(s)-1]
	}
	var v float64
	if _, err := fmt.Sscan(s, &v); err != nil || v <= 0 {
		return 0, usagef("rate %q is not a positive number of bits per second like 100M", s)
	}
	return v * mult, nil
}

func bitsPerSecond(bps float64) string {
	return fmt.Sprintf("%14s", units.Bits(bps)) // a column of results
}
