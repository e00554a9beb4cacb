package profiler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/profile"
)

// Options say what to sample, how often and for how long.
type Options struct {
	// Duration ends the profile; with a Command, zero means when it exits.
	Duration time.Duration
	Hz       int
	CPUs     []int // empty: every online CPU
	// Command is the workload to start and profile (-- CMD).
	Command []string
	// Workload, if set, is run in this process instead of a command; the
	// profile ends when it returns.
	Workload       func(ctx context.Context) error
	Stdout, Stderr io.Writer
	SoftwareClock  bool
	Version        string
	// Ready, if set, is called once sampling runs, before the workload starts.
	Ready func(clock string, cpus []int)
}

// scanInterval is how often new processes' mappings are read: a process
// living shorter than this keeps its user frames unresolved.
const scanInterval = 200 * time.Millisecond

// Collect samples the CPUs while the workload runs (or for Duration) and
// returns the symbolized profile. It needs root (or CAP_BPF+CAP_PERFMON).
func Collect(ctx context.Context, opts Options) (*profile.Profile, error) {
	if opts.Hz <= 0 {
		return nil, errors.New("profiling: the sampling rate must be positive")
	}
	if opts.Duration <= 0 && len(opts.Command) == 0 && opts.Workload == nil {
		return nil, errors.New("profiling: give a duration (-d) or a command to profile (-- CMD)")
	}
	cpus := opts.CPUs
	if len(cpus) == 0 {
		var err error
		if cpus, err = host.OnlineCPUs(); err != nil {
			return nil, err
		}
	}
	id := host.ReadIdentity()
	p := &profile.Profile{Meta: profile.Meta{Version: opts.Version, Hostname: id.Hostname, Kernel: id.Kernel, Hz: opts.Hz,
		CPUs: cpus, Command: opts.Command}}
	p.Meta.Settings, p.Meta.Notes = host.ReadSettings()
	ksyms, err := host.LoadKallsyms()
	if err != nil {
		return nil, err
	}
	users := newUserSymbolizer()
	users.scanProcesses()

	prof, err := probe.OpenProfiler(probe.ProfilerConfig{CPUs: cpus, Hz: opts.Hz, SoftwareClock: opts.SoftwareClock})
	if err != nil {
		return nil, err
	}
	defer prof.Close()
	p.Meta.Clock = string(prof.Clock)
	if prof.TrafficErr != nil {
		p.Meta.Notes = append(p.Meta.Notes, "packets not counted: "+prof.TrafficErr.Error())
	}
	for _, n := range prof.TrafficNotes {
		p.Meta.Notes = append(p.Meta.Notes, "received packets not counted: "+n)
	}

	if opts.Ready != nil {
		opts.Ready(p.Meta.Clock, cpus)
	}
	start := time.Now()
	runErr := run(ctx, opts, users)
	prof.Stop()
	p.Meta.Seconds = time.Since(start).Seconds()
	if runErr != nil {
		return nil, runErr
	}
	users.scanProcesses()
	if err := read(p, prof, ksyms, users); err != nil {
		return nil, err
	}
	return p, nil
}

// run waits for the workload or the duration, reading new processes'
// mappings meanwhile.
func run(ctx context.Context, opts Options, users *userSymbolizer) error {
	if opts.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Duration)
		defer cancel()
	}
	done := make(chan error, 1)
	if len(opts.Command) > 0 {
		cmd := exec.CommandContext(ctx, opts.Command[0], opts.Command[1:]...)
		cmd.Stdout, cmd.Stderr = opts.Stdout, opts.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting %s: %w", opts.Command[0], err)
		}
		go func() { done <- cmd.Wait() }()
	} else if opts.Workload != nil {
		go func() { done <- opts.Workload(ctx) }()
	}
	tick := time.NewTicker(scanInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			users.scanProcesses()
		case err := <-done:
			var exit *exec.ExitError
			switch {
			case err == nil || errors.As(err, &exit):
				return nil
			case len(opts.Command) > 0:
				return fmt.Errorf("running %s: %w", opts.Command[0], err)
			}
			return fmt.Errorf("running the workload: %w", err)
		case <-ctx.Done():
			if len(opts.Command) > 0 || opts.Workload != nil {
				<-done // CommandContext kills the command; the workload sees ctx
			}
			return nil
		}
	}
}

