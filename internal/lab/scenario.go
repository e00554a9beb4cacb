package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// Port is where the lab's load server listens in the receiver namespace.
const Port = 5201

// Scenario is one reproducible fault: a control run and a fault run on a
// fresh pair of namespaces, both recorded, and a verdict on the kernel
// signals that prove the fault.
type Scenario struct {
	Name   string
	Fault  string // what the fault run changes
	Expect string // the finding id the doctor should give (docs/findings.md), "" for none
	// Also are findings the doctor must report at warning or above besides
	// Expect, below it (two faults at once).
	Also []string
	// ExpectOn, where set, names the device the top finding (or one tied
	// with it in severity and impact) must be about: for a fault built
	// beside a setting the doctor rightly reports under the same id on
	// another device.
	ExpectOn func(p *Pair) string
	// Mechanism says how a variant builds its fault, unlike the lab's own
	// scenario for the same finding (a socket option instead of a sysctl ...).
	Mechanism string
	// Families are recorded during both runs.
	Families []string
	// CountRxChecksums counts, on a wire, the packets the receiving NIC's
	// driver hands GRO by their checksum state (Measurement.RxChecksums).
	CountRxChecksums bool
	// Load is the traffic of both runs; FaultLoad, if set, changes it for the fault run.
	Load      load.Options
	FaultLoad func(*load.Options)
	// Repeat measures each run that many times, the fastest standing: a
	// verdict on two runs of one state (the baseline's) is this VM's swing.
	Repeat int
	// Prepare applies to both runs; Inject turns the control into the fault.
	Prepare func(*Pair) error
	Inject  func(*Pair) error
	// During runs alongside the fault run's traffic until its context ends
	// (a CPU hog, background traffic).
	During func(ctx context.Context, p *Pair)
	// Workload, if set, is the traffic of both runs instead of the lab's
	// generator (iperf3, a script): it gets the generator's options with the
	// address, namespace and CPU filled in, and reports what it moved.
	Workload func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error)
	// Tunnel sends the load over the VXLAN overlay (Pair.AddVXLAN, set up by Prepare).
	Tunnel bool
	// ObserveRouter has the doctor watch the router namespace Prepare put
	// between the ends (netRouted) too: a fault on a host it observes.
	ObserveRouter bool
	// Reverse also measures the fault's load in the other direction, from
	// the receiver to the sender, to show an asymmetry.
	Reverse bool
	// Fix applies the doctor's remedy for the fault, and FixLoad what it has
	// the application change, for the calibration run (RunOptions.Calibrate)
	// that measures what the remedy gains against the impact the doctor
	// estimated. During does not run then (it is part of the fault), except
	// where the doctor's remedy acts on the processes During runs (it puts
	// a competing process in the idle class): they go on, remedied.
	Fix     func(*Pair) error
	FixLoad func(*load.Options)
	// FixIsApp says Fix changes the application (restarts it with the
	// control's settings): it is the workload's switch for a remedy that
	// asks the application to change.
	FixIsApp bool
	// Latency, for a fault that costs time rather than throughput (a
	// queue that holds bytes), is the wait it adds, as a run measured it:
	// the calibration reports the share of it the remedy took away.
	Latency func(m *Measurement, p *Pair) time.Duration
	// RemedyPartial says why the doctor's first remedy alone cannot
	// restore the control's throughput (a second fault stays): the
	// calibration still measures it, and CI holds it to no bar.
	RemedyPartial string
	// EstimateUnheld says why the doctor's estimate of what the fault
	// costs is not held to EstimateMargin: CI logs it beside the cost.
	EstimateUnheld string
	// Verdict compares the runs: the signal that shows the fault, and whether it did.
	Verdict func(control, fault *Measurement, p *Pair) (signal string, reproduced bool)
	// Unbuilt, if set, says from the runs why the devices did not let the
	// fault happen at all (a NIC that holds frames rather than drop them),
	// "" when they did: the scenario is then skipped, not failed.
	Unbuilt func(control, fault *Measurement, p *Pair) string
}

// Measurement is one run: the generator's result, the recording's summary,
// and the CPU time each CPU spent during it (/proc/stat).
type Measurement struct {
	Load    *load.Result
	Stat    *analyze.Stat
	Summary *analyze.Summary
	Trace   []byte
	CPU     []doctor.CPUUse
	// ReverseBps is the load's throughput in the other direction (Scenario.Reverse).
	ReverseBps float64
	// Doctor is the doctor's verdict on the run, when asked for.
	Doctor *doctor.Report
	page   []byte // the doctor's page, when RunOptions.HTMLDir asks for it
	// RingMissed is what the receiving NIC's ring-overflow counters moved
	// during the run (ethtool -S), and Interrupts its interrupts per CPU
	// (/proc/interrupts), on a wire.
	RingMissed uint64
	Interrupts []uint64
	// RxChecksums are the receiving NIC's packets by checksum state, with
	// Scenario.CountRxChecksums.
	RxChecksums RxChecksums
}

