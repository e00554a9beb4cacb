package host

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netns is a named network namespace. Close or Delete releases it.
type Netns struct {
	Name   string
	handle netns.NsHandle
}

// OpenNetns opens an existing named namespace (iproute2's, under /run/netns).
func OpenNetns(name string) (*Netns, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", name, err)
	}
	return &Netns{Name: name, handle: h}, nil
}

// Handle is the namespace's file descriptor, for netlink.
func (n *Netns) Handle() netns.NsHandle { return n.handle }

// Close releases the handle; the namespace stays.
func (n *Netns) Close() error { return n.handle.Close() }

// NewNetns creates a named namespace (bind-mounted under /run/netns, so
// iproute2 sees it) without moving the calling goroutine's thread into it.
func NewNetns(name string) (*Netns, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the new namespace; never let it run Go code again.
		runtime.Goexit()
	}
	return &Netns{Name: name, handle: h}, nil
}

// Do runs fn on an OS thread inside the namespace. Sockets created by fn
// stay in the namespace after Do returns and may be used from any goroutine.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	// A fresh goroutine whose thread is discarded if it cannot return to
	// the original namespace, so no other goroutine inherits it.
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("reading the current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(n.handle); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", n.Name, err)
			return
		}
		errc <- fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return <-errc
}

// Inode identifies the namespace in kernel events.
func (n *Netns) Inode() (uint32, error) {
	var st fileInfo
	if err := st.stat(int(n.handle)); err != nil {
		return 0, fmt.Errorf("reading the inode of network namespace %s: %w", n.Name, err)
	}
	return st.ino, nil
}

// Delete removes the namespace; its devices go with it.
func (n *Netns) Delete() error {
	n.handle.Close()
	if err := netns.DeleteNamed(n.Name); err != nil {
		return fmt.Errorf("deleting network namespace %s: %w", n.Name, err)
	}
	return nil
}

// Start starts cmd inside the namespace, as `ip netns exec` would but
// without iproute2: this binary is started again (nsexec.go), enters the
// namespace and a mount namespace of its own where /sys is mounted afresh
// (sysfs shows the devices of the namespace that mounted it), and execs
// cmd's program, which keeps cmd's PID. Namespaces are entered in that
// child only: no thread of this process changes its own, so nothing here
// can hold the namespace alive after cmd ends. Wait for cmd as usual.
func (n *Netns) Start(cmd *exec.Cmd) error {
	name := filepath.Base(cmd.Path)
	if cmd.Err != nil {
		return fmt.Errorf("starting %s in %s: %w", name, n.Name, cmd.Err)
	}
	fd, err := unix.Dup(int(n.handle))
	if err != nil {
		return fmt.Errorf("starting %s in %s: duplicating the namespace's handle: %w", name, n.Name, err)
	}
	nsFile := os.NewFile(uintptr(fd), "netns:"+n.Name)
	defer nsFile.Close()
	// The child finds the namespace at the descriptor after cmd's own.
	path, args, extra := cmd.Path, cmd.Args, cmd.ExtraFiles
	cmd.ExtraFiles = append(slices.Clip(extra), nsFile)
	childFd := 2 + len(cmd.ExtraFiles)
	cmd.Path = "/proc/self/exe"
	cmd.Args = append([]string{nsExecArg0, nsExecMarker, strconv.Itoa(childFd), n.Name, path}, args...)
	err = cmd.Start()
	// cmd reads as the caller made it again (String, error messages).
	cmd.Path, cmd.Args, cmd.ExtraFiles = path, args, extra
	if err != nil {
		return fmt.Errorf("starting %s in %s: %w", name, n.Name, err)
	}
	return nil
}

// Output runs cmd inside the namespace and returns its standard output; on
// failure the error carries what it wrote to standard error.
func (n *Netns) Output(cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := n.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s in %s: %w: %s", strings.Join(cmd.Args, " "), n.Name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// Run runs a command (tc, ethtool, nft, ...) inside the namespace and
// returns its combined output.
func (n *Netns) Run(name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := n.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n.Name, err, out.String())
	}
	return out.String(), nil
}
