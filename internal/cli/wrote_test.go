package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/units"
)

// Every command that writes a file says so on stderr, one line with the
// file's size, "skbtrace: wrote FILE (SIZE)", or for a directory how many
// files it wrote into it and their size; nothing when the output is
// standard output.
func TestEachFileWritingCommandSaysWhatItWrote(t *testing.T) {
	trace := filepath.Join("testdata", "catalog-le.trace")
	capture := filepath.Join("..", "analyze", "pcap", "testdata", "veth-receiver-gso.pcap.gz")
	profA := filepath.Join("..", "analyze", "compare", "testdata", "nft-good.pb.gz")
	profB := filepath.Join("..", "analyze", "compare", "testdata", "nft-bad.pb.gz")
	dir := t.TempDir()
	out := func(name string) string { return filepath.Join(dir, name) }
	for _, c := range []struct {
		name  string
		args  []string
		path  string
		isDir bool
	}{
		{"stat --html", []string{"stat", trace, "--html", out("stat.html")}, out("stat.html"), false},
		{"export --perfetto", []string{"export", trace, "--perfetto", out("run.json")}, out("run.json"), false},
		{"export --parquet", []string{"export", trace, "--parquet", out("tables")}, out("tables"), true},
		{"pcap --graphs", []string{"pcap", capture, "--graphs", out("graphs")}, out("graphs"), true},
		{"compare --flame", []string{"compare", profA, profB, "--flame", out("flame.html")}, out("flame.html"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := Main(c.args, bytes.NewReader(nil), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			var want string
			if c.isDir {
				entries, err := os.ReadDir(c.path)
				if err != nil {
					t.Fatal(err)
				}
				var n int
				var size int64
				for _, e := range entries {
					if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
						n++
						size += info.Size()
					}
				}
				want = "skbtrace: wrote " + c.path + " (" + units.Count(n, "file", "files") + ", " + units.SignedBytes(size) + ")\n"
			} else {
				st, err := os.Stat(c.path)
				if err != nil {
					t.Fatal(err)
				}
				want = "skbtrace: wrote " + c.path + " (" + units.SignedBytes(st.Size()) + ")\n"
			}
			if strings.Count(stderr.String(), "skbtrace: wrote ") != 1 || !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q, want the one line %q", stderr.String(), want)
			}
		})
	}
	// Standard output is not a file to find: nothing said.
	for _, args := range [][]string{
		{"stat", trace, "--html", "-"},
		{"compare", profA, profB, "--flame", "-"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, bytes.NewReader(nil), &stdout, &stderr); code != 0 || strings.Contains(stderr.String(), "wrote") || stdout.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q, %d bytes out; want the page on stdout and nothing said", args, code, stderr.String(), stdout.Len())
		}
	}
}
