package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/skbtrace/skbtrace/internal/units"
)

// pendingFile is an output written beside its path and moved over it only
// when the command succeeds: a failed run leaves an earlier file as it was.
// A path that is not a regular file (/dev/stdout, a FIFO) is written in
// place: renaming over it would replace the device; "-" is standard output.
// A committed file is announced on stderr (nil: not announced).
type pendingFile struct {
	io.Writer
	file    *os.File // nil on standard output
	path    string
	inPlace bool
	done    bool
	stderr  io.Writer
}

func createPending(path string, stdout, stderr io.Writer) (*pendingFile, error) {
	if path == "-" {
		return &pendingFile{Writer: stdout, path: "standard output", inPlace: true}, nil
	}
	// Through a symbolic link to its target, so that the link stays a link.
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		return &pendingFile{Writer: f, file: f, path: path, inPlace: true}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return &pendingFile{Writer: f, file: f, path: path, stderr: stderr}, nil
}

// commit closes the file, renames it over path and says so on stderr:
// "skbtrace: wrote FILE (SIZE)". A device or FIFO written in place is a
// stream the user reads, not a file to find: it is not announced.
func (p *pendingFile) commit() error {
	p.done = true
	if p.file == nil {
		return nil
	}
	if p.inPlace {
		if err := p.file.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", p.path, err)
		}
		return nil
	}
	err := p.file.Chmod(0o644)
	if cerr := p.file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.file.Name(), p.path)
	}
	if err != nil {
		os.Remove(p.file.Name())
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	wrote(p.stderr, p.path)
	return nil
}

// wrote says on stderr that a command wrote path, with its size.
func wrote(stderr io.Writer, path string) {
	if stderr == nil {
		return
	}
	if st, err := os.Stat(path); err == nil {
		fmt.Fprintf(stderr, "skbtrace: wrote %s (%s)\n", path, units.SignedBytes(st.Size()))
	}
}

// regularFile says whether path is a regular file.
func regularFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// wroteDir says on stderr that a command wrote files into dir: how many
// and their size together.
func wroteDir(stderr io.Writer, dir string, files []string) {
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	fmt.Fprintf(stderr, "skbtrace: wrote %s (%s, %s)\n", dir, units.Count(len(files), "file", "files"), units.SignedBytes(size))
}

// discard removes the file unless it was committed or written in place.
func (p *pendingFile) discard() {
	if p.done {
		return
	}
	p.done = true
	if p.file == nil {
		return
	}
	p.file.Close()
	if !p.inPlace {
		os.Remove(p.file.Name())
	}
}

// writeFile writes through fn beside path (or to stdout for "-") and moves
// the file over path only when it is complete.
func writeFile(path string, stdout, stderr io.Writer, fn func(io.Writer) error) error {
	f, err := createPending(path, stdout, stderr)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.discard()
		return fmt.Errorf("writing %s: %w", f.path, err)
	}
	return f.commit()
}

// orStdout is "-" for an output that goes to standard output when no
// file is given.
func orStdout(path string) string {
	if path == "" {
		return "-"
	}
	return path
}

// oneOnStdout refuses two outputs on standard output, which would mix:
// outputs maps each output's flag to its path.
func oneOnStdout(outputs map[string]string) error {
	var on []string
	for flag, path := range outputs {
		if path == "-" {
			on = append(on, flag)
		}
	}
	if len(on) > 1 {
		slices.Sort(on)
		return usagef("%s all go to standard output (-), where they would mix: give all but one a file", strings.Join(on, ", "))
	}
	return nil
}

// partialFlag is what a damaged input (a trace or capture cut short by a
// crash, or a damaged block) means for the output files: without it the run
// fails and writes none, so earlier ones stay; with it they are written from
// what could be read, the damage is a warning and the run succeeds.
type partialFlag bool

func (p *partialFlag) bind(fs *pflag.FlagSet) {
	fs.BoolVar((*bool)(p), "partial", false, "accept a damaged or truncated input (a crashed recording): write the outputs from what can be read, warn of the damage and exit 0")
}

// writes says whether a run whose input was damaged (or not) writes its files.
func (p partialFlag) writes(damaged bool) bool { return !damaged || bool(p) }

// settle ends a run whose input was damaged: covered says what the printed
// results cover, unwritten names the files left alone.
func (p partialFlag) settle(stderr io.Writer, damage error, covered string, unwritten []string) error {
	if p {
		fmt.Fprintf(stderr, "skbtrace: warning: %v (%s; accepted with --partial)\n", damage, covered)
		return nil
	}
	if len(unwritten) == 0 {
		return fmt.Errorf("%w (%s)", damage, covered)
	}
	return fmt.Errorf("%w (%s; %s not written: --partial writes what was read)", damage, covered, strings.Join(unwritten, ", "))
}

// fileOutputs are the paths of outputs that are files, standard output left out.
func fileOutputs(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" && p != "-" {
			out = append(out, p)
		}
	}
	return out
}
