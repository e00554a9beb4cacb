package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
)

// The table fits a terminal however many hooks a family has: tcp_stage's
// ten once padded every row to 255 columns.
func TestFamilyTableFitsATerminal(t *testing.T) {
	var hooks []string
	for range 10 {
		hooks = append(hooks, "tp_btf/napi_gro_receive_entry")
	}
	families := []familyStatus{
		{Family: "tcp_conn", Runs: true, Hooks: []string{"sock:inet_sock_set_state"}, Description: "TCP state changes"},
		{Family: "tcp_stage", Runs: false, Hooks: hooks, Description: strings.Repeat("where bytes spend their time ", 8)},
	}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	writeFamilyTable(tw, families)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if len(line) > 100 {
			t.Errorf("line of %d columns: %q", len(line), line)
		}
	}
	if n := strings.Count(b.String(), "tp_btf/napi_gro_receive_entry"); n != 10 {
		t.Errorf("%d of the 10 hooks shown:\n%s", n, b.String())
	}
	if !regexp.MustCompile(`(?m)^tcp_stage +skipped +where`).MatchString(b.String()) {
		t.Errorf("no skipped status for tcp_stage:\n%s", b.String())
	}
}
