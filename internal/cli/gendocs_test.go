package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func gendocs(t *testing.T, args ...string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(append([]string{"gendocs"}, args...), nil, &stdout, &stderr); code != 0 {
		t.Fatalf("gendocs %v: exit %d: %s", args, code, stderr.String())
	}
}

// TestManPages: a page for every command --help lists, and none other, each
// with that command's flags, so that the pages cannot drift from --help.
func TestManPages(t *testing.T) {
	setVersion(t, "1.2.3", "bd031d922d7d7f4b01c5f100ca39eea6f19d4054", "2026-11-26T16:29:49Z")
	dir := t.TempDir()
	gendocs(t, "--man", dir)

	want := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + ".8"
		want[name] = true
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: no man page: %v", c.CommandPath(), err)
		} else {
			checkManPage(t, c, string(b))
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(newRoot(&env{}))
	for _, n := range []string{"skbtrace.8", "skbtrace-record.8", "skbtrace-lab-run.8", "skbtrace-version.8"} {
		if !want[n] {
			t.Errorf("the command tree has no %s", n)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !want[e.Name()] {
			t.Errorf("man page %s is of no command --help lists (a hidden one, or the default completion command?)", e.Name())
		}
	}

	again := t.TempDir()
	gendocs(t, "--man", again)
	for name := range want {
		a, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(again, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs", name)
		}
	}
}

func checkManPage(t *testing.T, c *cobra.Command, page string) {
	t.Helper()
	if th := `.TH "` + strings.ToUpper(strings.ReplaceAll(c.CommandPath(), " ", "-")) + `" "8" "Nov 2026" "skbtrace 1.2.3"`; !strings.Contains(page, th) {
		t.Errorf("%s: the page has no %s header", c.CommandPath(), th)
	}
	text := strings.ReplaceAll(page, `\-`, "-") // roff's minus signs
	check := func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		if !strings.Contains(text, `\fB--`+f.Name+`\fP`) {
			t.Errorf("%s: the page lacks --%s", c.CommandPath(), f.Name)
		}
		if f.Shorthand != "" && !strings.Contains(text, `\fB-`+f.Shorthand+`\fP, \fB--`+f.Name+`\fP`) {
			t.Errorf("%s: the page lacks -%s for --%s", c.CommandPath(), f.Shorthand, f.Name)
		}
	}
	c.LocalFlags().VisitAll(check)
	c.InheritedFlags().VisitAll(check)
	if !strings.Contains(text, `\fB-h\fP, \fB--help\fP`) {
		t.Errorf("%s: the page lacks -h, --help", c.CommandPath())
	}
	// Go's zero values, as cobra's generator printed them.
	for _, noise := range []string{"=[]", "[=false]", `=""`, "=0\n"} {
		if strings.Contains(text, noise) {
			t.Errorf("%s: the page prints an option's zero value %q", c.CommandPath(), noise)
		}
	}
	sections := []string{".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH OPTIONS", ".SH EXIT STATUS", ".SH SEE ALSO"}
	if c.Example != "" {
		sections = append(sections, ".SH EXAMPLES")
	}
	if c.HasAvailableSubCommands() {
		sections = append(sections, ".SH COMMANDS")
	}
	for _, s := range sections {
		if !strings.Contains(page, "\n"+s+"\n") {
			t.Errorf("%s: the page has no %s section", c.CommandPath(), s)
		}
	}
	if !strings.Contains(text, ".TP\n2\na usage error") {
		t.Errorf("%s: EXIT STATUS lacks 2 for a usage error", c.CommandPath())
	}
	if wraps := strings.Contains(c.Use, "[-- "); wraps != strings.Contains(text, "With a \\fICOMMAND\\fP, skbtrace exits with its status") {
		t.Errorf("%s: runs a COMMAND: %v, but the page says otherwise about passing its status through", c.CommandPath(), wraps)
	}
	// The docs cited are where the .deb installs them, not in a source tree.
	if strings.Contains(text, "docs/") {
		t.Errorf("%s: the page cites docs/ of the source tree", c.CommandPath())
	}
}

