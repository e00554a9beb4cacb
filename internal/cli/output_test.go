package cli

import (
	"os"
	"path/filepath"
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
		f, err := createPending(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("new"); err != nil {
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
