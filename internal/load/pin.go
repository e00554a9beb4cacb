package load

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// pinThread locks the calling goroutine to its thread and the thread to one
// CPU. Callers never unlock: a goroutine that exits locked takes its thread
// with it, so the affinity cannot leak to other goroutines.
func pinThread(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to CPU %d: %w", cpu, err)
	}
	return nil
}