// TestManPageCommandList: skbtrace(8) lists every command, nested ones too,
// with its summary and its page, and names each page in SEE ALSO.
func TestManPageCommandList(t *testing.T) {
	setVersion(t, "1.2.3", "bd031d922d7d7f4b01c5f100ca39eea6f19d4054", "2026-11-26T16:29:49Z")
	dir := t.TempDir()
	gendocs(t, "--man", dir)
	b, err := os.ReadFile(filepath.Join(dir, "skbtrace.8"))
	if err != nil {
		t.Fatal(err)
	}
	page := strings.ReplaceAll(string(b), `\-`, "-")
	_, commands, ok1 := strings.Cut(page, ".SH COMMANDS\n")
	commands, _, ok2 := strings.Cut(commands, ".SH ")
	_, see, ok3 := strings.Cut(page, ".SH SEE ALSO\n")
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("skbtrace(8) lacks COMMANDS or SEE ALSO:\n%s", page)
	}
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			n++
			name := strings.TrimPrefix(sub.CommandPath(), "skbtrace ")
			ref := `\fB` + strings.ReplaceAll(sub.CommandPath(), " ", "-") + `\fP(8)`
			if !strings.Contains(commands, ".TP\n\\fB"+name+"\\fP\n"+sub.Short+"; see "+ref) {
				t.Errorf("COMMANDS lacks %s with its summary and page", name)
			}
			if !strings.Contains(see, ref) {
				t.Errorf("SEE ALSO lacks %s", ref)
			}
			walk(sub)
		}
	}
	walk(newRoot(&env{}))
	if n < 19 {
		t.Errorf("only %d commands walked", n)
	}
	if !strings.Contains(page, "as \\fBtime\\fP(1) does") {
		t.Errorf("skbtrace(8)'s EXIT STATUS does not say that the wrapped command's status is passed through")
	}

	// doctor cites docs/findings.md; the .deb installs it there.
	b, err = os.ReadFile(filepath.Join(dir, "skbtrace-doctor.8"))
	if err != nil {
		t.Fatal(err)
	}
	if doctor := strings.ReplaceAll(string(b), `\-`, "-"); !strings.Contains(doctor, "/usr/share/doc/skbtrace/findings.md.gz") {
		t.Errorf("skbtrace-doctor(8) does not cite /usr/share/doc/skbtrace/findings.md.gz")
	}
}

func TestGendocsNeedsADate(t *testing.T) {
	setVersion(t, "dev", "", "")
	// A test binary has no VCS stamp to fall back on.
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"gendocs", "--man", t.TempDir()}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "build date") {
		t.Errorf("gendocs without a build date: exit %d, %q; want 1 and the reason", code, stderr.String())
	}
	if code := Main([]string{"gendocs"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("gendocs with nothing to do: exit %d, want a usage error", code)
	}
}

// TestCompletions: the scripts are written, and the __complete command they
// call answers although the default completion command is off.
func TestCompletions(t *testing.T) {
	dir := t.TempDir()
	gendocs(t, "--completions", dir)
	for _, f := range completionFiles {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil || !bytes.Contains(b, []byte("__complete")) {
			t.Errorf("%s: %v, or it does not call __complete", f.name, err)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"__complete", "re"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "record") {
		t.Errorf("__complete re: exit %d, %q; want record among the answers", code, stdout.String())
	}
	stdout.Reset()
	if code := Main([]string{"__complete", "record", "--filter-p"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "--filter-port") {
		t.Errorf("__complete record --filter-p: exit %d, %q; want --filter-port", code, stdout.String())
	}
	stdout.Reset()
	if code := Main([]string{"__complete", "c"}, nil, &stdout, &stderr); code != 0 || strings.Contains(stdout.String(), "completion") {
		t.Errorf("__complete c: exit %d, %q; the default completion command should be off", code, stdout.String())
	}
}

// TestBareSkbtrace: skbtrace without a command is a usage error (exit 2),
// with the usage, which lists the commands, on standard error.
func TestBareSkbtrace(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main(nil, nil, &stdout, &stderr)
	if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "Available Commands:") || !strings.Contains(stderr.String(), "record") {
		t.Errorf("bare skbtrace: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", code, stdout.String(), stderr.String())
	}
}
