package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
)

// Background starts a command inside ns that runs until stop is called or
// the pair is closed, whichever comes first; stop ends it by its PID and
// returns what it printed.
func (p *Pair) Background(ns *host.Netns, name string, args ...string) (stop func() string, err error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := ns.Start(cmd); err != nil {
		return nil, err
	}
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		return out.String()
	}
	p.undo = append(p.undo, func() error { stop(); return nil })
	return stop, nil
}

// waitListening waits until something in ns listens on the TCP port. A
// kernel guest under emulation took more than 5 s to start a python3
// server: the wait ends as soon as one listens, so its bound is generous.
func waitListening(ctx context.Context, ns *host.Netns, port int) error {
	const bound = 30 * time.Second
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); {
		out, _ := ns.Run("ss", "-Htln", fmt.Sprintf("sport = :%d", port))
		if strings.TrimSpace(out) != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("nothing listens on port %d in %s after %v", port, ns.Name, bound)
}

// iperf3Port is where a variant's iperf3 server listens, beside the lab's
// own generator on Port.
const iperf3Port = 5301

// iperf3 is a workload of iperf3's own client and a one-off server, instead
// of the lab's generator: the client in the sender's namespace with args
// added, for the run's duration, CUBIC and the two-hosts CPUs. The
// generator's options that iperf3 has carry over: UDP (-u -b 0), Size (-l),
// SndBuf (-w: both ends' buffers), NoDelay (-N), Streams (-P).
func iperf3(args ...string) func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	return iperf3Placed(nil, args...)
}

// iperf3Placed is iperf3 with place (nil: none) called with the client's
// PID as soon as it starts, before it connects (into a cgroup).
func iperf3Placed(place func(p *Pair, pid int) error, args ...string) func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	return func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
		args := slices.Clone(args)
		if o.Mode == load.UDP {
			args = append(args, "-u", "-b", "0")
		}
		if o.Size > 0 && o.Mode != load.Bulk {
			args = append(args, "-l", fmt.Sprint(o.Size))
		}
		if o.SndBuf > 0 {
			args = append(args, "-w", fmt.Sprint(o.SndBuf))
		}
		if o.NoDelay {
			args = append(args, "-N")
		}
		if o.Streams > 1 {
			args = append(args, "-P", fmt.Sprint(o.Streams))
		}
		stop, err := p.Background(p.Receiver, "iperf3", "-s", "-1", "-p", fmt.Sprint(iperf3Port))
		if err != nil {
			return nil, err
		}
		defer stop()
		if err := waitListening(ctx, p.Receiver, iperf3Port); err != nil {
			return nil, err
		}
		host, _, _ := strings.Cut(o.Addr, ":")
		cargs := []string{"-c", host, "-p", fmt.Sprint(iperf3Port),
			"-t", fmt.Sprint(max(1, int(o.Duration.Seconds()))), "-J"}
		if !slices.Contains(args, "-u") {
			cargs = append(cargs, "-C", "cubic")
		}
		if runtime.NumCPU() >= 2 {
			cargs = append(cargs, "-A", "0,1")
		}
		cmd := exec.CommandContext(ctx, "iperf3", append(cargs, args...)...)
		var out []byte
		if place == nil {
			out, err = p.Sender.Output(cmd)
		} else {
			out, err = outputPlaced(p, cmd, place)
		}
		if err != nil {
			// iperf3 -J reports its errors on standard output.
			return nil, fmt.Errorf("%w: %s", err, out)
		}
		return parseIperf3(out)
	}
}

// parseIperf3 reads an iperf3 -J result: what the receiver got, and for
// UDP the datagrams per second.
func parseIperf3(out []byte) (*load.Result, error) {
	var r struct {
		Error string `json:"error"`
		End   struct {
			SumReceived struct {
				Seconds float64 `json:"seconds"`
				Bps     float64 `json:"bits_per_second"`
			} `json:"sum_received"`
			Sum struct {
				Seconds float64 `json:"seconds"`
				Bps     float64 `json:"bits_per_second"`
				Packets float64 `json:"packets"`
				Lost    float64 `json:"lost_packets"`
			} `json:"sum"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("reading iperf3's result: %w", err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("iperf3: %s", r.Error)
	}
	if s := r.End.SumReceived; s.Seconds > 0 {
		return &load.Result{Bps: s.Bps, Seconds: s.Seconds}, nil
	}
	s := r.End.Sum
	if s.Seconds <= 0 {
		return nil, fmt.Errorf("iperf3 reported no transfer")
	}
	return &load.Result{Bps: s.Bps, Seconds: s.Seconds, OpsPerSec: (s.Packets - s.Lost) / s.Seconds}, nil
}
