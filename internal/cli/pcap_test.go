package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// An MTU no link has is a usage error with the range, before the capture
// is read; --mtu 0 was taken silently as "infer it".
func TestPcapRefusesImpossibleMTUs(t *testing.T) {
	capture := filepath.Join("..", "analyze", "pcap", "testdata", "veth-receiver-gso.pcap.gz")
	for _, mtu := range []string{"0", "-1", "67", "65537"} {
		var stdout, stderr bytes.Buffer
		code := Main([]string{"pcap", capture, "--mtu", mtu}, bytes.NewReader(nil), &stdout, &stderr)
		want := "skbtrace: --mtu " + mtu + " is not an MTU (68-65536)\n"
		if code != 2 || !strings.HasPrefix(stderr.String(), want) || stdout.Len() != 0 {
			t.Errorf("--mtu %s: exit %d, stderr %q, %d bytes out; want exit 2, %q and no report", mtu, code, stderr.String(), stdout.Len(), want)
		}
	}
	for _, mtu := range []string{"68", "1500", "65536"} {
		var stdout, stderr bytes.Buffer
		if code := Main([]string{"pcap", capture, "--mtu", mtu}, bytes.NewReader(nil), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "tcp 10.99.3.1") {
			t.Errorf("--mtu %s: exit %d, %s%s", mtu, code, stderr.String(), stdout.String())
		}
	}
}
