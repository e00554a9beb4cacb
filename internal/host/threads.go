package host

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("reading thread CPU times: %w", err)
	}
	out := map[int]ThreadTimes{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		tasks, err := os.ReadDir(filepath.Join("/proc", p.Name(), "task"))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "task", t.Name(), "stat"))
			if err != nil {
				continue
			}
			tt, err := ParseThreadStat(b)
			if err != nil {
				return nil, fmt.Errorf("reading thread CPU times: /proc/%d/task/%s/stat: %w", pid, t.Name(), err)
			}
			tt.PID = pid
			out[tt.TID] = tt
		}
	}
	return out, nil
}

// ParseThreadStat parses a stat line: "TID (COMM) STATE ..." where COMM may
// hold spaces and parentheses, so the fields are counted from its last ')'.
func ParseThreadStat(b []byte) (ThreadTimes, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return ThreadTimes{}, fmt.Errorf("no (comm) in %q", firstBytes(b, 64))
	}
	tid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return ThreadTimes{}, fmt.Errorf("bad thread id in %q", firstBytes(b, 64))
	}
	// After the comm, field 3 (state) is index 0: utime is field 14,
	// stime 15, processor 39.
	f := bytes.Fields(b[end+1:])
	if len(f) < 37 {
		return ThreadTimes{}, fmt.Errorf("%d fields after the comm, want at least 37", len(f))
	}
	var v [3]uint64
	for i, field := range []int{11, 12, 36} {
		if v[i], err = strconv.ParseUint(string(f[field]), 10, 64); err != nil {
			return ThreadTimes{}, fmt.Errorf("bad field %d: %w", field+3, err)
		}
	}
	return ThreadTimes{TID: tid, Comm: string(b[open+1 : end]), User: v[0], System: v[1], CPU: int(v[2])}, nil
}

func firstBytes(b []byte, n int) []byte { return b[:min(len(b), n)] }
