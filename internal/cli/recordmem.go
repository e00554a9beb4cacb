package cli

import (
	"fmt"
	"io"
	"runtime"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/units"
)

const (
	// recordKernelPerFamily is the kernel memory a recorded family holds
	// besides the ring buffer: its programs (JIT images, their BTF and
	// line info) and its maps (docs/events.md, "Kernel maps and their
	// memory"). The memory cgroup's kernel memory for record -e all's 17
	// families was 37 MiB with the 8 MiB ring while recording on 6.18, and
	// 10 MiB for -e tcp_conn's one.
	recordKernelPerFamily = 7 << 20 / 4
	// recordGoBudget is the least the recorder's Go memory needs: its heap
	// while loading the programs, the kernel's BTF and kallsyms (14 MB
	// live for -e all), and the runtime's own.
	recordGoBudget = 20 << 20
)

// fitMemory compares what the recording needs with what its memory cgroup
// allows, refusing before anything is attached or written when it does
// not fit, and otherwise sets the Go runtime's soft limit to what the
// cgroup leaves the recorder's heap: without it the heap grows to twice
// what is live and the OOM killer ends the recording mid-way.
func (j *recordJob) fitMemory(stderr io.Writer) error {
	cg, err := host.ReadCgroupMemory()
	if err != nil {
		fmt.Fprintf(stderr, "skbtrace: warning: %v; no memory limit set\n", err)
		return nil
	}
	if cg.Limit == 0 {
		return nil
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// What others in the cgroup use: this process's own share so far is
	// within the budget.
	others := max(cg.Usage-int64(ms.Sys-ms.HeapReleased), 0)
	kernel := int64(len(j.opts.Families)) * recordKernelPerFamily
	outside := int64(j.opts.RingBytes) + kernel
	goNeed := int64(recordGoBudget)
	if j.flight != nil {
		goNeed += int64(j.flight.RingBytes)
	}
	if need := outside + goNeed; others+need > cg.Limit {
		flight := ""
		if j.flight != nil {
			flight = fmt.Sprintf(", the flight memory %s", units.Bytes(uint64(j.flight.RingBytes)))
		}
		return fmt.Errorf("recording needs about %s of memory (the kernel buffer %s, the programs and other maps of %d event families %s, the recorder's own %s%s) "+
			"and its memory cgroup %s allows %s, %s of it used by others: raise the cgroup's limit, record fewer families (-e), or lower --kernel-buffer",
			units.Bytes(uint64(need)), units.Bytes(uint64(j.opts.RingBytes)), len(j.opts.Families), units.Bytes(uint64(kernel)), units.Bytes(recordGoBudget), flight,
			cg.Dir, units.Bytes(uint64(cg.Limit)), units.Bytes(uint64(others)))
	}
	host.SetGoMemoryLimit(0, others+outside, cg)
	return nil
}
