package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// leftovers lists what a lab run with this process id could have left:
// namespaces and interfaces named after it.
func leftovers(t *testing.T, pid int) []string {
	t.Helper()
	var left []string
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, fmt.Sprintf("skbtrace-%d-", pid)) {
			left = append(left, "netns "+strings.Fields(line)[0])
		}
	}
	links, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatalf("ip -o link: %v", err)
	}
	for _, line := range strings.Split(string(links), "\n") {
		if strings.Contains(line, fmt.Sprintf("skbs%d-", pid)) || strings.Contains(line, fmt.Sprintf("skbr%d-", pid)) {
			left = append(left, "link "+line)
		}
	}
	return left
}

// The lab is the doctor's acceptance test: every fault must reproduce and
// the doctor, watching the fault run, must rank the expected finding first,
// and here its first remedy, applied as printed, must restore the stream
// (remedyFailures). The kernel matrix names the scenarios each kernel runs
// in SKBTRACE_LAB_SCENARIOS (space-separated); the default is all. Its
// guests judge function, not speed (emulation, 10 times slower): there the
// remedies are not measured.
func TestLabRunAllReproducesEveryFaultAndTheDoctorNamesIt(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "ethtool")
	testenv.Tool(t, "nft")
	scenarios := strings.Fields(os.Getenv("SKBTRACE_LAB_SCENARIOS"))
	want := len(scenarios)
	if want == 0 {
		scenarios, want = []string{"all"}, len(lab.Scenarios)
	}
	args := append(scenarios, "--doctor")
	if os.Getenv("SKBTRACE_KERNEL_MATRIX") != "1" {
		args = append(args, "--calibrate")
	}
	_, failures := runLab(t, want, args...)
	reportFailures(t, failures)
}

// The variants build each finding's fault by other mechanisms than the
// lab's, and the noise runs are healthy hosts with background traffic: the
// doctor must name each variant's fault first and give the noise no
// warning; each variant's verdict is the same with --deep.
func TestLabVariantsAndNoiseInBothDoctorModes(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	testenv.Tool(t, "ethtool")
	testenv.Tool(t, "nft")
	testenv.Tool(t, "iperf3")
	testenv.Tool(t, "python3")
	def, failures := runLab(t, len(lab.Variants)+len(lab.Noise), "variants", "noise", "--doctor", "--calibrate")
	// Noise runs are judged in default mode only: the question there is
	// whether the doctor stays quiet as users run it.
	// --deep runs one variant of each expected finding: the modes differ
	// in what they record, not in the mechanism that built the fault, and
	// all of them took six of CI's minutes.
	var oneEach []string
	seen := map[string]bool{}
	for _, s := range lab.Variants {
		if !seen[s.Expect] {
			seen[s.Expect] = true
			oneEach = append(oneEach, s.Name)
		}
	}
	deep, deepFailures := runLab(t, len(oneEach), append(oneEach, "--doctor", "--deep")...)
	failures = append(failures, deepFailures...)
	byName := map[string]lab.Report{}
	for _, r := range deep {
		byName[r.Name] = r
	}
	for _, r := range def {
		d, ok := byName[r.Name]
		if ok && r.Doctor != nil && d.Doctor != nil && r.Doctor.Top != d.Doctor.Top {
			failures = append(failures, fmt.Sprintf("%s: default mode's top finding %q, --deep's %q", r.Name, r.Doctor.Top, d.Doctor.Top))
		}
	}
	// Told after both runs' logs, so that they end the output, which is
	// what a shortened CI log keeps.
	reportFailures(t, failures)
}

