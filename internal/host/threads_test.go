package host

import (
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadThreadTimesSeesThisProcessWork(t *testing.T) {
	before, err := ReadThreadTimes()
	if err != nil {
		t.Fatal(err)
	}
	self, ok := before[os.Getpid()] // the main thread's id is the process id
	if !ok || self.PID != os.Getpid() || self.Comm == "" {
		t.Fatalf("thread %d: %+v among %d", os.Getpid(), self, len(before))
	}
	// Spin on a locked thread until it has run 300 ms of CPU by its own
	// clock (wall time says nothing on a busy machine): the ticks must grow.
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		for threadCPU() < 300*time.Millisecond {
		}
		after, err := ReadThreadTimes()
		if err != nil {
			t.Error(err)
		}
		var user uint64
		for _, th := range after {
			if th.PID == os.Getpid() {
				user += th.User + th.System
			}
		}
		done <- int(user)
	}()
	var was uint64
	for _, th := range before {
		if th.PID == os.Getpid() {
			was += th.User + th.System
		}
	}
	if now := <-done; uint64(now) < was+10 {
		t.Errorf("the process's CPU time went from %d to %d ticks over 300 ms of spinning", was, now)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
