package host

import "testing"

// A CPU copies at least 100 MB a second (an emulated one under TCG does
// about a gigabyte); a rate below that is a broken measurement.
func TestCopyRateIsMeasured(t *testing.T) {
	r := CopyRate()
	if r < 100e6 {
		t.Errorf("copy rate %.0f bytes/s", r)
	}
	t.Logf("copy rate %.2f GB/s", r/1e9)
}
