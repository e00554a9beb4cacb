package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// A flag shows its default one way: a plain value as --help appends it,
// "(default 10s)", from the flag's own default; a default that is a rule
// rather than a value written once at the end of the usage as
// "(default: RULE)". Never both, never "default" elsewhere in the text
// ("; default 10s without a command", "(default standard output)").
func TestFlagDefaultsShownOneWay(t *testing.T) {
	root := newRoot(&env{stdin: bytes.NewReader(nil), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	rule := regexp.MustCompile(`^(.*) \(default: [^)]*(\([^)]*\)[^)]*)*\)$`)
	word := regexp.MustCompile(`(?i)\bdefault`)
	seen := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" {
				return
			}
			seen++
			_, usage := pflag.UnquoteUsage(f)
			shown := shownDefault(f)
			if shown != "" && !strings.HasPrefix(shown, "(default ") {
				t.Errorf("%s --%s: --help appends %q, not a default", c.CommandPath(), f.Name, shown)
			}
			text := usage
			if m := rule.FindStringSubmatch(usage); m != nil {
				text = m[1]
				if shown != "" {
					t.Errorf("%s --%s: says its default twice: %q and %s", c.CommandPath(), f.Name, usage, shown)
				}
			}
			if word.MatchString(text) {
				t.Errorf("%s --%s: says its default another way than \"(default X)\" from the flag or a closing \"(default: RULE)\": %q",
					c.CommandPath(), f.Name, usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if seen < 50 {
		t.Fatalf("walked %d flags: the command tree was not walked", seen)
	}
}

func TestShownDefaultIsHelps(t *testing.T) {
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.String("output", "skbtrace.trace", "trace `FILE`")
	fs.Int("count", 0, "how many")
	fs.Duration("pre", 0, "with a trigger (default: the whole ring)")
	for name, want := range map[string]string{"output": `(default "skbtrace.trace")`, "count": "", "pre": ""} {
		if got := shownDefault(fs.Lookup(name)); got != want {
			t.Errorf("--%s: shown default %q, want %q", name, got, want)
		}
	}
}
