package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
)

// RunCommand runs the observed command as typed, its output going to out;
// in ns when given (as ip netns exec would run it). An iperf3 client's
// result joins the evidence, read from what it prints: its summary lines,
// or its JSON when given -J; wrappers before it (ip netns exec, nsenter,
// sudo, env, taskset, timeout, nice) are looked through. A command ended by
// ctx (the observation's duration, Ctrl-C) did not fail: Stopped says so.
func RunCommand(ctx context.Context, argv []string, out io.Writer, ns *host.Netns) (*doctor.Command, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to run")
	}
	real := RealCommand(argv)
	program := filepath.Base(real[0])
	iperf := program == "iperf3" && slices.Contains(real, "-c")
	if _, ok := out.(*os.File); !ok {
		// Its stdout and stderr are copied to out at once: a bytes.Buffer
		// lost one's output to the other's ReadFrom.
		out = &lockedWriter{w: out}
	}
	var captured bytes.Buffer
	last := &lastLine{}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// One writer for both, so one pipe keeps their order.
	both := io.MultiWriter(out, last)
	cmd.Stdout, cmd.Stderr = both, both
	if iperf {
		cmd.Stdout = io.MultiWriter(out, last, &captured)
	}
	start := time.Now()
	var err error
	if ns != nil {
		if err = ns.Start(cmd); err == nil {
			err = cmd.Wait()
		}
	} else {
		err = cmd.Run()
	}
	c := &doctor.Command{Argv: argv, Program: program, Netns: nsName(ns), Seconds: time.Since(start).Seconds()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		c.ExitCode = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			c.ExitCode = 128 + int(ws.Signal())
		}
		if ctx.Err() != nil {
			c.Stopped = true
		} else {
			c.LastLine = last.String()
		}
	case err != nil:
		return nil, fmt.Errorf("running %s: %w", argv[0], err)
	}
	if iperf {
		parse := ParseIperf3
		if !slices.Contains(real, "-J") && !slices.Contains(real, "--json") {
			parse = func(b []byte) (*doctor.Iperf3, error) { return ParseIperf3Text(b, real) }
		}
		if r, err := parse(captured.Bytes()); err == nil {
			c.Iperf3 = r
		}
	}
	return c, nil
}

func nsName(ns *host.Netns) string {
	if ns == nil {
		return ""
	}
	return ns.Name
}

// lastLine keeps the last non-empty line written to it: a failed
// command's last words (iperf3's "error - unable to connect").
type lastLine struct {
	mu   sync.Mutex
	line []byte // the last complete non-empty line
	cur  []byte // the line being written
}

// maxLastLine bounds what is kept of one line.
const maxLastLine = 512

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if c != '\n' {
			if len(l.cur) < maxLastLine {
				l.cur = append(l.cur, c)
			}
			continue
		}
		if len(bytes.TrimSpace(l.cur)) > 0 {
			l.line = append(l.line[:0], l.cur...)
		}
		l.cur = l.cur[:0]
	}
	return len(p), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := bytes.TrimSpace(l.cur); len(s) > 0 {
		return string(s)
	}
	return string(bytes.TrimSpace(l.line))
}

// RealCommand is the command a wrapper runs: argv without the ip netns
// exec NS, nsenter, sudo, env, taskset, timeout and nice before it (as
// often as they nest); argv itself when none wraps it.
func RealCommand(argv []string) []string {
	for {
		inner := unwrap(argv)
		if inner == nil {
			return argv
		}
		argv = inner
	}
}

