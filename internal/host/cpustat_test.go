package host

import (
	"strings"
	"testing"
)

// The shape of seed 000: one CPU, 63 % sys and 36 % softirq while iperf3 runs.
const procStat = `cpu  1000 0 63000 1000 0 0 36000 0 0 0
cpu0 1000 0 63000 1000 0 0 36000 0 0 0
intr 123 0 0
ctxt 456
`

func TestParseCPUTimes(t *testing.T) {
	cpus, err := ParseCPUTimes(strings.NewReader(procStat))
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) != 1 {
		t.Fatalf("%d CPUs, want 1", len(cpus))
	}
	c := cpus[0]
	if c.System != 63000 || c.SoftIRQ != 36000 || c.Busy() != 100000 || c.Total() != 101000 {
		t.Fatalf("parsed %+v", c)
	}
	d := c.Sub(CPUTimes{System: 62000, SoftIRQ: 35000, Idle: 1000})
	if d.System != 1000 || d.SoftIRQ != 1000 || d.Idle != 0 {
		t.Fatalf("difference %+v", d)
	}
	if _, err := ParseCPUTimes(strings.NewReader("cpu0 1 2 3 x 5 6 7 8\n")); err == nil {
		t.Fatal("a bad field parsed")
	}
}
