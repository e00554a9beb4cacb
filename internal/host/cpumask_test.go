package host

import (
	"slices"
	"testing"
)

func TestCPUMask(t *testing.T) {
	for _, c := range []struct {
		mask, list string
		cpus       []int
	}{
		{"2", "1", []int{1}},
		{"00000003", "0-1", []int{0, 1}},
		{"1,00000005", "0,2,32", []int{0, 2, 32}},
		{"0", "", nil},
	} {
		cpus, err := ParseCPUMask(c.mask)
		if err != nil || !slices.Equal(cpus, c.cpus) {
			t.Errorf("ParseCPUMask(%q) = %v, %v; want %v", c.mask, cpus, err, c.cpus)
		}
		if got := FormatCPUList(cpus); got != c.list {
			t.Errorf("FormatCPUList(%v) = %q, want %q", cpus, got, c.list)
		}
		if back, _ := ParseCPUMask(FormatCPUMask(cpus)); !slices.Equal(back, c.cpus) {
			t.Errorf("FormatCPUMask(%v) = %q does not parse back", cpus, FormatCPUMask(cpus))
		}
	}
	if got := FormatCPUMask([]int{1}); got != "2" {
		t.Errorf("FormatCPUMask([1]) = %q, want 2", got)
	}
	if _, err := ParseCPUMask("zz"); err == nil {
		t.Error("ParseCPUMask(zz) accepted")
	}
}
