package cli

import (
	"bytes"
	"strings"
	"testing"
)

// A sampling rate out of range names the flag the user typed and the
// range, before anything is loaded: it said "-F 0", a flag profile has not.
func TestProfileFrequencyOutOfRangeNamesTheFlag(t *testing.T) {
	for _, hz := range []string{"0", "-5", "10001"} {
		var stderr bytes.Buffer
		code := Main([]string{"profile", "--frequency", hz, "-d", "1"}, bytes.NewReader(nil), &bytes.Buffer{}, &stderr)
		want := "skbtrace: --frequency " + hz + ": the sampling rate must be between 1 and 10000 Hz\n"
		if code != 2 || !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("--frequency %s: exit %d, %q; want exit 2 and %q", hz, code, stderr.String(), want)
		}
	}
}
