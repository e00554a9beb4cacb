package cli

import (
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/lab"
	"github.com/skbtrace/skbtrace/internal/record"
)

// Where completion finds the devices and the named network namespaces
// (as ip netns names them); variables so that tests can point them at
// directories of their own.
var (
	netDevDir = "/sys/class/net"
	netnsDir  = "/run/netns"
)

// formats are the --format values of each command that has the flag.
var formats = map[string][]string{
	"skbtrace doctor":  {"text", "json", "html"},
	"skbtrace profile": {"pprof", "folded", "html"},
}

// fileExts are the extensions of the files a flag names, by flag name and
// command ("" for every command that has the flag); a FILE flag not here
// completes any file.
var fileExts = map[string]map[string][]string{
	"input": {
		"skbtrace pcap": {"pcap", "pcapng"},
		"":              {"trace"},
	},
	"output": {
		"skbtrace record": {"trace"},
		"skbtrace doctor": {"txt", "json", "html"},
	},
	"trace":    {"": {"trace"}},
	"html":     {"": {"html"}},
	"flame":    {"": {"html"}},
	"perfetto": {"": {"json"}},
}

// argExts are the extensions of the files a command takes as arguments.
var argExts = map[string][]string{
	"skbtrace parse":  {"trace"},
	"skbtrace stat":   {"trace"},
	"skbtrace export": {"trace"},
	"skbtrace pcap":   {"pcap", "pcapng"},
}

// completeValues registers, on every command of the tree, what the shells
// complete each flag's value and each command's arguments with: names
// from skbtrace's own registries (event families, lab scenarios, --format
// values, --trigger forms) and from the host (devices, namespaces), files
// of the right kind, directories for DIR, and nothing for numbers and
// durations. By flag name, so that the commands' own files need not know.
func completeValues(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if fn := flagCompletion(c, f); fn != nil {
				// The tree is built once, with each flag once per command.
				_ = c.RegisterFlagCompletionFunc(f.Name, fn)
			}
		})
		if c.ValidArgsFunction == nil {
			if exts, ok := argExts[c.CommandPath()]; ok {
				c.ValidArgsFunction = fixed(exts, cobra.ShellCompDirectiveFilterFileExt)
			} else if c.CommandPath() == "skbtrace lab run" {
				c.ValidArgsFunction = func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
					return withPrefix(scenarioNames(), toComplete), cobra.ShellCompDirectiveNoFileComp
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func flagCompletion(c *cobra.Command, f *pflag.Flag) cobra.CompletionFunc {
	path := c.CommandPath()
	switch f.Name {
	case "events":
		return list(familyNames)
	case "context":
		return list(func() []string { return slices.Sorted(maps.Keys(contextNames)) })
	case "format":
		if v, ok := formats[path]; ok {
			return fixed(v, cobra.ShellCompDirectiveNoFileComp)
		}
	case "trigger":
		return triggerForms
	case "filter-dev":
		return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return withPrefix(dirNames(netDevDir), toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	case "wire":
		return list(func() []string { return dirNames(netDevDir) })
	case "filter-netns":
		return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return withPrefix(append([]string{"host"}, dirNames(netnsDir)...), toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	case "netns":
		if f.Value.Type() == "stringSlice" {
			return list(func() []string { return dirNames(netnsDir) })
		}
		return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return withPrefix(dirNames(netnsDir), toComplete), cobra.ShellCompDirectiveNoFileComp
		}
	}
	if byCmd, ok := fileExts[f.Name]; ok {
		exts, ok := byCmd[path]
		if !ok {
			exts, ok = byCmd[""]
		}
		if ok {
			return fixed(exts, cobra.ShellCompDirectiveFilterFileExt)
		}
	}
	switch takes, _ := pflag.UnquoteUsage(f); {
	case f.NoOptDefVal != "":
		return nil // a switch: nothing to complete
	case takes == "DIR":
		return fixed(nil, cobra.ShellCompDirectiveFilterDirs)
	case takes == "FILE":
		return nil // the shell's own file completion
	default:
		// Numbers, durations, sizes, addresses: no file is one.
		return fixed(nil, cobra.ShellCompDirectiveNoFileComp)
	}
}

// fixed completes with values and directive; with a file or directory
// directive values are extensions, not what was typed.
func fixed(values []string, d cobra.ShellCompDirective) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if d&(cobra.ShellCompDirectiveFilterFileExt|cobra.ShellCompDirectiveFilterDirs) != 0 {
			return values, d
		}
		return withPrefix(values, toComplete), d
	}
}

func withPrefix(values []string, prefix string) []string {
	var out []string
	for _, v := range values {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// list completes the last item of a comma-separated list of values,
// offering the whole list so far with each value not in it yet; no space
// after it, so that a comma and another can follow.
func list(values func() []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		i := strings.LastIndex(toComplete, ",")
		done, part := toComplete[:i+1], toComplete[i+1:]
		have := strings.Split(done, ",")
		var out []string
		for _, v := range values() {
			if strings.HasPrefix(v, part) && !slices.Contains(have, v) {
				out = append(out, done+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
}

// familyNames: the families -e takes, and all.
func familyNames() []string {
	out := make([]string, 0, len(event.Families)+1)
	for _, f := range event.Families {
		out = append(out, f.Name)
	}
	return append(out, "all")
}

// scenarioNames: what lab run takes, the lists' names and each scenario's.
func scenarioNames() []string {
	out := []string{lab.SetFaults, lab.SetVariants, lab.SetNoise, lab.SetMatrix, lab.SetNIC}
	for _, e := range lab.Catalog() {
		out = append(out, e.Name)
	}
	return out
}

// triggerForms completes --trigger with the start of each form of
// record.TriggerHelp, up to where the user's own part begins: "drop",
// "drop:", "srtt>", "sendlim:". No space after those that go on.
func triggerForms(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []string
	open := false
	for _, form := range strings.Split(record.TriggerHelp, ", ") {
		heads := []string{form}
		if i := strings.IndexAny(form, "[:>"); i >= 0 {
			heads = []string{form[:i]}
			if form[i] == '[' {
				// drop[:REASON][@DEV]: drop alone, or drop: for a reason.
				heads = append(heads, form[:i]+form[i+1:i+2])
			} else {
				heads = []string{form[:i+1]}
			}
		}
		for _, h := range heads {
			if strings.HasPrefix(h, toComplete) {
				out = append(out, h)
				open = open || strings.ContainsAny(h[len(h)-1:], ":>")
			}
		}
	}
	d := cobra.ShellCompDirectiveNoFileComp
	if open {
		d |= cobra.ShellCompDirectiveNoSpace
	}
	return out, d
}

// dirNames lists a directory's entries (devices, namespaces), none when
// it cannot be read: completion has nobody to tell.
func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
