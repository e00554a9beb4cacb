package observe

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
	"github.com/vishvananda/netlink"
)

// Families are the event families the doctor records by default: what its
// rules read, at a cost within 3 % of a 40 Gbit/s veth stream (make bench).
// tcp_rtt, tcp_rcvbuf, sk_limit and napi_poll are left out: tcp_info covers
// what they would add.
var Families = []string{"tcp_conn", "tcp_sendlim", "tcp_cong", "tcp_retrans", "tcp_reset", "skb_drop", "qdisc"}

// DeepFamilies are the per-packet families the doctor records: segments per
// skb, softirq time, socket call sizes and where bytes wait (tcp_stage).
// They run collect.DefaultSample of each second (record's default set does
// too) and all the time with Options.Deep (exact counts, at about four
// times the cost).
var DeepFamilies = []string{"dev_xmit", "dev_recv", "softirq", "sock_io", "tcp_stage"}

// Options say what to observe and for how long.
type Options struct {
	// Netns names the namespaces to observe; empty means this process's own
	// and every named one (iproute2's).
	Netns []string
	// Workload runs while the doctor observes; the observation ends when it
	// returns or ctx ends.
	Workload func(ctx context.Context) error
	// Trace, if set, receives the recording.
	Trace io.Writer
	// PollInterval is how often tcp_info is read (default 100 ms): sockets
	// that close between two reads keep their last reading.
	PollInterval time.Duration
	// NoKernelEvents skips the eBPF recording (it is skipped anyway without privileges).
	NoKernelEvents bool
	// Extra are event families recorded beside the doctor's own (the lab's
	// signals); per-packet ones are sampled as the doctor's are.
	Extra []string
	// Deep attaches DeepFamilies all the time rather than collect.DefaultSample of it.
	Deep bool
	// Ready, if set, is called once everything is attached and the first
	// readings are taken, just before the workload starts.
	Ready func(kernelEvents bool)
	// Timeline keeps the run's series (tcp_info and CPU readings, the
	// recording's events) for the HTML report.
	Timeline bool
	// interval is the recording's drain and sampling interval (default 1 s).
	interval time.Duration
}

// Observation is the evidence of one run and the recording behind it.
type Observation struct {
	Evidence *doctor.Evidence
	Stat     *analyze.Stat
	Summary  *analyze.Summary
	// Timeline is the run over time, with Options.Timeline.
	Timeline *timeline.Timeline
	// WorkloadErr is what the workload returned.
	WorkloadErr error
}

// watched is one observed namespace; ns is nil for the process's own.
type watched struct {
	name  string
	ns    *host.Netns
	inode uint32
	gone  bool
	// noTCPInfo is why tcp_info could not be read at the start (sock_diag's
	// modules missing): the namespace's flows then come from the recording.
	noTCPInfo error
}

func (w *watched) do(fn func() error) error {
	if w.ns == nil {
		return fn()
	}
	return w.ns.Do(fn)
}

// snapshot is what one namespace looked like at one moment.
type snapshot struct {
	counters host.Counters
	devices  []host.Device
	sysctls  map[string]string
}

