package cli

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	{"skbtrace.bash", func(root *cobra.Command, w io.Writer) error {
		if _, err := io.WriteString(w, bashFallback); err != nil {
			return err
		}
		return root.GenBashCompletionV2(w, true)
	}},
	{"_skbtrace", (*cobra.Command).GenZshCompletion},
	{"skbtrace.fish", func(root *cobra.Command, w io.Writer) error { return root.GenFishCompletion(w, true) }},
}

// bashFallback precedes cobra's bash script, which calls bash-completion's
// _get_comp_words_by_ref and _filedir: without that package (the .deb
// Recommends it) every Tab said "command not found". These stand-ins,
// defined only where bash-completion's are missing, complete commands,
// flags, values and files plainly. Words are split at blanks alone, as
// bash-completion's -n =: has it, so that --flag=value stays one word.
const bashFallback = `# Without the bash-completion package: plain stand-ins for the two of its
# functions this script calls.
if ! declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
    _get_comp_words_by_ref()
    {
        local line=${COMP_LINE:0:COMP_POINT}
        read -r -a words <<<"$line"
        [[ -n $line && $line != *[[:space:]] ]] || words+=("")
        cword=$((${#words[@]} - 1))
        cur=${words[cword]}
        prev=${words[cword - 1]}
    }
fi
if ! declare -F _filedir >/dev/null 2>&1; then
    _filedir()
    {
        local IFS=$'\n' ext=${1%|} restore
        restore=$(shopt -p extglob)
        shopt -s extglob
        if [[ $1 == -d ]]; then
            COMPREPLY+=($(compgen -d -- "$cur"))
        else
            COMPREPLY+=($(compgen -d -- "$cur") $(compgen -f -X "${ext:+!*.@($ext)}" -- "$cur"))
        fi
        eval "$restore"
        compopt -o filenames 2>/dev/null
    }
fi

`

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
	pages := map[string][]byte{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		// Cobra adds these when a command runs; the pages show them as --help does.
		c.InitDefaultHelpFlag()
		c.InitDefaultVersionFlag()
		pages[manName(c)+"."+manSection] = manPage(c, date, "skbtrace "+v.Version)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	// Written beside the pages and moved in only when all were written: a
	// failed run leaves the earlier pages as they were.
	tmp, err := os.MkdirTemp(dir, ".gendocs-")
	if err != nil {
		return fmt.Errorf("writing man pages: %w", err)
	}
	defer os.RemoveAll(tmp)
	names := slices.Sorted(maps.Keys(pages))
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(tmp, name), pages[name], 0o644); err != nil {
			return fmt.Errorf("writing man pages: %w", err)
		}
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("writing man pages: %w", err)
		}
	}
	return nil
}

// docDir is where the Debian package installs docs/*.md, compressed as
// Debian compresses documentation (scripts/release.sh): the pages cite
// the docs there, not in a source tree the user may not have.
const docDir = "/usr/share/doc/skbtrace/"

var docRef = regexp.MustCompile(`\bdocs/([a-z0-9-]+\.md)\b`)

func manName(c *cobra.Command) string { return strings.ReplaceAll(c.CommandPath(), " ", "-") }

// wrapsCommand: the commands that run a COMMAND of the user's and exit
// with its status (commandStatus).
func wrapsCommand(c *cobra.Command) bool { return strings.Contains(c.Use, "[-- ") }