// cpuBusy is the share of a CPU's time it was busy during the run.
func (m *Measurement) cpuBusy(cpu int) float64 {
	if cpu >= len(m.CPU) {
		return 0
	}
	return m.CPU[cpu].Busy()
}

// cpuSaturated is the busy share from which a CPU limits a run by itself.
const cpuSaturated = 0.9

// busiestCPU is the CPU busiest during the run, and its busy share.
func (m *Measurement) busiestCPU() (int, float64) {
	cpu, busy := 0, 0.0
	for i, u := range m.CPU {
		if u.Busy() > busy {
			cpu, busy = i, u.Busy()
		}
	}
	return cpu, busy
}

// RunOptions change how a scenario runs.
type RunOptions struct {
	// Keep leaves the namespaces in place to inspect them.
	Keep bool
	// Doctor observes the fault run with the doctor and reports its verdict.
	Doctor bool
	// Deep has the doctor record the per-packet families all the time.
	Deep bool
	// Calibrate runs the fault's load once more with the doctor's remedy
	// applied (Scenario.Fix, FixLoad), where the scenario has one.
	Calibrate bool
	// HTMLDir, with Doctor, receives the doctor's page of the fault run as
	// NAME.html.
	HTMLDir string
	// TraceDir receives the fault run's recording as NAME.trace.
	TraceDir string
	// Wire names two devices cabled to each other, sender's first, to run
	// on instead of a veth pair (NewWirePair): NICs, or a guest's emulated ones.
	Wire []string
	// Peer, with Doctor, runs an agent in the receiver's namespace and the
	// doctor on the sender's alone, joining the agent's evidence (--peer).
	Peer bool
}

// Run performs the scenario. The namespaces are removed when it returns,
// whatever happens, unless keep is set (to inspect them). A scenario that
// needs a program this host lacks (tc, ethtool, nft, iperf3, python3, ping)
// is reported skipped with the program's name.
func (s *Scenario) Run(ctx context.Context, opts RunOptions) (*Report, error) {
	start := time.Now()
	rep, err := s.perform(ctx, opts, start)
	if ee := (*exec.Error)(nil); errors.As(err, &ee) && errors.Is(ee.Err, exec.ErrNotFound) {
		return &Report{Name: s.Name, Fault: s.Fault, Expect: s.Expect, Seconds: time.Since(start).Seconds(),
			Skipped: fmt.Sprintf("needs %s, which is not installed here", ee.Name)}, nil
	}
	return rep, err
}