// Observe measures the host while the workload runs and returns the evidence.
func Observe(ctx context.Context, opts Options) (*Observation, error) {
	if opts.PollInterval == 0 {
		opts.PollInterval = 100 * time.Millisecond
	}
	var notes []string
	spaces, err := openNamespaces(opts.Netns, &notes)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, w := range spaces {
			if w.ns != nil {
				w.ns.Close()
			}
		}
	}()
	before := map[string]*snapshot{}
	for _, w := range spaces {
		s, err := takeSnapshot(w)
		if err != nil {
			notes = append(notes, fmt.Sprintf("netns %s: %v", w.name, err))
			w.gone = true
			continue
		}
		before[w.name] = s
	}
	if probeTCPInfo(spaces) && !slices.Contains(opts.Extra, "tcp_rtt") {
		opts.Extra = append(slices.Clip(opts.Extra), "tcp_rtt")
	}
	rec, notes := startRecording(opts, notes)
	if rec != nil && !opts.Deep {
		notes = append(notes, fmt.Sprintf("segments per skb, softirq time, socket calls and where bytes wait (%s) were recorded %.0f %% of each second "+
			"and scaled to the observation (tcp_stage started bytes in it and followed them to their end); --deep records them all the time, at a higher cost",
			strings.Join(DeepFamilies, ", "), collect.DefaultSample*100))
	}
	var traceBuf bytes.Buffer
	var recDone chan error
	stopRec := make(chan struct{})
	if rec != nil {
		out := io.Writer(&traceBuf)
		if opts.Trace != nil {
			out = io.MultiWriter(&traceBuf, opts.Trace)
		}
		w, err := trace.NewWriter(out, collect.Header("skbtrace doctor"))
		if err != nil {
			rec.Close()
			return nil, err
		}
		recDone = make(chan error, 1)
		go func() {
			_, err := rec.Run(w, stopRec)
			recDone <- err
		}()
	}

	start := time.Now()
	var series *timeline.Builder
	if opts.Timeline {
		series = timeline.NewBuilder(start.UnixNano())
	}
	poller := newPoller(spaces, opts.PollInterval, series)
	pollCtx, stopPoll := context.WithCancel(ctx)
	pollDone := make(chan struct{})
	go func() { poller.run(pollCtx); close(pollDone) }()
	settings := startSettingsWatch(spaces, rec != nil)
	defer settings.stop()
	// The netfilter rules' counters, read before and after (limits_nft.go).
	nft := startNftWatch(spaces, &notes)

	// Whose time each CPU spent is sampled where this process may (root or
	// CAP_PERFMON); else it is read from the threads' times.
	sampler, sampleErr := startCPUSampler()
	if opts.Ready != nil {
		opts.Ready(rec != nil)
	}
	// The CPUs are read around the workload alone: loading and detaching
	// the BPF programs would dilute a saturated CPU's share.
	cpuBefore, err := host.ReadCPUTimes()
	if err != nil {
		if sampler != nil {
			sampler.close()
		}
		stopPoll()
		<-pollDone
		stopRecording(rec, stopRec, recDone)
		return nil, err
	}
	softBefore, _ := host.ReadSoftnet()
	var threadsBefore, threadsAfter map[int]host.ThreadTimes
	var threadsErr error
	if sampler != nil {
		sampler.enable()
	} else {
		threadsBefore, threadsErr = host.ReadThreadTimes()
	}
	// The cgroups' CPU quotas and throttling, around the workload too.
	cgroups := startCgroupWatch(250 * time.Millisecond)
	workStart := time.Now()
	workErr := opts.Workload(ctx)
	var cgroupCPU []doctor.CgroupCPU
	if cgroups != nil {
		var cgNotes []string
		cgroupCPU, cgNotes = cgroups.finish()
		notes = append(notes, cgNotes...)
	}
	var samples *CPUSamples
	if sampler != nil {
		samples, sampleErr = sampler.disable()
	}
	cpuAfter, cpuErr := host.ReadCPUTimes()
	softAfter, _ := host.ReadSoftnet()
	workSeconds := time.Since(workStart).Seconds()
	if sampler == nil {
		threadsAfter, err = host.ReadThreadTimes()
		threadsErr = cmp.Or(threadsErr, err)
	}

	stopPoll()
	<-pollDone
	poller.poll() // the final reading, after the workload
	seconds := time.Since(start).Seconds()
	if err := stopRecording(rec, stopRec, recDone); err != nil {
		notes = append(notes, "kernel event recording failed: "+err.Error())
	}
	if cpuErr != nil {
		return nil, cpuErr
	}

	ev := hostEvidence(seconds, rec != nil, cpuBefore, cpuAfter, softBefore, softAfter)
	ev.CopyRate = host.CopyRate()
	switch {
	case samples != nil:
		ev.Processes, ev.ObserverPID, ev.ProcessesSampled = SampledShares(samples, ev.CPUs), os.Getpid(), true
		if sampleErr != nil {
			notes = append(notes, sampleErr.Error()+": the processes' CPU shares may miss some samples")
		}
		if samples.Lost > 0 {
			notes = append(notes, fmt.Sprintf("%d CPU samples were lost: the processes' CPU shares are lower bounds", samples.Lost))
		}
	case threadsErr != nil:
		notes = append(notes, threadsErr.Error()+": user time on a busy CPU is judged without knowing whose it is")
	default:
		ev.Processes, ev.ObserverPID = ProcessShares(threadsBefore, threadsAfter, workSeconds, ev.CPUs), os.Getpid()
		notes = append(notes, "the processes' CPU time is charged to the CPU each thread last ran on (/proc/PID/task/*/stat): "+
			"the CPUs could not be sampled ("+sampleErr.Error()+"), so a process that moved between CPUs or ended during the observation is charged approximately or not at all")
	}
	for _, w := range spaces {
		b := before[w.name]
		if b == nil {
			continue
		}
		after, err := takeSnapshot(w)
		if err != nil {
			notes = append(notes, fmt.Sprintf("netns %s disappeared during the observation; its counters are left out", w.name))
			continue
		}
		ev.Namespaces = append(ev.Namespaces, namespaceEvidence(w, b, after))
	}
	netnsIDs(spaces, ev)
	ev.Limits = append(ev.Limits, deviceLimits(spaces, ev.CPUCount, &notes)...)
	ev.Limits = append(ev.Limits, shaperLimits(spaces, ev, &notes)...)
	ev.Limits = append(ev.Limits, queueDropLimits(spaces, &notes)...)
	ev.Limits = append(ev.Limits, devLimits(spaces, ev, &notes)...)
	ev.Flows = poller.flows(seconds, ev, &notes)
	ev.Limits = append(ev.Limits, settings.finish(ev, &notes)...)
	ev.Limits = append(ev.Limits, nft.finish(spaces, ev, &notes)...)
	ev.Limits = append(ev.Limits, wmemLimits(ev, settings.s != nil)...)
	keepCgroupsOf(ev, cgroupCPU)
	poller.notes(&notes)
	for _, w := range spaces {
		if w.noTCPInfo == nil {
			continue
		}
		if rec == nil {
			notes = append(notes, fmt.Sprintf("netns %s: %v; without kernel events none of its flows is measured", w.name, w.noTCPInfo))
		} else {
			notes = append(notes, fmt.Sprintf("netns %s: %v; its flows come from the recording (tcp_rtt samples, tcp_sendlim runs): "+
				"rates, RTT and send limits are measured there, windows, MSS and path MTU are not", w.name, w.noTCPInfo))
		}
	}

	obs := &Observation{Evidence: ev, WorkloadErr: workErr}
	if rec != nil {
		if err := joinRecording(obs, &traceBuf, spaces, series, &notes); err != nil {
			notes = append(notes, "reading back the recording: "+err.Error())
		}
	}
	if series != nil {
		nsName := map[uint32]string{}
		for _, w := range spaces {
			nsName[w.inode] = w.name
		}
		obs.Timeline = series.Build(func(ino uint32) string { return nsName[ino] })
	}
	ev.Notes = notes
	return obs, nil
}