// runLab runs `skbtrace lab run ARGS --json`, logs each report, and
// returns the failures: each fault that did not reproduce, each doctor
// verdict that differs from the expected one and each remedy short of its
// bar. A run that cannot be judged further fails the test at once.
func runLab(t *testing.T, want int, args ...string) ([]lab.Report, []string) {
	t.Helper()
	cmd := exec.Command(binary, append(append([]string{"lab", "run"}, args...), "--json")...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	start := time.Now()
	err := cmd.Run()
	var reports []lab.Report
	if jerr := json.Unmarshal(out.Bytes(), &reports); jerr != nil {
		t.Fatalf("lab run %s --json: %v (%v): %s", strings.Join(args, " "), jerr, err, errs.String())
	}
	var failures []string
	for _, r := range reports {
		t.Logf("%-18s reproduced=%-5v %s", r.Name, r.Reproduced, r.Signal)
		if !r.Reproduced {
			failures = append(failures, fmt.Sprintf("%s did not reproduce: %s", r.Name, r.Signal))
		}
		if r.Doctor == nil {
			failures = append(failures, fmt.Sprintf("%s: no doctor verdict", r.Name))
			continue
		}
		t.Logf("%-18s expected=%-18q doctor top=%q", r.Name, r.Expect, r.Doctor.Top)
		// The provenance the doctor gave, on every kernel the matrix runs,
		// and where it named none, what it said instead.
		for _, f := range r.Doctor.Findings {
			if f.ID != r.Doctor.Top {
				continue
			}
			if f.Limit != nil {
				t.Logf("%-18s limited by %s", r.Name, f.Limit.Describe())
			} else {
				t.Logf("%-18s no limit named: %s; %s", r.Name, f.Title, strings.Join(f.Evidence, "; "))
			}
			break
		}
		if !r.Doctor.Agrees {
			var found []string
			for _, f := range r.Doctor.Findings {
				found = append(found, f.ID+"/"+f.Severity.String()+": "+strings.Join(f.Evidence, "; "))
			}
			failures = append(failures, fmt.Sprintf("%s: doctor's top finding %q, want %q; findings:\n%s\nflows:\n%s", r.Name, r.Doctor.Top, r.Expect,
				strings.Join(found, "\n"), flowSummary(r.Doctor.Evidence)))
		}
	}
	failures = append(failures, remedyFailures(t, reports)...)
	if len(reports) != want || err != nil {
		reportFailures(t, failures)
		t.Fatalf("%d reports for %d scenarios, exit %v: %s", len(reports), want, err, errs.String())
	}
	// A calibration measures each fault with a remedy again, and the
	// doctor's remedies and their controls three times over (the variants
	// and noise took 10m47s with two runs each, 2026-11-28); a remedy short
	// of the bar is measured again in a second pair, each of its runs
	// beside a gauge (18m02s with six second pairs and the UDP slow
	// reader, 2026-11-29).
	allowed := 10 * time.Minute
	if slices.Contains(args, "--calibrate") {
		allowed = 21 * time.Minute
	}
	if d := time.Since(start); d > allowed {
		reportFailures(t, failures)
		t.Fatalf("lab run %s took %v, over the %v allowed", strings.Join(args, " "), d, allowed)
	}
	if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
		reportFailures(t, failures)
		t.Fatalf("left behind: %v", left)
	}
	return reports, failures
}

func reportFailures(t *testing.T, failures []string) {
	t.Helper()
	for _, f := range failures {
		t.Error(f)
	}
}

func TestLabCleansUpAfterAFailedRun(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	s := &lab.Scenario{
		Name:     "broken",
		Families: []string{"tcp_conn"},
		Inject:   func(p *lab.Pair) error { return errors.New("injected failure") },
	}
	_, err := s.Run(context.Background(), lab.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("err %v, want the injected failure", err)
	}
	if left := leftovers(t, os.Getpid()); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A bare host may lack a program a scenario runs: the scenario is skipped
// and says which, and nothing is left behind.
func TestLabSkipsAScenarioWhoseProgramIsMissing(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	s := &lab.Scenario{
		Name:     "needs-a-tool",
		Families: []string{"tcp_conn"},
		Prepare: func(p *lab.Pair) error {
			_, err := p.Sender.Run("skbtrace-no-such-tool", "-V")
			return err
		},
	}
	rep, err := s.Run(context.Background(), lab.RunOptions{})
	if err != nil {
		t.Fatalf("a missing program failed the run: %v", err)
	}
	if want := "needs skbtrace-no-such-tool, which is not installed here"; rep.Skipped != want || rep.Reproduced {
		t.Errorf("skipped %q (reproduced %v), want %q", rep.Skipped, rep.Reproduced, want)
	}
	if left := leftovers(t, os.Getpid()); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestLabCleansUpWhenInterrupted(t *testing.T) {
	testenv.RequireRoot(t, "CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN")
	before := skbtracePrograms(t)
	cmd := exec.Command(binary, "lab", "run", "all")
	var errs bytes.Buffer
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // inside a scenario's runs
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("an interrupted lab run exited 0")
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("lab run did not stop within 30s of SIGINT")
	}
	if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
		t.Fatalf("left behind after SIGINT: %v (%s)", left, errs.String())
	}
	waitProgramsGone(t, before)
}

