package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// maxCPUs is the kernel's largest NR_CPUS (CONFIG_MAXSMP).
const maxCPUs = 8192

// ParseCPUList reads the kernel's CPU list format ("0-3,6,8-9").
func ParseCPUList(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("reading CPU list %q: %q is not a CPU number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("reading CPU list %q: %q is not a range", s, part)
			}
		}
		if b >= maxCPUs {
			return nil, fmt.Errorf("reading CPU list %q: CPU %d is beyond the kernel's limit of %d", s, b, maxCPUs)
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("reading CPU list %q: no CPUs", s)
	}
	return out, nil
}

// OnlineCPUs lists the CPUs the kernel runs on.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("reading the online CPUs: %w", err)
	}
	return ParseCPUList(string(b))
}
