package host

import (
	"reflect"
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-3,6":     {0, 1, 2, 3, 6},
		"0-1,4-5,8": {0, 1, 4, 5, 8},
		"0-1\n":     {0, 1}, // /sys/devices/system/cpu/online ends in a newline
		" 0-1\n":    {0, 1},
		"3-3":       {3},
		"0,,2":      {0, 2},
		// A CPU named twice is one CPU: counting it twice would double the
		// window's CPU time. (The order is not the point: see below.)
		"2,2,1": {1, 2},
		"0-3,2": {0, 1, 2, 3},
	} {
		got, err := ParseCPUList(in)
		if err != nil || !reflect.DeepEqual(slices.Sorted(slices.Values(got)), want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", ",", "a", "0-a", "3-1", "-1", "1-", "0,x"} {
		if got, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", in, got)
		}
	}
}
