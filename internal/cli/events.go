package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/collect"
	"github.com/skbtrace/skbtrace/internal/host"
)

// familyStatus is one line of `events --json`.
type familyStatus struct {
	Family      string   `json:"family"`
	Runs        bool     `json:"runs"`
	Hooks       []string `json:"hooks,omitempty"`
	Programs    []string `json:"programs,omitempty"` // the BPF program behind each hook
	Reason      string   `json:"reason,omitempty"`
	Without     []string `json:"without,omitempty"` // optional hooks missing here: what the family loses`
	Verified    bool     `json:"verified"`          // decided by loading, not from BTF alone
	Description string   `json:"description"`
}

func eventsCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "events",
		Short: "list the event families and what each does on this kernel",
		Example: `  sudo skbtrace events
  skbtrace events --json | jq -r 'select(.runs | not) | .family'`,
		Long: `events lists every event family and what record does with it on this
kernel: the hook used for each attach point (a tracepoint, or a kernel
function where the kernel lacks the tracepoint), or why the family is
skipped. As root it decides by loading and attaching every program for a
moment, as record does; without privileges, from the kernel's BTF and
tracefs alone, which cannot see what the verifier would reject.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			statuses, feat, loaded, err := collect.Check()
			if err != nil {
				return err
			}
			var out []familyStatus
			for _, s := range statuses {
				fs := familyStatus{Family: s.Family.Name, Runs: s.Err == nil, Verified: loaded, Description: s.Family.Description,
					Without: s.Without}
				for _, h := range s.Hooks {
					fs.Hooks = append(fs.Hooks, h.String())
					fs.Programs = append(fs.Programs, h.Program)
				}
				if s.Err != nil {
					fs.Reason = s.Err.Error()
				}
				out = append(out, fs)
			}
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
				for _, fs := range out {
					if err := enc.Encode(fs); err != nil {
						return err
					}
				}
				return nil
			}
			kernel := host.ReadIdentity().Kernel
			if loaded {
				fmt.Fprintf(e.stdout, "kernel %s, decided by loading every program: %s\n\n", kernel, feat)
			} else {
				fmt.Fprintf(e.stdout, "kernel %s, judged from BTF and tracefs alone (loading needs root or CAP_BPF+CAP_PERFMON)\n\n", kernel)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			writeFamilyTable(tw, out)
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, fs := range out {
				if !fs.Runs {
					fmt.Fprintf(e.stdout, "\n%s skipped: %s\n", fs.Family, fs.Reason)
				}
				for _, w := range fs.Without {
					fmt.Fprintf(e.stdout, "\n%s runs with %s\n", fs.Family, w)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per family")
	return c
}

// The table fits a terminal: each family's hooks, up to ten of them, go on
// lines of their own below it, and the description wraps, rather than
// padding every row to the longest hook list.
const (
	descriptionWidth = 60
	hooksWidth       = 78
)

func writeFamilyTable(w io.Writer, families []familyStatus) {
	fmt.Fprintln(w, "FAMILY\tSTATUS\tDESCRIPTION")
	for _, fs := range families {
		status := "ok"
		if !fs.Runs {
			status = "skipped"
		}
		for i, line := range wrapWords(fs.Description, " ", descriptionWidth) {
			if i == 0 {
				fmt.Fprintf(w, "%s\t%s\t%s\n", fs.Family, status, line)
			} else {
				fmt.Fprintf(w, "\t\t%s\n", line)
			}
		}
		for i, line := range wrapWords(strings.Join(fs.Hooks, " "), " ", hooksWidth-len("hooks: ")) {
			label := "hooks: "
			if i > 0 {
				label = "       "
			}
			fmt.Fprintf(w, "\t\t%s%s\n", label, line)
		}
	}
}

// wrapWords joins the words of s (split at sep) into lines of at most width
// characters; a longer word gets a line of its own.
func wrapWords(s, sep string, width int) []string {
	var lines []string
	var line strings.Builder
	for _, word := range strings.Split(s, sep) {
		if word == "" {
			continue
		}
		if line.Len() > 0 && line.Len()+1+len(word) > width {
			lines = append(lines, line.String())
			line.Reset()
		}
		if line.Len() > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(word)
	}
	if line.Len() > 0 {
		lines = append(lines, line.String())
	}
	return lines
}
