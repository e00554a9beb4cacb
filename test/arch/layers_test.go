// Package arch keeps the tree's shape: the pipeline's layers import only
// downwards, and no hand-written Go file outgrows one reader.
package arch

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/skbtrace/skbtrace/"

// layers ranks the packages along the pipeline, cli > lab > agent > doctor >
// collect/report > record/analyze > leaves: a package imports only its own
// rank or lower. A package is ranked by its longest listed prefix.
var layers = map[string]int{
	"cmd/skbtrace": 8, "internal/cli": 7,
	"internal/lab":     6,
	"internal/agent":   5,
	"internal/doctor":  4,
	"internal/collect": 3, "internal/report": 3,
	"internal/record": 2, "internal/analyze": 2,
	// The leaves: formats, decoders, the loader, host readings, shared types.
	"internal/event": 1, "internal/trace": 1, "internal/wire": 1, "internal/probe": 1, "internal/host": 1,
	"internal/finding": 1, "internal/units": 1, "internal/packet": 1, "internal/capture": 1, "internal/profile": 1,
	"internal/tracetest": 1, "internal/version": 1, "internal/testenv": 1, "internal/load": 1, "internal/tcppeer": 1,
	// Headless Chromium, for the pages' tests and screenshots.
	"internal/report/browser": 1,
}

func rank(pkg string) (int, bool) {
	best, r := "", 0
	for prefix, n := range layers {
		if (pkg == prefix || strings.HasPrefix(pkg, prefix+"/")) && len(prefix) > len(best) {
			best, r = prefix, n
		}
	}
	return r, best != ""
}

func TestNoImportRunsUpThePipeline(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"cmd/...", module+"internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(fields[0], module)
		from, ok := rank(pkg)
		if !ok {
			t.Errorf("%s has no layer: give it one in layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, ok := rank(strings.TrimPrefix(imp, module))
			if ok && to > from {
				t.Errorf("%s (layer %d) imports %s (layer %d): up the pipeline", pkg, from, strings.TrimPrefix(imp, module), to)
			}
		}
	}
}

// maxLines is what one reader holds of a file; generated files are exempt.
const maxLines = 700

func TestNoHandWrittenGoFileOutgrowsAReader(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "out" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b[:min(len(b), 200)], []byte("DO NOT EDIT")) {
			return nil
		}
		if n := bytes.Count(b, []byte("\n")); n > maxLines {
			t.Errorf("%s has %d lines (at most %d): split it where its parts differ", path, n, maxLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
