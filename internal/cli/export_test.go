package cli

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// dirFiles maps each file under dir, hidden ones too, to its contents.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An export that can read nothing leaves the files of an earlier one as
// they were, and no staging file beside them; a good one replaces them.
func TestExportOfUnreadableInputLeavesEarlierOutputsUntouched(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.trace")
	if err := os.WriteFile(good, fixture(t, binary.LittleEndian), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	perfetto, tables := filepath.Join(out, "run.json"), filepath.Join(out, "tables")
	export := func(input string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := Main([]string{"export", input, "--perfetto", perfetto, "--parquet", tables}, nil, &stdout, &stderr)
		return code, stderr.String()
	}
	if code, stderr := export(good); code != 0 {
		t.Fatalf("exporting the fixture: exit %d: %s", code, stderr)
	}
	before := dirFiles(t, out)
	if len(before) < 3 {
		t.Fatalf("the good export wrote %d files", len(before))
	}
	for name, content := range map[string][]byte{
		"empty":  nil,
		"random": bytes.Repeat([]byte{0x5a, 0xc3, 0x11}, 3000),
		"pcap":   {0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0},
	} {
		bad := filepath.Join(dir, name)
		if err := os.WriteFile(bad, content, 0o644); err != nil {
			t.Fatal(err)
		}
		code, stderr := export(bad)
		if code == 0 {
			t.Errorf("%s: exported without an error", name)
		}
		after := dirFiles(t, out)
		if !slices.Equal(sortedKeys(before), sortedKeys(after)) {
			t.Fatalf("%s (%s): files %v became %v", name, stderr, sortedKeys(before), sortedKeys(after))
		}
		for p, b := range before {
			if !bytes.Equal(after[p], b) {
				t.Errorf("%s: %s changed", name, p)
			}
		}
	}
	if code, stderr := export(good); code != 0 || len(dirFiles(t, out)) != len(before) {
		t.Fatalf("exporting the fixture again: exit %d, %d files (want %d): %s", code, len(dirFiles(t, out)), len(before), stderr)
	}
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
