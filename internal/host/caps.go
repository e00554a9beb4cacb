package host

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability numbers from linux/capability.h; CAP_BPF and CAP_PERFMON split
// from CAP_SYS_ADMIN in 5.8, which still grants both.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// MissingTracingCaps names the capabilities loading and attaching tracing
// programs needs that this process lacks, or nil when it has them.
func MissingTracingCaps() ([]string, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("reading process capabilities: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(capSysAdmin) {
		return nil, nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return missing, nil
}

// CheckTracingCaps returns one clear error when tracing is not allowed.
func CheckTracingCaps() error {
	missing, err := MissingTracingCaps()
	if err != nil || len(missing) == 0 {
		return err
	}
	return fmt.Errorf("tracing needs root or CAP_BPF+CAP_PERFMON; this process lacks %s", strings.Join(missing, " and "))
}