// unwrap is the command one wrapper runs, nil when argv[0] is none or
// runs no command (ip netns list, taskset -p).
func unwrap(argv []string) []string {
	// The options of each wrapper that take a value as the next word.
	var valued []string
	positional := 0 // words after the options before the command
	switch filepath.Base(argv[0]) {
	case "ip":
		// ip [-OPTIONS] netns exec NS CMD: ip takes "net" for netns and
		// any prefix of exec; -n NS exec is no ip command.
		i := 1
		for i < len(argv) && strings.HasPrefix(argv[i], "-") {
			i++
		}
		if i+3 < len(argv) && len(argv[i]) >= 3 && strings.HasPrefix("netns", argv[i]) && strings.HasPrefix("exec", argv[i+1]) {
			return argv[i+3:]
		}
		return nil
	case "nsenter":
		valued = []string{"-t", "--target", "-S", "--setuid", "-G", "--setgid", "-w", "--wd"}
	case "sudo":
		valued = []string{"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
			"-p", "--prompt", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U", "--other-user"}
	case "env":
		valued = []string{"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}
	case "taskset":
		if slices.Contains(argv, "-p") || slices.Contains(argv, "--pid") {
			return nil
		}
		positional = 1 // the mask or CPU list
	case "timeout":
		valued = []string{"-s", "--signal", "-k", "--kill-after"}
		positional = 1 // the duration
	case "nice":
		valued = []string{"-n", "--adjustment"}
	default:
		return nil
	}
	i := 1
options:
	for i < len(argv) {
		a := argv[i]
		switch {
		case a == "--":
			i++
			break options
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if slices.Contains(valued, a) {
				i++
			}
		case filepath.Base(argv[0]) == "env" && strings.Contains(a, "="):
		default:
			break options
		}
		i++
	}
	i += positional
	if i >= len(argv) {
		return nil
	}
	return argv[i:]
}

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ParseIperf3Text reads the summary iperf3 prints without -J: its sender
// and receiver lines ("[SUM]" ones with -P), and the CPU line of -V. argv
// says the protocol and direction, which the lines do not name.
func ParseIperf3Text(b []byte, argv []string) (*doctor.Iperf3, error) {
	r := &doctor.Iperf3{Protocol: "TCP", Reverse: slices.Contains(argv, "-R") || slices.Contains(argv, "--reverse")}
	if slices.Contains(argv, "-u") || slices.Contains(argv, "--udp") {
		r.Protocol = "UDP"
	}
	var sent, received, sum bool
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "CPU" {
			// CPU Utilization: local/sender 5.3% (0.2%u/5.1%s), remote/receiver 20.1% (...)
			for i := 2; i+1 < len(f); i++ {
				v, err := strconv.ParseFloat(strings.TrimSuffix(f[i+1], "%"), 64)
				switch {
				case err != nil:
				case f[i] == "local/sender" || f[i] == "remote/sender":
					r.SenderCPU = v
				case f[i] == "local/receiver" || f[i] == "remote/receiver":
					r.ReceiverCPU = v
				}
			}
			continue
		}
		if len(f) < 4 || !strings.HasPrefix(f[0], "[") {
			continue
		}
		role := f[len(f)-1]
		if role != "sender" && role != "receiver" {
			continue
		}
		isSum := strings.HasPrefix(f[0], "[SUM")
		if sum && !isSum {
			continue // the streams of -P: their [SUM] lines count
		}
		if isSum && !sum {
			sum, sent, received = true, false, false
		}
		rate := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, "bits/sec") })
		if rate < 1 {
			continue
		}
		bps, err := bitsPerSecond(f[rate-1], f[rate])
		if err != nil {
			return nil, fmt.Errorf("iperf3's %s line %q: %w", role, strings.TrimSpace(line), err)
		}
		if role == "sender" && !sent {
			sent, r.SentBps = true, bps
			if r.Protocol == "TCP" && rate+2 < len(f) {
				r.Retransmits, _ = strconv.ParseInt(f[rate+1], 10, 64)
			}
		}
		if role == "receiver" && !received {
			received, r.ReceivedBps = true, bps
			for _, tok := range f[rate+1:] {
				if p, ok := strings.CutPrefix(tok, "("); ok && strings.HasSuffix(p, "%)") {
					r.LostPercent, _ = strconv.ParseFloat(strings.TrimSuffix(p, "%)"), 64)
				}
			}
		}
	}
	if !sent && !received {
		return nil, errors.New("iperf3 printed no sender or receiver summary")
	}
	return r, nil
}

// bitsPerSecond reads iperf3's "29.3" "Gbits/sec".
func bitsPerSecond(value, unit string) (float64, error) {
	v, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate", value)
	}
	scale := map[string]float64{"bits/sec": 1, "Kbits/sec": 1e3, "Mbits/sec": 1e6, "Gbits/sec": 1e9, "Tbits/sec": 1e12}[unit]
	if scale == 0 {
		return 0, fmt.Errorf("%q is not a rate unit", unit)
	}
	return v * scale, nil
}

// ParseIperf3 reads the result of iperf3 -J.
func ParseIperf3(b []byte) (*doctor.Iperf3, error) {
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
	r := &doctor.Iperf3{Protocol: doc.Start.TestStart.Protocol, Reverse: doc.Start.TestStart.Reverse != 0,
		SentBps: doc.End.SumSent.Bps, ReceivedBps: doc.End.SumReceived.Bps, Retransmits: doc.End.SumSent.Retransmits,
		LostPercent: doc.End.Sum.LostPercent, SenderCPU: doc.End.CPU.Host, ReceiverCPU: doc.End.CPU.Remote}
	if r.Protocol == "UDP" && r.SentBps == 0 {
		r.SentBps = doc.End.Sum.Bps
	}
	return r, nil
}