// hostEvidence begins the evidence of a span from the host's readings at
// its two ends: kernel, mitigations, CPU and softnet shares.
func hostEvidence(seconds float64, kernelEvents bool, cpuBefore, cpuAfter []host.CPUTimes, softBefore, softAfter []host.Softnet) *doctor.Evidence {
	ev := &doctor.Evidence{Seconds: seconds, KernelEvents: kernelEvents, CPUCount: len(cpuAfter)}
	ev.Kernel = host.ReadIdentity().Kernel
	if m, err := host.ReadMitigations(host.MitigationsDir); err == nil {
		ev.Mitigations = m
	}
	ev.Softnet = softnetDelta(softBefore, softAfter)
	ev.CPUs = CPUShares(cpuBefore, cpuAfter)
	return ev
}

func takeSnapshot(w *watched) (*snapshot, error) {
	s := &snapshot{}
	err := w.do(func() (err error) {
		if s.counters, err = host.ReadCounters(); err != nil {
			return err
		}
		if s.devices, err = host.ReadDevices(); err != nil {
			return err
		}
		s.sysctls = host.ReadSysctls(host.NetSysctls)
		return nil
	})
	return s, err
}

// stopRecording ends a recording started by startRecording (nil: none).
func stopRecording(rec *collect.Recording, stop chan struct{}, done chan error) error {
	if rec == nil {
		return nil
	}
	close(stop)
	err := <-done
	rec.Close()
	return err
}