func (s *Scenario) perform(ctx context.Context, opts RunOptions, start time.Time) (rep *Report, err error) {
	pair, done, err := setUp(ctx, opts.Wire)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := done(opts.Keep); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if s.Prepare != nil {
		if err := s.Prepare(pair); err != nil {
			if nb := (*NotBuildable)(nil); errors.As(err, &nb) {
				return &Report{Name: s.Name, Fault: s.Fault, Expect: s.Expect, Skipped: nb.Reason, Seconds: time.Since(start).Seconds()}, nil
			}
			return nil, fmt.Errorf("%s: preparing: %w", s.Name, err)
		}
	}
	// A calibration compares the remedied run with the control: each is
	// the best of calibrationRuns, as single runs here swing up to 2x,
	// for a fault there is a remedy for (noise runs have none).
	runs := s.Repeat
	if opts.Calibrate && (s.Fix != nil || s.FixLoad != nil) {
		runs = calibrationRuns
	}
	controlRuns, err := s.measureBest(ctx, pair, s.Load, RunOptions{}, runs)
	if err != nil {
		return nil, fmt.Errorf("%s: control run: %w", s.Name, err)
	}
	control := controlRuns.best
	if s.Inject != nil {
		if err := s.Inject(pair); err != nil {
			// A device may refuse a setting it lists as changeable.
			if nb := (*NotBuildable)(nil); errors.As(err, &nb) {
				return &Report{Name: s.Name, Fault: s.Fault, Expect: s.Expect, Skipped: nb.Reason, Seconds: time.Since(start).Seconds(),
					ControlBps: control.Load.Bps}, nil
			}
			return nil, fmt.Errorf("%s: injecting the fault: %w", s.Name, err)
		}
	}
	faultLoad := s.Load
	if s.FaultLoad != nil {
		s.FaultLoad(&faultLoad)
	}
	faultCtx, stopDuring := context.WithCancel(ctx)
	if s.During != nil {
		go s.During(faultCtx, pair)
	}
	faultRuns, err := s.measureBest(ctx, pair, faultLoad, opts, s.Repeat)
	fault := faultRuns.best
	defer stopDuring()
	if !opts.Calibrate {
		stopDuring()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: fault run: %w", s.Name, err)
	}
	if opts.HTMLDir != "" {
		if err := os.WriteFile(filepath.Join(opts.HTMLDir, s.Name+".html"), fault.page, 0o644); err != nil {
			return nil, fmt.Errorf("writing the doctor's page: %w", err)
		}
	}
	if opts.TraceDir != "" {
		if err := os.WriteFile(filepath.Join(opts.TraceDir, s.Name+".trace"), fault.Trace, 0o644); err != nil {
			return nil, fmt.Errorf("writing the fault run's trace: %w", err)
		}
	}
	if s.Reverse {
		if fault.ReverseBps, err = reverse(ctx, pair, faultLoad); err != nil {
			return nil, fmt.Errorf("%s: reverse run: %w", s.Name, err)
		}
	}
	var fixedRuns series
	var remedy calibration
	var remedyFailed string
	if opts.Calibrate {
		remedy = s.remedyFor(fault.Doctor)
		if !remedy.onProcesses {
			stopDuring()
		}
		if remedy.From != "" {
			// A remedy that cannot be applied, or breaks the load, is
			// this scenario's result, not the end of the others'.
			if fixedRuns, err = s.calibrate(ctx, pair, faultLoad, remedy); err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%s: calibration run: %w", s.Name, err)
				}
				remedyFailed = err.Error()
			}
		}
	}
	if s.Unbuilt != nil {
		if why := s.Unbuilt(control, fault, pair); why != "" {
			return &Report{Name: s.Name, Fault: s.Fault, Expect: s.Expect, Skipped: why, Seconds: time.Since(start).Seconds(),
				ControlBps: control.Load.Bps, FaultBps: fault.Load.Bps}, nil
		}
	}
	signal, ok := s.Verdict(control, fault, pair)
	rep = &Report{ReverseBps: fault.ReverseBps,
		Name: s.Name, Fault: s.Fault, Expect: s.Expect,
		ControlBps: control.Load.Bps, FaultBps: fault.Load.Bps,
		ControlOps: control.Load.OpsPerSec, FaultOps: fault.Load.OpsPerSec,
		Signal: signal, Reproduced: ok, Seconds: time.Since(start).Seconds(),
	}
	if fault.Doctor != nil {
		rep.Doctor = verdictOf(s, fault.Doctor, pair)
	}
	if remedyFailed != "" {
		rep.Remedy, rep.RemedyFrom, rep.PredictedImpact, rep.RemedyFailed = remedy.Text, remedy.From, remedy.Impact, remedyFailed
	}
	rep.RunsInOps = faultLoad.Mode == load.RR
	rep.ControlRuns, rep.FaultRuns = manyRuns(controlRuns), manyRuns(faultRuns)
	if fixed := fixedRuns.best; fixed != nil {
		rep.FixedBps, rep.FixedOps, rep.FixedRuns = fixed.Load.Bps, fixed.Load.OpsPerSec, manyRuns(fixedRuns)
		rep.Remedy, rep.RemedyFrom, rep.PredictedImpact, rep.RemedyPartial = remedy.Text, remedy.From, remedy.Impact, s.RemedyPartial
		rep.EstimateUnheld = s.EstimateUnheld
		rep.Restored = restoredShare(faultLoad, fixed, control)
		if rep.Restored < RestoreBar {
			s.confirmRestored(ctx, pair, rep, remedy, faultLoad, stopDuring)
		}
		rep.Gain = costShare(faultLoad, fault, fixed)
		rep.ControlCost = costShare(faultLoad, fault, control)
		if s.Latency != nil {
			if before := s.Latency(fault, pair); before > 0 {
				rep.LatencyGain = max(0, 1-float64(s.Latency(fixed, pair))/float64(before))
			}
		}
	}
	return rep, nil
}

// setUp builds a fresh pair (on the wire's devices when given) emulating two hosts, with the load server
// running in the receiver namespace. done stops the server and, unless keep,
// removes the namespaces.
func setUp(ctx context.Context, wire []string) (p *Pair, done func(keep bool) error, err error) {
	if len(wire) == 2 {
		p, err = NewWirePair(wire[0], wire[1])
	} else {
		p, err = NewPair()
	}
	if err != nil {
		return nil, nil, err
	}
	twoHosts := runtime.NumCPU() >= 2
	if twoHosts {
		err = p.TwoHosts()
	}
	var stop func()
	if err == nil {
		stop, err = startServer(ctx, p, twoHosts)
	}
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return p, func(keep bool) error {
		stop()
		if keep {
			return nil
		}
		return p.Close()
	}, nil
}

