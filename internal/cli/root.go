package cli

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/version"
)

// usageHint follows a usage error's one line: the help of the command
// that refused it (the root's for an unknown command).
func usageHint(c *cobra.Command) string {
	return fmt.Sprintf("run '%s --help' for usage", c.CommandPath())
}

// usageError marks an error as the user's invocation being wrong (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// commandStatus is the failure of the COMMAND a command wrapped (record,
// live, doctor, profile): skbtrace exits with its status, as time(1) does,
// after its own outputs are written.
type commandStatus struct {
	name string
	code int // 128+N for a command ended by signal N
}

func (e commandStatus) Error() string {
	if e.code > 128 {
		return fmt.Sprintf("%s was ended by signal %d (exit status %d)", e.name, e.code-128, e.code)
	}
	return fmt.Sprintf("%s exited with status %d", e.name, e.code)
}

// wrappedStatus turns a wrapped command's wait error into a commandStatus,
// nil when it succeeded; other errors (it could not be waited for) stay.
func wrappedStatus(name string, err error) error {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	code := exit.ExitCode()
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == 0 {
		return nil
	}
	return commandStatus{name: name, code: code}
}

// env is what a command may touch besides the kernel.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// Main runs skbtrace with args and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(&env{stdin: stdin, stdout: stdout, stderr: stderr})
	if len(args) == 0 {
		// Bare skbtrace did nothing asked of it: a usage error, as EXIT STATUS says.
		fmt.Fprint(stderr, root.UsageString())
		return 2
	}
	root.SetArgs(args)
	c, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var status commandStatus
	if errors.As(err, &status) {
		// Said once, like time(1): the wrapped command's status is ours.
		fmt.Fprintf(stderr, "skbtrace: %v\n", err)
		return status.code
	}
	fmt.Fprintf(stderr, "skbtrace: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintln(stderr, usageHint(c))
		return 2
	}
	return 1
}

// newRoot builds the command tree, which the man pages are generated from too.
func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "skbtrace",
		Short: "trace why the network stack moves fewer bytes than the link allows",
		Long: `skbtrace traces the Linux network stack with eBPF tracepoints, like blktrace
does for block I/O: record writes a compact binary trace, parse prints it.`,
		// --version prints cobra's "skbtrace version X", as `version` does:
		// a template of our own would link text/template, 4 MB more.
		Version:       version.Get().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// The release packages install completion scripts where the shells
		// find them (gendocs writes them); the scripts call the hidden
		// __complete command, which stays.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(recordCmd(e), parseCmd(e), liveCmd(e), statCmd(e), eventsCmd(e), loadCmd(e), labCmd(e), doctorCmd(e), pcapCmd(e), profileCmd(e), compareCmd(e), agentCmd(e), exportCmd(e),
		versionCmd(e), gendocsCmd())
	completeValues(root)
	return root
}

// Cobra reports unknown commands and argument-count errors as plain errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.Contains(msg, "arg(s)") ||
		strings.HasPrefix(msg, "unknown flag") || strings.HasPrefix(msg, "unknown shorthand")
}

// noArgs rejects positional arguments as a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", c.CommandPath(), args)
	}
	return nil
}
