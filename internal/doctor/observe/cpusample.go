package observe

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
)

// SampleHz is how often the CPU sampler asks each CPU what it runs: off the
// timer tick's multiples, so no periodic work hides between samples.
const SampleHz = 99

// ringPages is each CPU's sample ring (a 24-byte sample): drained every
// sampleDrain, it holds 40 s of samples at SampleHz.
const (
	ringPages   = 64
	sampleDrain = 500 * time.Millisecond
)

// SampleKey is what ran in one sample: a process on a CPU, in user space
// (or a guest) or in the kernel.
type SampleKey struct {
	PID, CPU int
	User     bool
}

// CPUSamples are the samples of an observation by what ran; Total counts
// every sample of each CPU, the idle task's too, so a count over it is a
// share of that CPU's time.
type CPUSamples struct {
	Counts map[SampleKey]uint64
	Total  map[int]uint64
	Comms  map[int]string
	Lost   uint64
}

func newCPUSamples() *CPUSamples {
	return &CPUSamples{Counts: map[SampleKey]uint64{}, Total: map[int]uint64{}, Comms: map[int]string{}}
}

// The perf record layout the sampler asks for (sample_type TID|CPU):
// header{type u32, misc u16, size u16}, pid u32, tid u32, cpu u32, res u32.
const (
	perfHeaderSize   = 8
	perfSampleSize   = perfHeaderSize + 16
	perfCommFixedLen = perfHeaderSize + 8
)

// ParsePerfRecords adds a perf ring's records (samples, lost-sample
// counts, exec'd programs' names) to s.
func (s *CPUSamples) ParsePerfRecords(b []byte) error {
	for len(b) > 0 {
		if len(b) < perfHeaderSize {
			return fmt.Errorf("a perf record's header cut at %d bytes", len(b))
		}
		typ, misc, size := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint16(b[4:]), int(binary.LittleEndian.Uint16(b[6:]))
		if size < perfHeaderSize || size > len(b) {
			return fmt.Errorf("a perf record of %d bytes where %d remain", size, len(b))
		}
		rec := b[:size]
		b = b[size:]
		switch typ {
		case unix.PERF_RECORD_SAMPLE:
			if size < perfSampleSize {
				return fmt.Errorf("a perf sample of %d bytes, want %d", size, perfSampleSize)
			}
			pid, cpu := int(binary.LittleEndian.Uint32(rec[8:])), int(binary.LittleEndian.Uint32(rec[16:]))
			s.Total[cpu]++
			if pid == 0 {
				continue // the idle task
			}
			s.Counts[SampleKey{PID: pid, CPU: cpu, User: userMode(misc)}]++
		case unix.PERF_RECORD_LOST:
			if size >= perfHeaderSize+16 {
				s.Lost += binary.LittleEndian.Uint64(rec[16:])
			}
		case unix.PERF_RECORD_COMM:
			if size > perfCommFixedLen {
				pid, tid := int(binary.LittleEndian.Uint32(rec[8:])), int(binary.LittleEndian.Uint32(rec[12:]))
				if comm, _, _ := strings.Cut(string(rec[perfCommFixedLen:]), "\x00"); pid == tid && comm != "" {
					s.Comms[pid] = comm
				}
			}
		}
	}
	return nil
}

// userMode says whether a sample interrupted user space; a guest's time,
// its kernel's too, is user time in /proc/stat as well.
func userMode(misc uint16) bool {
	switch misc & unix.PERF_RECORD_MISC_CPUMODE_MASK {
	case unix.PERF_RECORD_MISC_USER, unix.PERF_RECORD_MISC_GUEST_USER, unix.PERF_RECORD_MISC_GUEST_KERNEL:
		return true
	}
	return false
}

// cpuSampler samples every online CPU on the kernel's cpu-clock: each
// sample names the process running at that moment on that CPU, so a
// process is charged on each CPU for the time it ran there, wherever it
// migrated, and one that started and ended within the observation counts.
type cpuSampler struct {
	rings   []perfRing
	mu      sync.Mutex
	samples *CPUSamples
	err     error
	stop    chan struct{}
	done    chan struct{}
}

// perfRing is one CPU's perf event and its mapped ring.
type perfRing struct {
	fd   int
	mem  []byte
	meta *unix.PerfEventMmapPage
	data []byte
	buf  []byte
}

// startCPUSampler opens a disabled cpu-clock event on every online CPU;
// enable starts them all. It needs root (or CAP_PERFMON).
func startCPUSampler() (*cpuSampler, error) {
	cpus, err := host.OnlineCPUs()
	if err != nil {
		return nil, err
	}
	s := &cpuSampler{samples: newCPUSamples(), stop: make(chan struct{}), done: make(chan struct{})}
	page := os.Getpagesize()
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: SampleHz,
			Sample_type: unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_CPU,
			Bits:        unix.PerfBitDisabled | unix.PerfBitFreq | unix.PerfBitComm}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("sampling CPU %d on cpu-clock: %w", cpu, err)
		}
		mem, err := unix.Mmap(fd, 0, (1+ringPages)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			s.close()
			return nil, fmt.Errorf("mapping CPU %d's sample ring: %w", cpu, err)
		}
		s.rings = append(s.rings, perfRing{fd: fd, mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])), data: mem[page:]})
	}
	return s, nil
}

// enable starts sampling and draining the rings.
func (s *cpuSampler) enable() {
	for _, r := range s.rings {
		unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_ENABLE, 0)
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleDrain)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.drain()
			}
		}
	}()
}

// disable stops sampling and returns the samples; the sampler is closed.
func (s *cpuSampler) disable() (*CPUSamples, error) {
	for _, r := range s.rings {
		unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	close(s.stop)
	<-s.done
	s.drain()
	s.close()
	return s.samples, s.err
}

func (s *cpuSampler) close() {
	for _, r := range s.rings {
		unix.Munmap(r.mem)
		unix.Close(r.fd)
	}
	s.rings = nil
}

// drain reads every ring, and the names of processes seen for the first
// time while they still run.
func (s *cpuSampler) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.rings {
		if err := s.samples.ParsePerfRecords(s.rings[i].read()); err != nil && s.err == nil {
			s.err = fmt.Errorf("reading CPU samples: %w", err)
		}
	}
	for k := range s.samples.Counts {
		if _, ok := s.samples.Comms[k.PID]; !ok {
			s.samples.Comms[k.PID] = readComm(k.PID)
		}
	}
}

// readComm is a process's name, empty once it is gone.
func readComm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// read copies the records between the ring's tail and head and frees them.
func (r *perfRing) read() []byte {
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := r.meta.Data_tail
	if head == tail {
		return nil
	}
	size := uint64(len(r.data))
	r.buf = r.buf[:0]
	for t := tail; t < head; {
		off := t % size
		n := min(head-t, size-off)
		r.buf = append(r.buf, r.data[off:off+n]...)
		t += n
	}
	atomic.StoreUint64(&r.meta.Data_tail, head)
	return r.buf
}