// StartRecording starts the doctor's recording for a long-running
// observer (the agent): the default families, per-packet ones sampled
// unless deep, drained (and sampled) every interval. A nil recording comes
// with a note saying why.
func StartRecording(deep bool, interval time.Duration) (*collect.Recording, []string) {
	return startRecording(Options{Deep: deep, interval: interval}, nil)
}

// startRecording starts the eBPF recording when this process may, and
// otherwise says why not in a note.
func startRecording(opts Options, notes []string) (*collect.Recording, []string) {
	if opts.NoKernelEvents {
		return nil, notes
	}
	if err := host.CheckTracingCaps(); err != nil {
		return nil, append(notes, "kernel events need root (or CAP_BPF+CAP_PERFMON): judged on tcp_info, counters and settings only ("+err.Error()+")")
	}
	// The per-packet families run by default too, attached a share of each
	// second as record's default set is, so the verdicts match --deep's.
	names := slices.Concat(Families, DeepFamilies)
	for _, name := range opts.Extra {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	sample := 1.0
	if !opts.Deep {
		sample = collect.DefaultSample
	}
	var fams []*event.Family
	for _, name := range names {
		if f, ok := event.ByName(name); ok {
			fams = append(fams, f)
		}
	}
	// Drained once a second: every 200 ms cost the stream a few percent more.
	interval := time.Second
	if opts.interval > 0 {
		interval = opts.interval
	}
	rec, err := collect.Start(collect.Options{Families: fams, Interval: interval, Sample: sample})
	if err != nil {
		return nil, append(notes, "kernel events unavailable: "+err.Error())
	}
	for _, s := range rec.Skipped {
		notes = append(notes, fmt.Sprintf("event family %s cannot run on this kernel: %v", s.Family.Name, s.Reason))
	}
	return rec, notes
}

// userHZ is the unit of /proc's CPU times on every Linux architecture.
const userHZ = 100

func softnetDelta(before, after []host.Softnet) host.Softnet {
	var d host.Softnet
	for i := range min(len(before), len(after)) {
		d.Processed += after[i].Processed - before[i].Processed
		d.Dropped += after[i].Dropped - before[i].Dropped
		d.TimeSqueeze += after[i].TimeSqueeze - before[i].TimeSqueeze
	}
	return d
}

// netnsIDs records the ids each observed namespace gave the others.
func netnsIDs(spaces []*watched, ev *doctor.Evidence) {
	fds := map[string]int{}
	for _, w := range spaces {
		if w.ns != nil {
			fds[w.name] = int(w.ns.Handle())
		} else if f, err := os.Open("/proc/self/ns/net"); err == nil {
			defer f.Close()
			fds[w.name] = int(f.Fd())
		}
	}
	for _, w := range spaces {
		ns := ev.NamespaceNamed(w.name)
		if ns == nil {
			continue
		}
		_ = w.do(func() error {
			for name, fd := range fds {
				if id, err := netlink.GetNetNsIdByFd(fd); err == nil && id >= 0 && name != w.name {
					if ns.NetnsIDs == nil {
						ns.NetnsIDs = map[string]int{}
					}
					ns.NetnsIDs[name] = id
				}
			}
			return nil
		})
	}
}

// namespaceEvidence keeps the later settings with the counters' changes.
func namespaceEvidence(w *watched, before, after *snapshot) doctor.Namespace {
	ns := doctor.Namespace{Name: w.name, Inode: w.inode, Sysctls: after.sysctls, Counters: after.counters.Sub(before.counters)}
	old := map[string]*host.Device{}
	for i := range before.devices {
		old[before.devices[i].Name] = &before.devices[i]
	}
	for _, d := range after.devices {
		if b := old[d.Name]; b != nil {
			d.Stats = d.Stats.Sub(b.Stats)
			for k, v := range d.ErrorStats {
				d.ErrorStats[k] = v - b.ErrorStats[k]
			}
			for cpu := range d.Interrupts {
				if cpu < len(b.Interrupts) {
					d.Interrupts[cpu] -= b.Interrupts[cpu]
				}
			}
			for i := range d.Qdiscs {
				for _, bq := range b.Qdiscs {
					if bq.Handle == d.Qdiscs[i].Handle && bq.Kind == d.Qdiscs[i].Kind {
						q := &d.Qdiscs[i]
						q.Packets, q.Bytes, q.Drops = q.Packets-bq.Packets, q.Bytes-bq.Bytes, q.Drops-bq.Drops
						q.Overlimits, q.Requeues = q.Overlimits-bq.Overlimits, q.Requeues-bq.Requeues
					}
				}
			}
		}
		ns.Devices = append(ns.Devices, doctor.Device{Device: d})
	}
	return ns
}

// joinRecording reads the recording back and adds what it saw to the evidence.
func joinRecording(obs *Observation, recording io.Reader, spaces []*watched, series *timeline.Builder, notes *[]string) error {
	r, err := trace.NewReader(recording)
	if err != nil {
		return err
	}
	obs.Stat, obs.Summary = analyze.NewStat(), analyze.NewSummary()
	if err := analyze.Replay(r, &event.Filter{}, obs.Summary, func(ev *event.Event) error {
		obs.Stat.Add(ev)
		if series != nil {
			series.Add(ev)
		}
		return nil
	}); err != nil {
		return err
	}
	ev := obs.Evidence
	ev.LostEvents = obs.Summary.TotalLost()
	if ev.LostEvents > 0 {
		ev.Notes = append(ev.Notes, fmt.Sprintf("%d kernel events were lost; counts from the recording are lower bounds", ev.LostEvents))
	}
	names := obs.Summary.Names
	nsName := map[uint32]string{}
	for _, w := range spaces {
		nsName[w.inode] = w.name
	}
	if recorded := recordedFlows(obs.Stat, spaces, ev); len(recorded) > 0 {
		ev.Flows = busiestFlows(append(ev.Flows, recorded...), notes)
	}
	// A connection can have several records: its socket and, after close,
	// its TIME_WAIT socket; their events add up.
	for i := range ev.Flows {
		f := &ev.Flows[i]
		limitNs := map[string]int64{}
		runs := map[string]uint64{}
		var stages *[wire.TcpStageSTAGE_MAX]wire.StageHist
		for _, c := range obs.Stat.Connections {
			if nsName[c.Netns] != f.Netns || !sameEndpoint(c.Local, f.Local) || !sameEndpoint(c.Peer, f.Peer) {
				continue
			}
			if c.Stages != nil {
				if stages == nil {
					stages = new([wire.TcpStageSTAGE_MAX]wire.StageHist)
				}
				c.Stages.AddTo(stages)
			}
			for r, n := range c.LimitNs() {
				limitNs[r] += n
			}
			for r, n := range c.LimitRuns() {
				runs[r] += n
			}
			for r, n := range c.LimitCount() {
				if f.LimitCounts == nil {
					f.LimitCounts = map[string]uint64{}
				}
				f.LimitCounts[r] += n
			}
			for st, n := range c.CongStates.Map() {
				if f.CongStates == nil {
					f.CongStates = map[string]int{}
				}
				f.CongStates[st] += n
			}
			f.TraceRetrans += c.RetransSegs
			f.ZeroWindowProbed += c.ProbedRuns
			f.Resets += c.Resets
		}
		f.Stages = stageTimes(stages)
		if len(limitNs) > 0 {
			f.LimitShares = analyze.LimitShares(limitNs)
			f.LimitMeanRunUs = map[string]uint64{}
			for r, n := range runs {
				if n > 0 {
					f.LimitMeanRunUs[r] = uint64(limitNs[r]/1000) / n
				}
			}
		}
	}
	// A sampled family's counts cover only its windows: scaled to the
	// observation, they stand for it (ratios are unchanged).
	sampled := func(family string) bool {
		return obs.Summary.Sample != nil && slices.Contains(obs.Summary.Sample.Families, family)
	}
	scale := func(family string, covered float64) float64 {
		if !sampled(family) || covered <= 0 || covered >= ev.Seconds {
			return 1
		}
		return ev.Seconds / covered
	}
	scaled := func(n uint64, by float64) uint64 { return uint64(float64(n)*by + 0.5) }
	for _, d := range obs.Stat.Devices {
		dev := ev.DeviceNamed(nsName[d.Netns], d.Name)
		if dev == nil {
			continue
		}
		if d.Xmit.Skbs > 0 {
			k := scale("dev_xmit", d.Xmit.Seconds)
			dev.Xmit = &doctor.DirUse{Skbs: scaled(d.Xmit.Skbs, k), Segs: scaled(d.Xmit.Segs, k), Bytes: scaled(d.Xmit.Bytes, k)}
		}
		if d.Recv.Skbs > 0 {
			k := scale("dev_recv", d.Recv.Seconds)
			dev.Recv = &doctor.DirUse{Skbs: scaled(d.Recv.Skbs, k), Segs: scaled(d.Recv.Segs, k), Bytes: scaled(d.Recv.Bytes, k)}
		}
	}
	for _, q := range obs.Stat.Qdiscs {
		if dev := ev.DeviceNamed(nsName[q.Netns], q.Dev); dev != nil {
			dev.QdiscBacklogMax = max(dev.QdiscBacklogMax, q.BacklogMax)
		}
	}
	for _, c := range obs.Stat.CPUs {
		if int(c.CPU) < len(ev.CPUs) && ev.Seconds > 0 {
			ev.CPUs[c.CPU].NetRx = float64(c.NetRxNs) * scale("softirq", c.NetRxSeconds) / (ev.Seconds * 1e9)
			ev.CPUs[c.CPU].NetTx = float64(c.NetTxNs) * scale("softirq", c.NetTxSeconds) / (ev.Seconds * 1e9)
		}
	}
	for _, d := range obs.Stat.Drops {
		loc := names.Symbol(d.Location)
		if loc == "" {
			loc = fmt.Sprintf("%#x", d.Location)
		}
		reason := names.DropReason(d.Reason)
		if reason == "" {
			reason = fmt.Sprint(d.Reason)
		}
		ev.Drops = append(ev.Drops, doctor.Drop{Reason: reason, Location: loc, Dev: d.Dev, Protocol: d.Protocol, Count: d.Count, Src: d.Src, Dst: d.Dst})
	}
	for _, s := range obs.Stat.SockIO {
		k := scale("sock_io", s.Seconds)
		ev.SockIO = append(ev.SockIO, doctor.SockIO{Pid: s.Pid, Comm: s.Comm, Dir: s.Dir, Calls: scaled(s.Calls, k), Bytes: scaled(s.Bytes, k)})
	}
	return nil
}

// sameEndpoint compares a recording's address with a tcp_info one: an IPv4
// peer of a dual-stack socket is IPv4-mapped in one and not in the other.
func sameEndpoint(recorded string, a netip.AddrPort) bool {
	r, err := netip.ParseAddrPort(recorded)
	return err == nil && r.Addr().Unmap() == a.Addr().Unmap() && r.Port() == a.Port()
}

// stageTimes is each stage a socket timed bytes through.
func stageTimes(stages *[wire.TcpStageSTAGE_MAX]wire.StageHist) []doctor.StageTime {
	if stages == nil {
		return nil
	}
	var out []doctor.StageTime
	for i := range stages {
		h := &stages[i]
		if h.Count == 0 {
			continue
		}
		out = append(out, doctor.StageTime{Stage: event.StageNames[i], Samples: h.Count,
			P50Us:          event.QuantileUs(h.Hist[:], event.StageBits, 0.5),
			P75Us:          event.QuantileUs(h.Hist[:], event.StageBits, 0.75),
			P99Us:          event.QuantileUs(h.Hist[:], event.StageBits, 0.99),
			MeanUs:         float64(h.SumNs) / float64(h.Count) / 1e3,
			TimeWeightedUs: event.TimeWeightedUs(h.Hist[:], event.StageBits)})
	}
	return out
}