// manPage writes c's page in roff, as man(7) has it: cobra's generator
// printed Go's zero values (--context=[], --help[=false]), had no command
// list, no EXIT STATUS, and cited docs by their paths in the source tree.
func manPage(c *cobra.Command, date time.Time, source string) []byte {
	var b strings.Builder
	var docs []string
	text := func(s string) string {
		for _, m := range docRef.FindAllStringSubmatch(s, -1) {
			if !slices.Contains(docs, m[1]) {
				docs = append(docs, m[1])
			}
		}
		return roffEscape(docRef.ReplaceAllString(s, docDir+"$1.gz"))
	}
	name := manName(c)
	fmt.Fprintf(&b, ".TH \"%s\" \"%s\" \"%s\" \"%s\" \"\"\n.nh\n.ad l\n", strings.ToUpper(name), manSection, date.Format("Jan 2006"), source)
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", roffEscape(name), text(c.Short))

	b.WriteString(".SH SYNOPSIS\n")
	if c.Runnable() {
		fmt.Fprintf(&b, "\\fB%s\\fP%s\n", roffEscape(c.CommandPath()), roffEscape(strings.TrimPrefix(c.UseLine(), c.CommandPath())))
	}
	if c.HasAvailableSubCommands() {
		if c.Runnable() {
			b.WriteString(".br\n")
		}
		fmt.Fprintf(&b, "\\fB%s\\fP \\fICOMMAND\\fP [flags]\n", roffEscape(c.CommandPath()))
	}

	long := c.Long
	if long == "" {
		long = c.Short
	}
	b.WriteString(".SH DESCRIPTION\n")
	writeProse(&b, long, text)

	// The root's list has every command, nested ones too; a group's, its own.
	if c.HasAvailableSubCommands() {
		b.WriteString(".SH COMMANDS\n")
		var list func(p *cobra.Command)
		list = func(p *cobra.Command) {
			for _, sub := range p.Commands() {
				if !sub.IsAvailableCommand() {
					continue
				}
				fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s; see \\fB%s\\fP(%s).\n", roffEscape(strings.TrimPrefix(sub.CommandPath(), c.CommandPath()+" ")), text(sub.Short), roffEscape(manName(sub)), manSection)
				if !c.HasParent() {
					list(sub)
				}
			}
		}
		list(c)
	}

	writeFlags := func(title string, fs *pflag.FlagSet) {
		first := true
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Deprecated != "" {
				return
			}
			if first {
				fmt.Fprintf(&b, ".SH %s\n", title)
				first = false
			}
			takes, usage := pflag.UnquoteUsage(f)
			b.WriteString(".TP\n")
			if f.Shorthand != "" && f.ShorthandDeprecated == "" {
				fmt.Fprintf(&b, "\\fB\\-%s\\fP, ", roffEscape(f.Shorthand))
			}
			fmt.Fprintf(&b, "\\fB\\-\\-%s\\fP", roffEscape(f.Name))
			if takes != "" {
				fmt.Fprintf(&b, " \\fI%s\\fP", roffEscape(takes))
			}
			fmt.Fprintf(&b, "\n%s%s\n", text(usage), roffEscape(flagDefault(f, usage)))
		})
	}
	writeFlags("OPTIONS", c.NonInheritedFlags())
	writeFlags("OPTIONS INHERITED FROM PARENT COMMANDS", c.InheritedFlags())

	b.WriteString(".SH EXIT STATUS\n")
	if wrapsCommand(c) {
		b.WriteString("With a \\fICOMMAND\\fP, skbtrace exits with its status, as \\fBtime\\fP(1) does, once its own outputs are written: " +
			"the command's exit status, or 128+\\fIN\\fP when signal \\fIN\\fP ended it. Otherwise:\n")
	}
	b.WriteString(".TP\n0\nsuccess\n.TP\n1\nan error: skbtrace says what it was doing on standard error\n" +
		".TP\n2\na usage error: an unknown command or flag, a bad value, wrong arguments\n")
	if !c.HasParent() {
		b.WriteString(".PP\n\\fBrecord\\fP, \\fBlive\\fP, \\fBdoctor\\fP and \\fBprofile\\fP run a \\fICOMMAND\\fP given after \\fB\\-\\-\\fP " +
			"and exit with its status, as \\fBtime\\fP(1) does: the command's exit status, or 128+\\fIN\\fP when signal \\fIN\\fP ended it.\n")
	}

	if c.Example != "" {
		b.WriteString(".SH EXAMPLES\n.EX\n")
		for _, line := range strings.Split(strings.TrimRight(c.Example, "\n"), "\n") {
			b.WriteString(roffLine(text(strings.TrimPrefix(line, "  "))) + "\n")
		}
		b.WriteString(".EE\n")
	}

	var see []string
	if c.HasParent() {
		see = append(see, manName(c.Parent()))
	}
	var all func(p *cobra.Command)
	all = func(p *cobra.Command) {
		for _, sub := range p.Commands() {
			if sub.IsAvailableCommand() {
				see = append(see, manName(sub))
				if !c.HasParent() {
					all(sub)
				}
			}
		}
	}
	all(c)
	b.WriteString(".SH SEE ALSO\n")
	for i, s := range see {
		sep := ","
		if i == len(see)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "\\fB%s\\fP(%s)%s\n", roffEscape(s), manSection, sep)
	}
	for _, d := range docs {
		fmt.Fprintf(&b, ".PP\n%s\n", roffEscape(docDir+d+".gz"))
	}
	return []byte(b.String())
}

// flagDefault is what --help adds to f's usage for its default, " (default
// 1s)" or nothing, taken from pflag itself so that the two cannot differ.
func flagDefault(f *pflag.Flag, usage string) string {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.AddFlag(f)
	line := strings.TrimRight(fs.FlagUsagesWrapped(0), "\n")
	if i := strings.LastIndex(line, usage); i >= 0 {
		return line[i+len(usage):]
	}
	return ""
}

// writeProse writes text's paragraphs (split at blank lines) filled, and
// those whose lines are indented (tables, lists of endpoints) as written.
func writeProse(b *strings.Builder, s string, text func(string) string) {
	for i, para := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		lines := strings.Split(para, "\n")
		indented := false
		for _, l := range lines {
			indented = indented || strings.HasPrefix(l, " ")
		}
		if indented {
			b.WriteString(".nf\n")
		}
		for _, l := range lines {
			b.WriteString(roffLine(text(l)) + "\n")
		}
		if indented {
			b.WriteString(".fi\n")
		}
	}
}

// roffEscape escapes what roff would take as its own: backslashes, and
// hyphens, which man(7) wants as \- in options and commands.
func roffEscape(s string) string {
	return strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
}

// roffLine keeps a line that starts with a control character (. or ') text.
func roffLine(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
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
