package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLabTable(t *testing.T) {
	dir := t.TempDir()
	reports := filepath.Join(dir, "lab.json")
	if err := os.WriteFile(reports, []byte(`[{"name":"rate-shaped","fault":"tbf","control_bits_per_second":3e10,"fault_bits_per_second":1e9,`+
		`"fixed_bits_per_second":2.9e10,"restored":0.97,"gain":0.97,"control_cost":0.97,"predicted_impact":0.9,`+
		`"remedy":"ip netns exec skbtrace-77-1-snd tc qdisc del dev skbs77-1 root","remedy_from":"doctor","signal":"","reproduced":true,"seconds":9,`+
		`"doctor":{"top_finding":"rate-shaped","agrees":true,"findings":[{"id":"rate-shaped","limit":{"kind":"tbf_rate","value":"1Gbit","where":{},"applies":{},"source":"netlink"}}],"evidence":null}}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"lab", "table", reports}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := "| `rate-shaped` | rate-shaped | `tbf_rate` | `ip netns exec skbtrace-ID-snd tc qdisc del dev skbsID root` | 30.00 Gbit/s | 1.00 Gbit/s | 29.00 Gbit/s | 97 % | 97 % (97 %) | 90 % |"
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("want the row\n%s\ngot:\n%s", want, stdout.String())
	}

	garbage := filepath.Join(dir, "garbage.json")
	if err := os.WriteFile(garbage, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main([]string{"lab", "table", garbage}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "reading lab reports "+garbage) {
		t.Errorf("a file that is no report: exit %d, %q; want 1 and what was being read", code, stderr.String())
	}
}
