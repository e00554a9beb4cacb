package host

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Identity is what a trace header records about the host.
type Identity struct {
	Hostname, Kernel, Machine string
	CPUs                      int
}

// ReadIdentity reads uname and the CPU count.
func ReadIdentity() Identity {
	var u unix.Utsname
	id := Identity{CPUs: runtime.NumCPU()}
	id.Hostname, _ = os.Hostname()
	if unix.Uname(&u) == nil {
		id.Kernel = unix.ByteSliceToString(u.Release[:])
		id.Machine = unix.ByteSliceToString(u.Machine[:])
	}
	return id
}

// ClockAnchor reads CLOCK_BOOTTIME (the BPF event clock) and CLOCK_REALTIME
// as close together as possible: the boot time is the midpoint of two reads
// taken around the wall-clock read.
func ClockAnchor() (bootNs uint64, wallNs int64) {
	var b1, w, b2 unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &b1)
	unix.ClockGettime(unix.CLOCK_REALTIME, &w)
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &b2)
	return uint64((b1.Nano() + b2.Nano()) / 2), w.Nano()
}

// BootNow is the current CLOCK_BOOTTIME in nanoseconds.
func BootNow() uint64 {
	var t unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &t)
	return uint64(t.Nano())
}
