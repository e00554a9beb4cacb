package probe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// The traffic map's indexes (enum profile_direction in bpf/include/profile.h).
const (
	ProfileTx = 0
	ProfileRx = 1
)

// ProfileClock is the perf event samples are taken on.
type ProfileClock string

// The clocks, preferred first: cycles count only where the CPU has hardware
// counters; cpu-clock is the kernel's timer and exists everywhere.
const (
	ClockCycles ProfileClock = "cycles"
	ClockCPU    ProfileClock = "cpu-clock"
)

// ProfilerConfig says where and how often to sample.
type ProfilerConfig struct {
	CPUs []int
	Hz   int
	// SoftwareClock skips the hardware counters even where they exist.
	SoftwareClock bool
}

// Profiler is a loaded sampling program with one perf event per CPU, and the
// packet counters of the same window. Close detaches everything.
type Profiler struct {
	objs   ProfileObjects
	events []int
	links  []link.Link
	Clock  ProfileClock
	// TrafficErr says why packets are not counted (nil: they are);
	// TrafficNotes why received packets are not (the receive hook failed).
	TrafficErr   error
	TrafficNotes []string
}

// OpenProfiler loads the profiler and starts sampling.
func OpenProfiler(cfg ProfilerConfig) (*Profiler, error) {
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("raising the memlock limit: %w", err)
	}
	p := &Profiler{}
	if err := LoadProfileObjects(&p.objs, &ebpf.CollectionOptions{Cache: kernelTypes}); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("loading the profiler: %w", ErrPermission)
		}
		return nil, fmt.Errorf("loading the profiler: %w", err)
	}
	clocks := []ProfileClock{ClockCycles, ClockCPU}
	if cfg.SoftwareClock {
		clocks = clocks[1:]
	}
	var err error
	for _, c := range clocks {
		if err = p.openEvents(c, cfg); err == nil {
			p.Clock = c
			break
		}
		p.closeEvents()
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	// Transmit and receive count every device's packets; a kernel that
	// refuses the receive hook loses only the received ones.
	for i, prog := range []*ebpf.Program{p.objs.ProfileXmit, p.objs.ProfileRecv} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			err = fmt.Errorf("attaching %s: %w", prog, err)
			if i == 0 {
				p.TrafficErr = err
				break
			}
			p.TrafficNotes = append(p.TrafficNotes, err.Error())
			continue
		}
		p.links = append(p.links, l)
	}
	return p, nil
}

func (p *Profiler) openEvents(clock ProfileClock, cfg ProfilerConfig) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:   unix.PERF_ATTR_SIZE_VER5, // a size every kernel since 4.1 knows
		Sample: uint64(cfg.Hz),
		Bits:   unix.PerfBitFreq | unix.PerfBitDisabled,
	}
	if clock == ClockCycles {
		attr.Type, attr.Config = unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES
	}
	for _, cpu := range cfg.CPUs {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				return fmt.Errorf("opening %s sampling on CPU %d: %w", clock, cpu, ErrPermission)
			}
			return fmt.Errorf("opening %s sampling on CPU %d: %w", clock, cpu, err)
		}
		p.events = append(p.events, fd)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, p.objs.ProfileSample.FD()); err != nil {
			return fmt.Errorf("attaching the sampling program on CPU %d: %w", cpu, err)
		}
	}
	for i, fd := range p.events {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("starting %s sampling on CPU %d: %w", clock, cfg.CPUs[i], err)
		}
	}
	return nil
}

func (p *Profiler) closeEvents() {
	for _, fd := range p.events {
		unix.Close(fd)
	}
	p.events = nil
}

// Stop ends sampling and packet counting; the maps stay readable until Close.
func (p *Profiler) Stop() {
	p.closeEvents()
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
}

// Close stops and unloads everything; safe to call more than once.
func (p *Profiler) Close() error {
	p.Stop()
	return p.objs.Close()
}

// ProfileSample is one distinct key and how many samples it took.
type ProfileSample struct {
	Key   ProfileProfileKey
	Count uint64
}

// Samples reads the counted samples.
func (p *Profiler) Samples() ([]ProfileSample, error) {
	var out []ProfileSample
	var k ProfileProfileKey
	var v uint64
	it := p.objs.Samples.Iterate()
	for it.Next(&k, &v) {
		out = append(out, ProfileSample{k, v})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading the profile's samples: %w", err)
	}
	return out, nil
}

// Stack reads one stack's return addresses, innermost first.
func (p *Profiler) Stack(id int32) ([]uint64, error) {
	raw := make([]uint64, p.objs.Stacks.ValueSize()/8)
	if err := p.objs.Stacks.Lookup(uint32(id), raw); err != nil {
		return nil, fmt.Errorf("reading stack %d: %w", id, err)
	}
	for i, a := range raw {
		if a == 0 {
			return raw[:i], nil
		}
	}
	return raw, nil
}

// Dropped is how many samples found the samples map full.
func (p *Profiler) Dropped() (uint64, error) {
	var per []uint64
	if err := p.objs.Dropped.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading the profile's dropped samples: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Traffic sums one direction's packet counters over the CPUs.
func (p *Profiler) Traffic(dir uint32) (ProfileProfileTraffic, error) {
	var per []ProfileProfileTraffic
	var sum ProfileProfileTraffic
	if err := p.objs.Traffic.Lookup(dir, &per); err != nil {
		return sum, fmt.Errorf("reading the profile's packet counts: %w", err)
	}
	for _, t := range per {
		sum.Skbs += t.Skbs
		sum.Segs += t.Segs
		sum.Bytes += t.Bytes
	}
	return sum, nil
}
