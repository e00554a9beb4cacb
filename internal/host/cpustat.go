package host

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// CPUTimes is one CPU's time by kind, in USER_HZ ticks, as /proc/stat counts them.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Busy is everything but idle and iowait.
func (t CPUTimes) Busy() uint64 {
	return t.User + t.Nice + t.System + t.IRQ + t.SoftIRQ + t.Steal
}

// Total is all time.
func (t CPUTimes) Total() uint64 { return t.Busy() + t.Idle + t.IOWait }

// Sub is the time between two readings.
func (t CPUTimes) Sub(o CPUTimes) CPUTimes {
	return CPUTimes{t.User - o.User, t.Nice - o.Nice, t.System - o.System, t.Idle - o.Idle,
		t.IOWait - o.IOWait, t.IRQ - o.IRQ, t.SoftIRQ - o.SoftIRQ, t.Steal - o.Steal}
}

// ReadCPUTimes reads /proc/stat: per CPU, in CPU order.
func ReadCPUTimes() ([]CPUTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("reading CPU times: %w", err)
	}
	defer f.Close()
	return ParseCPUTimes(f)
}

// ParseCPUTimes parses the per-CPU lines ("cpuN ...") of /proc/stat.
func ParseCPUTimes(r io.Reader) ([]CPUTimes, error) {
	var cpus []CPUTimes
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || n < 0 || n > 1<<16 {
			return nil, fmt.Errorf("/proc/stat: bad CPU name %q", f[0])
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("/proc/stat: %s field %d: %w", f[0], i+1, err)
			}
		}
		for len(cpus) <= n {
			cpus = append(cpus, CPUTimes{})
		}
		cpus[n] = CPUTimes{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return cpus, nil
}