// startServer runs the load server in the receiver namespace until the
// returned stop is called; pinned to CPU 1 for the two-hosts emulation.
func startServer(ctx context.Context, p *Pair, pin bool) (stop func(), err error) {
	return serveIn(ctx, p.Receiver, pin, 1)
}

// serveIn runs a load server on every address of a namespace (its veth's
// and a tunnel's), pinned to cpu for the two-hosts emulation.
func serveIn(ctx context.Context, ns *host.Netns, pin bool, cpu int) (stop func(), err error) {
	var srv *load.Server
	addr := fmt.Sprintf("0.0.0.0:%d", Port)
	if err := ns.Do(func() (err error) {
		srv, err = load.Listen(addr)
		return err
	}); err != nil {
		return nil, err
	}
	if pin {
		srv.PinTo(cpu)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	return func() { cancel(); <-done }, nil
}

// reverse runs the load from the receiver namespace to a server in the
// sender namespace, CPUs swapped, and returns its throughput.
func reverse(ctx context.Context, p *Pair, o load.Options) (float64, error) {
	pin := runtime.NumCPU() >= 2
	stop, err := serveIn(ctx, p.Sender, pin, 0)
	if err != nil {
		return 0, err
	}
	defer stop()
	o.Addr = fmt.Sprintf("%s:%d", SenderAddr.Addr(), Port)
	o.DialNetns = p.Receiver.Name
	o.PinCPU, o.CPU = pin, 1
	res, err := load.Run(ctx, o, nil)
	if err != nil {
		return 0, err
	}
	return res.Bps, nil
}

// measure records the families while the load runs from the sender
// namespace; opts.Doctor observes the run with the doctor as well.
func (s *Scenario) measure(ctx context.Context, p *Pair, o load.Options, opts RunOptions) (*Measurement, error) {
	o.Addr = fmt.Sprintf("%s:%d", ReceiverAddr.Addr(), Port)
	if s.Tunnel {
		o.Addr = fmt.Sprintf("%s:%d", ReceiverTunnelAddr.Addr(), Port)
	}
	o.DialNetns = p.Sender.Name
	if runtime.NumCPU() >= 2 {
		o.PinCPU, o.CPU = true, 0 // the sending host's CPU, see Pair.TwoHosts
	}
	if p.Wire {
		before, err := readDevice(p.Receiver, p.ReceiverDev)
		if err != nil {
			return nil, err
		}
		var csums *rxCsumCounter
		if s.CountRxChecksums {
			if csums, err = countRxChecksums(); err != nil {
				return nil, err
			}
			defer csums.Close()
		}
		m, err := s.measureOn(ctx, p, o, opts)
		if err != nil {
			return nil, err
		}
		after, err := readDevice(p.Receiver, p.ReceiverDev)
		if err != nil {
			return nil, err
		}
		if csums != nil {
			inode, err := p.Receiver.Inode()
			if err != nil {
				return nil, err
			}
			if m.RxChecksums, err = csums.device(inode, uint32(after.Index)); err != nil {
				return nil, err
			}
		}
		m.RingMissed = ringMissed(after) - ringMissed(before)
		for cpu, n := range after.Interrupts {
			if cpu < len(before.Interrupts) {
				n -= before.Interrupts[cpu]
			}
			m.Interrupts = append(m.Interrupts, n)
		}
		return m, nil
	}
	return s.measureOn(ctx, p, o, opts)
}

// measureOn is measure's run once the load's options are set.
func (s *Scenario) measureOn(ctx context.Context, p *Pair, o load.Options, opts RunOptions) (*Measurement, error) {
	if opts.Doctor {
		return s.measureWithDoctor(ctx, p, o, opts)
	}
	fams, required, err := collect.Select(s.Families)
	if err != nil {
		return nil, err
	}
	rec, err := collect.Start(collect.Options{Families: fams, Required: required, Interval: 200 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, collect.Header("skbtrace lab run "+s.Name))
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	recErr := make(chan error, 1)
	go func() {
		_, err := rec.Run(w, stop)
		recErr <- err
	}()
	cpuBefore, err := host.ReadCPUTimes()
	if err != nil {
		return nil, err
	}
	res, lerr := s.run(ctx, p, o)
	cpuAfter, cerr := host.ReadCPUTimes()
	close(stop)
	if err := <-recErr; err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	if lerr != nil {
		return nil, lerr
	}
	if cerr != nil {
		return nil, cerr
	}
	m := &Measurement{Load: res, Stat: analyze.NewStat(), Summary: analyze.NewSummary(), Trace: buf.Bytes(),
		CPU: observe.CPUShares(cpuBefore, cpuAfter)}
	r, err := trace.NewReader(bytes.NewReader(m.Trace))
	if err != nil {
		return nil, err
	}
	if err := analyze.Replay(r, &event.Filter{}, m.Summary, func(ev *event.Event) error { m.Stat.Add(ev); return nil }); err != nil {
		return nil, err
	}
	return m, nil
}

// measureWithDoctor runs the load under the doctor's observation of both
// namespaces, as a user would run it (per-packet families sampled unless
// deep), recording the scenario's families beside the doctor's.
func (s *Scenario) measureWithDoctor(ctx context.Context, p *Pair, o load.Options, opts RunOptions) (*Measurement, error) {
	var buf bytes.Buffer
	var res *load.Result
	watched := []string{p.Sender.Name, p.Receiver.Name}
	if r := netRouter(p); s.ObserveRouter && r != nil {
		watched = append(watched, r.ns.Name)
	}
	var peer *labAgent
	if opts.Peer {
		var err error
		if peer, err = startLabAgent(ctx, p); err != nil {
			return nil, err
		}
		defer peer.stop()
		watched = watched[:1]
	}
	start := time.Now()
	obs, err := observe.Observe(ctx, observe.Options{
		Netns: watched, Extra: s.Families, Trace: &buf, Deep: opts.Deep, Timeline: opts.HTMLDir != "",
		Workload: func(ctx context.Context) (err error) {
			res, err = s.run(ctx, p, o)
			return err
		},
	})
	if err == nil && peer != nil {
		peer.join(ctx, obs.Evidence, start)
	}
	if err != nil {
		return nil, err
	}
	if obs.WorkloadErr != nil {
		return nil, obs.WorkloadErr
	}
	if obs.Stat == nil {
		return nil, fmt.Errorf("the doctor's recording failed: %s", strings.Join(obs.Evidence.Notes, "; "))
	}
	rep := doctor.Diagnose(obs.Evidence)
	var page bytes.Buffer
	if opts.HTMLDir != "" {
		if err := rep.WriteHTML(&page, obs.Timeline, "skbtrace lab "+s.Name); err != nil {
			return nil, err
		}
	}
	return &Measurement{Load: res, Stat: obs.Stat, Summary: obs.Summary, Trace: buf.Bytes(), CPU: obs.Evidence.CPUs,
		Doctor: rep, page: page.Bytes()}, nil
}

// run is the scenario's traffic: its Workload, or the lab's generator.
func (s *Scenario) run(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	if s.Workload != nil {
		return s.Workload(ctx, p, o)
	}
	return load.Run(ctx, o, nil)
}

// sender finds the load's data connection as its sender saw it: of the
// connections to the receiver (any port: a variant's server may not be the
// lab's), the one with the most send decisions.
func (m *Measurement) sender() *analyze.ConnStat {
	var best *analyze.ConnStat
	peers := []string{ReceiverAddr.Addr().String(), ReceiverTunnelAddr.Addr().String()}
	for _, c := range m.Stat.Connections {
		host, _, _ := strings.Cut(c.Peer, ":")
		if !slices.Contains(peers, host) {
			continue
		}
		if best == nil || sum(c.LimitCount()) > sum(best.LimitCount()) {
			best = c
		}
	}
	return best
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// limitShare is a send-limit reason's share of the sender's time.
func (m *Measurement) limitShare(reason string) float64 {
	c := m.sender()
	if c == nil {
		return 0
	}
	return c.LimitShares()[reason]
}

// device finds a device's statistics by name.
func (m *Measurement) device(name string) *analyze.DevStat {
	for _, d := range m.Stat.Devices {
		if d.Name == name {
			return d
		}
	}
	return &analyze.DevStat{Name: name}
}

// drops counts skb_drop events of one reason, by its name in the trace.
func (m *Measurement) drops(reason string) uint64 {
	var n uint64
	for _, d := range m.Stat.Drops {
		name := m.Summary.Names.DropReason(d.Reason)
		// Kernels before 5.17 give no reason: a netfilter drop is known by where it happens.
		if name == collect.NoReason && reason == "NETFILTER_DROP" &&
			strings.HasPrefix(m.Summary.Names.Symbol(d.Location), "nf_hook_slow") {
			name = reason
		}
		if name == reason {
			n += d.Count
		}
	}
	return n
}
