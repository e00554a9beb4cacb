package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// RunCommand runs the observed command with its output going to out. An
// iperf3 client gets -J (unless it has it) so its result joins the evidence;
// its JSON still reaches out.
func RunCommand(ctx context.Context, argv []string, out io.Writer) (*Command, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to run")
	}
	iperf := filepath.Base(argv[0]) == "iperf3" && slices.Contains(argv, "-c")
	args := slices.Clone(argv[1:])
	if iperf && !slices.Contains(args, "-J") && !slices.Contains(args, "--json") {
		args = append(args, "-J")
	}
	var captured bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Stdout, cmd.Stderr = out, out
	if iperf {
		cmd.Stdout = io.MultiWriter(out, &captured)
	}
	start := time.Now()
	err := cmd.Run()
	c := &Command{Argv: argv, Seconds: time.Since(start).Seconds()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		c.ExitCode = exit.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("running %s: %w", argv[0], err)
	}
	if iperf {
		if r, err := ParseIperf3(captured.Bytes()); err == nil {
			c.Iperf3 = r
		}
	}
	return c, nil
}

// ParseIperf3 reads the result of iperf3 -J.
func ParseIperf3(b []byte) (*Iperf3, error) {
	var doc struct {
		Start struct {
			TestStart struct {
				Protocol string `json:"protocol"`
				Reverse  int    `json:"reverse"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumSent struct {
				Bps         float64 `json:"bits_per_second"`
				Retransmits int64   `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				Bps float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum struct {
				Bps         float64 `json:"bits_per_second"`
				LostPercent float64 `json:"lost_percent"`
			} `json:"sum"`
			CPU struct {
				Host   float64 `json:"host_total"`
				Remote float64 `json:"remote_total"`
			} `json:"cpu_utilization_percent"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parsing iperf3 -J output: %w", err)
	}
	if doc.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", doc.Error)
	}
	r := &Iperf3{Protocol: doc.Start.TestStart.Protocol, Reverse: doc.Start.TestStart.Reverse != 0,
		SentBps: doc.End.SumSent.Bps, ReceivedBps: doc.End.SumReceived.Bps, Retransmits: doc.End.SumSent.Retransmits,
		LostPercent: doc.End.Sum.LostPercent, SenderCPU: doc.End.CPU.Host, ReceiverCPU: doc.End.CPU.Remote}
	if r.Protocol == "UDP" && r.SentBps == 0 {
		r.SentBps = doc.End.Sum.Bps
	}
	return r, nil
}
