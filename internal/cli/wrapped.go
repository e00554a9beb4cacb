package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// endGrace is how long a wrapped command has to exit on SIGTERM before it
// is killed: iperf3 prints its summary well within it.
const endGrace = 2 * time.Second

// wrappedCmd is the command record and live run after --. It never
// outlives them: end stops it when the recording ends first, and a
// skbtrace killed outright takes it along (Pdeathsig).
type wrappedCmd struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the command has been waited for
	err  error         // its wait error, set before done is closed
	// ended says skbtrace ended it: its exit is then no failure of its
	// own, as the doctor reports a command it stopped.
	ended bool
}

// startWrapped starts argv with its output on out, its input stdin.
func startWrapped(argv []string, stdin io.Reader, out io.Writer) (*wrappedCmd, error) {
	w := &wrappedCmd{name: argv[0], done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked exits, not the
		// process, and Go ends threads it no longer needs: this one stays
		// locked to its goroutine until the command has been waited for
		// (the lab's loops died early without it, commit 9cfa867).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		// A child it left holding out must not keep Wait from returning.
		cmd.WaitDelay = endGrace
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("starting %s: %w", argv[0], err)
			close(w.done)
			return
		}
		w.cmd = cmd
		started <- nil
		w.err = cmd.Wait()
		close(w.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return w, nil
}

// Done is closed when the command has exited.
func (w *wrappedCmd) Done() <-chan struct{} { return w.done }

// end stops the command if it still runs: SIGTERM, then SIGKILL after
// grace; it returns once the command has been waited for, saying on
// stderr what it did. Its exit is then no failure, even one just before
// (Ctrl-C reaches it from the terminal too). Calling it again does nothing.
func (w *wrappedCmd) end(grace time.Duration, stderr io.Writer) {
	w.ended = true
	select {
	case <-w.done:
		return
	default:
	}
	pid := w.cmd.Process.Pid
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		fmt.Fprintf(stderr, "skbtrace: ending %s (pid %d): %v\n", w.name, pid, err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-w.done:
		fmt.Fprintf(stderr, "skbtrace: ended %s (pid %d) at the end of the recording: SIGTERM, %s\n", w.name, pid, exitStatus(w.err))
	case <-t.C:
		w.cmd.Process.Kill()
		<-w.done
		fmt.Fprintf(stderr, "skbtrace: killed %s (pid %d) at the end of the recording: still running %s after SIGTERM\n", w.name, pid, grace)
	}
}

// exitStatus says how a command ended, as time(1) would.
func exitStatus(err error) string {
	var st commandStatus
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(wrappedStatus("", err), &st):
		return fmt.Sprintf("exit status %d", st.code)
	}
	return err.Error()
}

// status is the command's failure as skbtrace reports it (a
// commandStatus), nil when it succeeded or skbtrace ended it. Call it
// after Done is closed.
func (w *wrappedCmd) status() error {
	if w.err == nil || w.ended {
		return nil
	}
	if err := wrappedStatus(w.name, w.err); err != w.err {
		return err
	}
	return fmt.Errorf("waiting for %s: %w", w.name, w.err)
}
