package host

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/prometheus/procfs"
)

// ThreadTimes is one thread's CPU time so far, in USER_HZ ticks, and the CPU
// it last ran on (/proc/PID/task/TID/stat).
type ThreadTimes struct {
	PID, TID     int
	Comm         string
	User, System uint64
	CPU          int
}

// ReadThreadTimes reads every thread's times, keyed by thread id. Threads
// that exit while it reads are skipped.
func ReadThreadTimes() (map[int]ThreadTimes, error) {
	proc, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("reading thread CPU times: %w", err)
	}
	procs, err := proc.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("reading thread CPU times: %w", err)
	}
	out := map[int]ThreadTimes{}
	for _, p := range procs {
		threads, err := proc.AllThreads(p.PID)
		if err != nil {
			continue // the process exited
		}
		for _, t := range threads {
			st, err := t.Stat()
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading thread CPU times: /proc/%d/task/%d/stat: %w", p.PID, t.PID, err)
			}
			out[t.PID] = ThreadTimes{PID: p.PID, TID: t.PID, Comm: st.Comm,
				User: uint64(st.UTime), System: uint64(st.STime), CPU: int(st.Processor)}
		}
	}
	return out, nil
}
