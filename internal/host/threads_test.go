package host

import (
	"os"
	"runtime"
	"testing"
	"time"
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
	// Spin 300 ms on a locked thread: its user time must grow.
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
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
