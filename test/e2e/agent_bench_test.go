package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// procCPUSeconds is a process's user+system time so far.
func procCPUSeconds(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// procPeakRSS is a process's peak resident memory (VmHWM) in bytes.
func procPeakRSS(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

func startBenchAgent(b *testing.B, pair *lab.Pair, window string) (*exec.Cmd, string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(binary, "agent", "--listen", addr, "--netns", pair.Sender.Name+","+pair.Receiver.Name, "--window", window)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	waitListening(b, addr)
	return cmd, addr
}

// BenchmarkAgentOverhead is the agent's target: on a veth stream it costs at
// most 3 % of throughput (median of alternating pairs, and the BPF run time
// over the stream's CPU time, which this VM's drift does not blur), and
// idle it takes under 1 % of one CPU.
func BenchmarkAgentOverhead(b *testing.B) {
	testenv.RequireRoot(b, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	pair := newPair(b)
	defer enableBPFStats(b)()
	const length = 2 * time.Second
	var bpfShares []float64
	withAgent := func() float64 {
		before := programIDs()
		cmd, _ := startBenchAgent(b, pair, "10m")
		defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
		time.Sleep(time.Second)
		bpfBefore, cpuBefore := runTimeSince(before), busySeconds(b)
		rate := vethStream(b, pair, length, 0)
		bpfShares = append(bpfShares, (runTimeSince(before)-bpfBefore).Seconds()/(busySeconds(b)-cpuBefore))
		return rate
	}
	ratios := alternatingRatios(10, func() float64 { return vethStream(b, pair, length, 0) }, withAgent)
	sort.Float64s(bpfShares)
	b.ReportMetric(ratios[len(ratios)/2], "agent/plain")
	b.ReportMetric(bpfShares[len(bpfShares)/2], "bpf-runtime/workload-cpu")

	cmd, _ := startBenchAgent(b, pair, "10m")
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	time.Sleep(2 * time.Second)
	cpu0 := procCPUSeconds(b, cmd.Process.Pid)
	time.Sleep(20 * time.Second)
	b.ReportMetric((procCPUSeconds(b, cmd.Process.Pid)-cpu0)/20, "idle-cpu-share")
}

// BenchmarkAgentMemoryUnderChurn runs the agent for AGENT_CHURN_MINUTES
// (default 10) while connections open and close in a loop and /metrics and
// /v1/evidence are asked every second; it reports the peak RSS at each
// minute, which must level off once the window is full.
func BenchmarkAgentMemoryUnderChurn(b *testing.B) {
	testenv.RequireRoot(b, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	minutes := 10
	if v, err := strconv.Atoi(os.Getenv("AGENT_CHURN_MINUTES")); err == nil && v > 0 {
		minutes = v
	}
	pair := newPair(b)
	// A window of half the run, so the second half shows the bound holding.
	cmd, addr := startBenchAgent(b, pair, fmt.Sprintf("%dm", max(1, minutes/2)))
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	ln := listenIn(b, pair.Receiver, "tcp", lab.ReceiverAddr.Addr().String()+":5201")
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	stop := make(chan struct{})
	done := churnFrom(pair.Sender, ln.Addr().String(), 64<<10, stop)
	var peaks []float64
	var windowBytes float64
	deadline := time.Now().Add(time.Duration(minutes) * time.Minute)
	for next := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		for _, path := range []string{"/metrics", "/v1/evidence?since=30s"} {
			if resp, err := http.Get("http://" + addr + path); err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if m := windowBytesMetric.FindSubmatch(body); m != nil {
					windowBytes, _ = strconv.ParseFloat(string(m[1]), 64)
				}
			}
		}
		if time.Now().After(next) {
			peaks = append(peaks, procPeakRSS(b, cmd.Process.Pid))
			next = next.Add(time.Minute)
		}
		time.Sleep(time.Second)
	}
	close(stop)
	conns := <-done
	for i, p := range peaks {
		b.ReportMetric(p/(1<<20), fmt.Sprintf("peak-rss-MB-at-%dmin", i+1))
	}
	b.ReportMetric(float64(conns), "connections")
	b.ReportMetric(windowBytes/(1<<20), "window-MB")
}

var windowBytesMetric = regexp.MustCompile(`(?m)^skbtrace_agent_window_bytes (\S+)$`)
