package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An output replaces the earlier file only when committed; a link stays a
// link to the new contents; a device is written in place and stays one.
func TestPendingFileReplacesOnlyOnCommit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte("earlier"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(p string, commit bool) {
		t.Helper()
		f, err := createPending(p, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(f, "new"); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := f.commit(); err != nil {
				t.Fatal(err)
			}
		}
		f.discard()
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(path, false)
	if got := read(path); got != "earlier" {
		t.Fatalf("a discarded output changed the file to %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a discarded output left %d files in its directory", len(entries))
	}
	link := filepath.Join(dir, "latest.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	write(link, true)
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link is no longer a link: %v", err)
	}
	if got := read(path); got != "new" {
		t.Fatalf("the committed output through the link reads %q", got)
	}
	write(os.DevNull, true)
	if st, err := os.Stat(os.DevNull); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("%s is no longer a character device: %v", os.DevNull, err)
	}
}

// "-" is standard input where a command reads and standard output where it
// writes; an output written there takes the place of the text report.
func TestDashIsTheStandardStream(t *testing.T) {
	trace := fixture(t, binary.LittleEndian)
	file := filepath.Join(t.TempDir(), "run.trace")
	if err := os.WriteFile(file, trace, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(stdin []byte, args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if code := Main(args, bytes.NewReader(stdin), &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs.String())
		}
		return out.String()
	}
	if got := run(nil, "export", file, "--perfetto", "-"); !json.Valid([]byte(got)) || !strings.Contains(got, "traceEvents") {
		t.Errorf("export --perfetto - wrote no Perfetto JSON to standard output: %.200q", got)
	}
	if got := run(nil, "stat", file, "--html", "-"); !strings.HasPrefix(strings.ToLower(got), "<!doctype html") || !strings.HasSuffix(strings.TrimSpace(got), "</html>") {
		t.Errorf("stat --html - did not write the page alone: %.200q", got)
	}
	fromStdin := run(trace, "parse", "-")
	if fromFile := run(nil, "parse", file); fromStdin != fromFile || fromFile == "" {
		t.Errorf("parse - printed %q, parse FILE %q", fromStdin, fromFile)
	}
	if got := run(trace, "compare", file, "-"); !strings.Contains(got, "standard input") {
		t.Errorf("compare FILE - does not name standard input as B: %.300q", got)
	}
}
