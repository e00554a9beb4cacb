package cli

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagUse is one command's use of a flag.
type flagUse struct {
	command, shorthand, takes, usage string
}

// flagUses gathers every command's own flags by name (help excepted).
func flagUses(root *cobra.Command) map[string][]flagUse {
	uses := map[string][]flagUse{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			takes, usage := pflag.UnquoteUsage(f)
			if d := shownDefault(f); d != "" {
				usage += " " + d
			}
			uses[f.Name] = append(uses[f.Name], flagUse{strings.TrimPrefix(c.CommandPath(), "skbtrace "), f.Shorthand, takes, usage})
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return uses
}

// shownDefault is the "(default X)" that --help appends to a flag's usage,
// or "": pflag's own rendering, so that docs/cli.md shows a default as
// --help does (pflag decides which defaults are zero and how to quote them).
func shownDefault(f *pflag.Flag) string {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.AddFlag(f)
	_, usage := pflag.UnquoteUsage(f)
	line := strings.TrimRight(fs.FlagUsages(), "\n")
	i := strings.LastIndex(line, usage)
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(line[i+len(usage):])
}

// flagVocabulary is docs/cli.md: every flag once, what it takes, which
// commands have it and what it does there.
func flagVocabulary(root *cobra.Command) string {
	uses := flagUses(root)
	var b strings.Builder
	b.WriteString("# Flags\n\n" +
		"Every flag of every command, once (generated from the command tree: `go test ./internal/cli -run TestFlagVocabulary -update`\n" +
		"rewrites it). A flag name has one shorthand and takes one kind of value wherever it appears;\n" +
		"`-` as a file is standard input or output; durations are `5`, `5s` or `2m` (bare numbers are\n" +
		"seconds); sizes are bytes or `K`, `M`, `G` (binary: `64M`, `1GiB`). `--netns` chooses where a\n" +
		"command looks or runs (doctor, agent, load); `--filter-*` chooses which events a recording or a\n" +
		"reading keeps (record, live, parse, stat, export).\n\n" +
		"| flag | takes | commands | what it does |\n|---|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(uses)) {
		us := uses[name]
		flag := "--" + name
		if us[0].shorthand != "" {
			flag = "-" + us[0].shorthand + ", " + flag
		}
		var commands, meanings []string
		same := true
		for _, u := range us {
			commands = append(commands, u.command)
			same = same && u.usage == us[0].usage
		}
		if same {
			meanings = []string{us[0].usage}
		} else {
			for _, u := range us {
				meanings = append(meanings, u.command+": "+u.usage)
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", flag, us[0].takes, strings.Join(commands, ", "),
			strings.ReplaceAll(strings.Join(meanings, "<br>"), "|", "\\|"))
	}
	return b.String()
}
