package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestAgentRefusesAnOpenAddressWithoutAToken: before it records or listens.
func TestAgentRefusesAnOpenAddressWithoutAToken(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "--listen", "0.0.0.0:0"},
		{"agent", "--listen", ":0"},
		{"agent", "--listen", "[::]:0", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "without a token") {
			t.Errorf("%v: exit %d, %q; want 1 and the reason", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"agent", "--tls-cert", "c.pem"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("--tls-cert without --tls-key: exit %d (%s), want a usage error", code, stderr.String())
	}
}
