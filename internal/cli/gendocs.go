package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/skbtrace/skbtrace/internal/version"
)

// manSection is that of system administration commands, as for blktrace(8),
// tcpdump(8), bpftool(8) and ethtool(8): recording loads BPF programs and
// needs root.
const manSection = "8"

// completionFiles are the completion scripts gendocs writes, named as the
// shells' completion directories expect them (scripts/release.sh installs
// them under these names or the packages' ones).
var completionFiles = []struct {
	name string
	gen  func(root *cobra.Command, w io.Writer) error
}{
	{"skbtrace.bash", func(root *cobra.Command, w io.Writer) error { return root.GenBashCompletionV2(w, true) }},
	{"_skbtrace", (*cobra.Command).GenZshCompletion},
	{"skbtrace.fish", func(root *cobra.Command, w io.Writer) error { return root.GenFishCompletion(w, true) }},
}

// gendocsCmd writes the man pages and completion scripts the release
// packages carry, from the command tree itself so that they cannot drift from
// --help. Hidden: users get the files, not this command.
func gendocsCmd() *cobra.Command {
	var manDir, completionDir string
	c := &cobra.Command{
		Use:    "gendocs",
		Short:  "write the man pages and shell completion scripts, for packaging",
		Hidden: true,
		Args:   noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if manDir == "" && completionDir == "" {
				return usagef("gendocs needs --man DIR, --completions DIR or both")
			}
			if manDir != "" {
				if err := writeManPages(c.Root(), manDir); err != nil {
					return err
				}
			}
			if completionDir != "" {
				return writeCompletions(c.Root(), completionDir)
			}
			return nil
		},
	}
	c.Flags().StringVar(&manDir, "man", "", "write one man page per command into `DIR`")
	c.Flags().StringVar(&completionDir, "completions", "", "write the bash, zsh and fish completion scripts into `DIR`")
	return c
}

// writeManPages dates the pages with the build date, not today, so that
// every build of a commit writes the same pages.
func writeManPages(root *cobra.Command, dir string) error {
	v := version.Get()
	date, err := time.Parse(time.RFC3339, v.Date)
	if err != nil {
		return fmt.Errorf("writing man pages: this build has no usable build date (%q): build it with make or make release, or in a git checkout", v.Date)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	// Generated beside the pages and moved in only when all were written:
	// a failed run leaves the earlier pages as they were.
	tmp, err := os.MkdirTemp(dir, ".gendocs-")
	if err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	defer os.RemoveAll(tmp)
	// Without it every page ends in a HISTORY section crediting the generator.
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{Section: manSection, Source: "skbtrace " + v.Version, Date: &date}
	if err := doc.GenManTree(root, header, tmp); err != nil {
		return fmt.Errorf("writing man pages into %s: %w", dir, err)
	}
	pages, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	for _, p := range pages {
		if err := os.Rename(filepath.Join(tmp, p.Name()), filepath.Join(dir, p.Name())); err != nil {
			return fmt.Errorf("writing man pages: %w", err)
		}
	}
	return nil
}

func writeCompletions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing completion scripts: %w", err)
	}
	// All generated before any is written, each written beside its place
	// and renamed: a failed run leaves the earlier scripts as they were.
	scripts := make([][]byte, len(completionFiles))
	for i, f := range completionFiles {
		var b bytes.Buffer
		if err := f.gen(root, &b); err != nil {
			return fmt.Errorf("generating %s: %w", f.name, err)
		}
		scripts[i] = b.Bytes()
	}
	for i, f := range completionFiles {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path+".tmp", scripts[i], 0o644); err != nil {
			os.Remove(path + ".tmp")
			return fmt.Errorf("writing completion scripts: %w", err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return fmt.Errorf("writing completion scripts: %w", err)
		}
	}
	return nil
}
