package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const snmpSample = `Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 29462278
Tcp: RtoAlgorithm RtoMin ActiveOpens OutSegs RetransSegs MaxConn
Tcp: 1 200 92451 28774415 1654 -1
`

func TestParseCountersReadsHeaderValuePairs(t *testing.T) {
	c := Counters{}
	if err := ParseCounters(strings.NewReader(snmpSample), c); err != nil {
		t.Fatal(err)
	}
	if c["Tcp.RetransSegs"] != 1654 || c["Tcp.MaxConn"] != -1 || c["Ip.InReceives"] != 29462278 {
		t.Fatalf("%v", c)
	}
	later := Counters{"Tcp.RetransSegs": 1700, "Tcp.New": 5}
	d := later.Sub(c)
	if d["Tcp.RetransSegs"] != 46 || d["Tcp.New"] != 5 {
		t.Fatalf("delta %v", d)
	}
}

func TestParseCountersRejectsMismatchedLines(t *testing.T) {
	for _, bad := range []string{"Tcp: A B\nTcp: 1\n", "Tcp: A\nTcp: x\n", "garbage\n"} {
		if err := ParseCounters(strings.NewReader(bad), Counters{}); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestParseSoftnet(t *testing.T) {
	s, err := ParseSoftnet(strings.NewReader("0bf7fa1d 00000dcc 00000002 00000000\n0f14394b 00002421 00000004 00000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0].Processed != 0x0bf7fa1d || s[1].Dropped != 0x2421 || s[1].TimeSqueeze != 4 {
		t.Fatalf("%+v", s)
	}
	if _, err := ParseSoftnet(strings.NewReader("zz 1 2\n")); err == nil {
		t.Error("accepted a non-hex column")
	}
}

func TestReadMitigationsKeepsOnlyThoseInForce(t *testing.T) {
	dir := t.TempDir()
	for name, state := range map[string]string{"meltdown": "Mitigation: PTI\n", "mds": "Not affected\n", "spectre_v2": "Vulnerable\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(state), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ReadMitigations(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || m[0].Name != "meltdown" || m[0].State != "Mitigation: PTI" {
		t.Fatalf("%+v", m)
	}
}