// flowSummary is what the send-side rules read of each flow that moved
// data, and the zero windows each namespace advertised: when a verdict
// differs in CI, its log is all there is to judge it by.
func flowSummary(ev *doctor.Evidence) string {
	if ev == nil {
		return "(no evidence)"
	}
	var lines []string
	for _, f := range ev.Flows {
		var shares []string
		for r, v := range f.LimitShares {
			if v >= 0.005 {
				shares = append(shares, fmt.Sprintf("%s %.0f%%", r, 100*v))
			}
		}
		sort.Strings(shares)
		lines = append(lines, fmt.Sprintf("  %s %s -> %s: %.0f Mbit/s out, %.0f in; limits [%s]; srtt %d us, min %d; %d of %d segments retransmitted (%d traced); cong %v; window %d (max %d)",
			f.Netns, f.Local, f.Peer, f.SendBps()/1e6, f.RecvBps()/1e6, strings.Join(shares, ", "), f.RTTus, f.MinRTTus,
			f.Retrans, f.SegsOut, f.TraceRetrans, f.CongStates, f.SndWnd, f.MaxSndWnd))
	}
	for _, ns := range ev.Namespaces {
		lines = append(lines, fmt.Sprintf("  netns %s: zero windows advertised %d, wanted %d; retransmitted %d of %d", ns.Name,
			ns.Counters["TcpExt.TCPToZeroWindowAdv"], ns.Counters["TcpExt.TCPWantZeroWindowAdv"], ns.Counters["Tcp.RetransSegs"], ns.Counters["Tcp.OutSegs"]))
	}
	return strings.Join(lines, "\n")
}

// remedyFailures holds each calibrated scenario whose doctor's first remedy
// was applied to issue 44's bar: it restores at least 80 % of the
// control's throughput, unless the scenario says why its first remedy
// alone cannot, and the doctor's estimate of what the fault cost lies
// within lab.EstimateMargin of what was measured (lab.Report.EstimateOff).
func remedyFailures(t *testing.T, reports []lab.Report) []string {
	t.Helper()
	var failures []string
	for _, r := range reports {
		if r.RemedyFrom == "" {
			continue
		}
		if r.RemedyFailed != "" {
			failures = append(failures, fmt.Sprintf("%s: the remedy %q failed: %s", r.Name, r.Remedy, r.RemedyFailed))
			continue
		}
		wait := ""
		if r.LatencyGain > 0 {
			wait = fmt.Sprintf(" (its wait %.0f %% less)", r.LatencyGain*100)
		}
		if r.ControlAfterBps > 0 {
			wait += fmt.Sprintf(" (a second pair: the remedy %.2f Gbit/s, the control measured again beside it %.2f; first %.2f and %.2f)",
				r.FixedAgainBps/1e9, r.ControlAfterBps/1e9, r.FixedBps/1e9, r.ControlBps/1e9)
		}
		t.Logf("%-18s remedy (%s): %s; restored %.0f %% of the control, gained %.0f %% (%.0f %% of the control's)%s, estimated %.0f %%",
			r.Name, r.RemedyFrom, r.Remedy, r.Restored*100, r.Gain*100, r.ControlCost*100, wait, r.PredictedImpact*100)
		if r.RemedyPartial != "" {
			t.Logf("%-18s held to no bar: %s", r.Name, r.RemedyPartial)
			continue
		}
		if len(r.ControlRuns) > 0 {
			t.Logf("%-18s runs: control %v, remedied %v; second pair %v, %v", r.Name, r.ControlRuns, r.FixedRuns, r.FixedAgainRuns, r.ControlAfterRuns)
		}
		if r.RemedyFrom != lab.RemedyScenario && r.Restored < lab.RestoreBar {
			if why := r.RestoreWithinSpread(); why != "" {
				t.Logf("%-18s short of 80 %% but not judged: %s", r.Name, why)
			} else {
				failures = append(failures, fmt.Sprintf("%s: the doctor's remedy %q restored %.0f %% of the control's throughput, want 80 %%", r.Name, r.Remedy, r.Restored*100))
			}
		}
		// The estimate is held to the span of the costs measured against
		// every remedied and control run (lab.Report.EstimateOff): the
		// nearer of the two standing costs alone left a different one or
		// two of 58 16-33 points off in runs of 2026-11-28, the runs a
		// minute apart moving more than the 15 points the bar allows.
		switch {
		case r.EstimateUnheld != "":
			t.Logf("%-18s estimate held to no bar: %s", r.Name, r.EstimateUnheld)
		case r.RemedyFrom != lab.RemedyScenario && r.EstimateOff() > lab.EstimateMargin:
			failures = append(failures, fmt.Sprintf("%s: the doctor estimated %.0f %%, %.0f points off what the fault cost (%.0f %% of the remedied run's throughput, %.0f %% of the control's; runs: control %v, remedied %v)",
				r.Name, r.PredictedImpact*100, r.EstimateOff()*100, r.Gain*100, r.ControlCost*100, r.ControlRuns, r.FixedRuns))
		}
	}
	return failures
}
