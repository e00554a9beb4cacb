package host

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Netns.Start runs this binary again as
//
//	nsExecArg0 nsExecMarker FD NAME PATH ARGV0 ARGS...
//
// and this init, before any other code of the program, enters the network
// namespace open at FD, unshares the mount namespace, mounts the namespace's
// own /sys and execs PATH: what `ip netns exec` does, without iproute2.
const (
	nsExecArg0   = "skbtrace-netns-exec"
	nsExecMarker = "--skbtrace-enter-netns"
	// nsExecFailed is the exit status when the namespace cannot be entered
	// or the program not executed; the reason is on standard error.
	nsExecFailed = 126
)

func init() {
	if len(os.Args) < 6 || os.Args[1] != nsExecMarker {
		return
	}
	err := enterAndExec(os.Args[2], os.Args[3], os.Args[4], os.Args[5:])
	fmt.Fprintf(os.Stderr, "skbtrace: running %s in %s: %v\n", os.Args[4], os.Args[3], err)
	os.Exit(nsExecFailed)
}

// enterAndExec returns only on failure. The main goroutine stays on the
// main thread during init, so the namespaces it enters are the ones exec
// keeps.
func enterAndExec(fdArg, name, path string, argv []string) error {
	runtime.LockOSThread()
	fd, err := strconv.Atoi(fdArg)
	if err != nil {
		return fmt.Errorf("bad namespace descriptor %q", fdArg)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unsharing the mount namespace: %w", err)
	}
	// Slave, so that the mounts below never propagate to the host.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making / a slave mount: %w", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering the network namespace: %w", err)
	}
	unix.Close(fd)
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting the host's /sys: %w", err)
	}
	if err := unix.Mount(name, "/sys", "sysfs", 0, ""); err != nil {
		return fmt.Errorf("mounting the namespace's /sys: %w", err)
	}
	return unix.Exec(path, argv, os.Environ())
}