// read takes the samples, stacks and packet counts out of the kernel and symbolizes them.
func read(p *profile.Profile, prof *probe.Profiler, ksyms *host.Kallsyms, users *userSymbolizer) error {
	raw, err := prof.Samples()
	if err != nil {
		return err
	}
	if p.Meta.Dropped, err = prof.Dropped(); err != nil {
		return err
	}
	if prof.TrafficErr == nil {
		tx, err := prof.Traffic(probe.ProfileTx)
		if err != nil {
			return err
		}
		rx, err := prof.Traffic(probe.ProfileRx)
		if err != nil {
			return err
		}
		p.Meta.Traffic = profile.Traffic{Counted: true, TxSkbs: tx.Skbs, TxPkts: tx.Segs, TxBytes: tx.Bytes,
			RxSkbs: rx.Skbs, RxPkts: rx.Segs, RxBytes: rx.Bytes}
	}
	return symbolize(p, raw, prof.Stack, ksyms, users)
}

// userKey is a user stack of one process: the same addresses mean other
// functions in another process.
type userKey struct {
	tgid uint32
	id   int32
}

// symbolize names the raw samples' frames and classifies them; stack reads
// a stack's addresses by id (each kernel stack once).
func symbolize(p *profile.Profile, raw []probe.ProfileSample, stack func(int32) ([]uint64, error), ksyms *host.Kallsyms, users *userSymbolizer) error {
	kernel := map[int32][]string{}
	type userStack struct {
		frames   []string
		leafFile string
		shallow  bool
	}
	user := map[userKey]userStack{}
	type classKey struct {
		stack int32
		idle  bool
	}
	type class struct {
		context profile.Context
		phase   profile.Phase
	}
	classes := map[classKey]class{}
	var lostStacks uint64
	fp := map[string]*[2]uint64{} // per binary: samples with a shallow user stack, all samples
	for _, r := range raw {
		s := profile.Sample{Count: r.Count, Pid: r.Key.Pid, Tgid: r.Key.Tgid, CPU: int(r.Key.Cpu), Comm: comm(r.Key.Comm)}
		if id := r.Key.KernelStack; id >= 0 {
			frames, ok := kernel[id]
			if !ok {
				addrs, err := stack(id)
				if err != nil {
					return err
				}
				for _, a := range addrs {
					name := ksyms.Func(a)
					if name == "" {
						name = "[unknown kernel]"
					}
					frames = append(frames, name)
				}
				kernel[id] = frames
			}
			s.Kernel = frames
		} else if r.Key.UserStack < 0 && r.Key.Pid != 0 {
			lostStacks += r.Count
			s.Kernel = []string{"[stack lost]"}
		}
		if id := r.Key.UserStack; id >= 0 {
			k := userKey{r.Key.Tgid, id}
			u, ok := user[k]
			if !ok {
				addrs, err := stack(id)
				if err != nil {
					return err
				}
				u.shallow = len(addrs) <= 2
				for i, a := range addrs {
					name, file := users.resolve(r.Key.Tgid, a)
					if i == 0 {
						u.leafFile = file
					}
					u.frames = append(u.frames, name)
				}
				user[k] = u
			}
			s.User = u.frames
			if u.leafFile != "" && u.leafFile[0] == '/' {
				c := fp[u.leafFile]
				if c == nil {
					c = &[2]uint64{}
					fp[u.leafFile] = c
				}
				if u.shallow {
					c[0] += r.Count
				}
				c[1] += r.Count
			}
		}
		// Classifying walks every frame against the phase rules: once per
		// kernel stack (and idle task or not) is enough.
		ck := classKey{r.Key.KernelStack, r.Key.Pid == 0}
		if c, ok := classes[ck]; ok && r.Key.KernelStack >= 0 {
			s.Context, s.Phase = c.context, c.phase
		} else {
			profile.Classify(&s)
			classes[ck] = class{s.Context, s.Phase}
		}
		p.Samples = append(p.Samples, s)
	}
	if total := p.Total(); total > 0 && lostStacks*100 > total {
		p.Meta.Notes = append(p.Meta.Notes, fmt.Sprintf("%d of %d samples lost their stack (the stack map was full or two stacks collided)", lostStacks, total))
	}
	if p.Meta.Dropped > 0 {
		p.Meta.Notes = append(p.Meta.Notes, fmt.Sprintf("%d samples dropped: the sample map was full", p.Meta.Dropped))
	}
	p.Meta.Notes = append(p.Meta.Notes, framePointerNotes(fp)...)
	return nil
}

// framePointerNotes names the binaries whose user stacks stop after a frame
// or two: built without frame pointers, the kernel cannot walk them.
func framePointerNotes(fp map[string]*[2]uint64) []string {
	var out []string
	for _, file := range slices.Sorted(maps.Keys(fp)) {
		c := fp[file]
		if c[1] >= 20 && c[0]*10 >= c[1]*8 {
			out = append(out, fmt.Sprintf("%s: %.0f %% of its user stacks are one or two frames deep: it lacks frame pointers, so its callers are unknown (rebuild with -fno-omit-frame-pointer)",
				file, 100*float64(c[0])/float64(c[1])))
		}
	}
	return out
}

func comm(b [16]int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(b[i])
	}
	return string(out)
}
