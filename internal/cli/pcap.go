package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/analyze/pcap"
	"github.com/skbtrace/skbtrace/internal/capture"
	"github.com/skbtrace/skbtrace/internal/report"
)

// graphFlows is how many flow directions get graphs.
const graphFlows = 8

func pcapCmd(e *env) *cobra.Command {
	var (
		asJSON  bool
		graphs  string
		flow    string
		mtu     int
		input   string
		partial partialFlag
	)
	c := &cobra.Command{
		Use:   "pcap FILE|- [flags]",
		Short: "analyze a packet capture: per-flow throughput, RTT, retransmits, offload and GRO evidence",
		Long: `pcap reads a capture (pcap or pcapng, gzip-compressed or not, a file or -
for standard input) and reports per flow direction: throughput, retransmissions
counted as tcptrace does, out-of-order segments, duplicate ACKs, zero-window and
window-limited time, RTT at the capture point, the handshake's options and
where the capture was taken; the packet-size distribution, frames larger than
the MTU and whether sender TSO or receiver GRO made them, and for DF=0 packets
the IP-ID continuity GRO needs, outer and inner headers of VXLAN and Geneve.
IP fragments are put back into their datagrams and flows, and segments that
came as fragments are reported.
Findings use skbtrace doctor's ids and format (docs/findings.md).
A capture cut short is reported up to the cut, then pcap fails and writes
no --graphs unless --partial accepts it.`,
		Example: `  skbtrace pcap receiver.pcapng
  tcpdump -i eth0 -s 128 -w - | skbtrace pcap - --json
  skbtrace pcap vxlan.pcap.gz --graphs out/ --flow :5201`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 && input != "" {
				return usagef("give the capture as an argument or with -i, not both")
			}
			if len(args) > 1 || len(args) == 0 && input == "" {
				return usagef("name one capture file, as an argument or with -i, or - for standard input")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			opts := pcap.Options{MTU: mtu, Graphs: graphs != ""}
			// IPv4's least MTU to loopback's. 0 is the default's way of
			// saying "infer it", not an MTU a user can give.
			if c.Flags().Changed("mtu") && (mtu < 68 || mtu > 65536) {
				return usagef("--mtu %d is not an MTU (68-65536)", mtu)
			}
			if flow != "" {
				f, err := pcap.ParseFilter(flow)
				if err != nil {
					return usageError{err}
				}
				opts.Flow = f
			}
			path := input
			if len(args) > 0 {
				path = args[0]
			}
			in, closeIn, err := openInput("capture", path, e.stdin)
			if err != nil {
				return err
			}
			defer closeIn()
			name := path
			if path == "-" {
				name = "standard input"
			}
			r, err := capture.Open(in)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			a := pcap.New(opts)
			readErr := a.Run(r)
			rep := a.Report(name, r.Format, readErr)
			if asJSON {
				err = rep.WriteJSON(e.stdout)
			} else {
				err = rep.WriteText(e.stdout)
			}
			if err != nil {
				return err
			}
			if graphs != "" && partial.writes(readErr != nil) {
				files, err := report.WriteGraphs(graphs, a.Graphs(graphFlows))
				if err != nil {
					return err
				}
				wroteDir(e.stderr, graphs, files)
			}
			if readErr != nil {
				return partial.settle(e.stderr, fmt.Errorf("%s: %w", name, readErr), "the report covers everything before it", fileOutputs(graphs))
			}
			return nil
		},
	}
	c.Flags().StringVarP(&input, "input", "i", "", "capture `FILE` (or give it as an argument), or - for standard input")
	c.Flags().BoolVar(&asJSON, "json", false, "write the report as JSON")
	c.Flags().StringVar(&graphs, "graphs", "", "write SVG graphs and an HTML page showing them, DIR/index.html, into `DIR`")
	c.Flags().StringVar(&flow, "flow", "", "only flows with an endpoint matching `FILTER`: ADDR, ADDR:PORT or :PORT")
	partial.bind(c.Flags())
	c.Flags().IntVar(&mtu, "mtu", 0, "judge frames against this `MTU` (default: from the handshake's MSS, else 1500)")
	return c
}
