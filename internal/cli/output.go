package cli

import (
	"fmt"
	"os"
	"path/filepath"
)

// pendingFile is an output written beside its path and moved over it only
// when the command succeeds: a failed run leaves an earlier file as it was.
// A path that is not a regular file (/dev/stdout, a FIFO) is written in
// place: renaming over it would replace the device.
type pendingFile struct {
	*os.File
	path    string
	inPlace bool
	done    bool
}

func createPending(path string) (*pendingFile, error) {
	// Through a symbolic link to its target, so that the link stays a link.
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		return &pendingFile{File: f, path: path, inPlace: true}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return &pendingFile{File: f, path: path}, nil
}

// commit closes the file and renames it over path.
func (p *pendingFile) commit() error {
	p.done = true
	if p.inPlace {
		if err := p.Close(); err != nil {
			return fmt.Errorf("writing %s: %w", p.path, err)
		}
		return nil
	}
	err := p.Chmod(0o644)
	if cerr := p.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(p.Name(), p.path)
	}
	if err != nil {
		os.Remove(p.Name())
		return fmt.Errorf("writing %s: %w", p.path, err)
	}
	return nil
}

// discard removes the file unless it was committed or written in place.
func (p *pendingFile) discard() {
	if p.done {
		return
	}
	p.done = true
	p.Close()
	if !p.inPlace {
		os.Remove(p.Name())
	}
}
