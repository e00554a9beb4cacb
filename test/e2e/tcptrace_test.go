package e2e

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// tcptraceDir is one direction of a connection as tcptrace -l counts it.
type tcptraceDir struct {
	packets, dataPackets, dataBytes, rexmtPackets int64
	missed                                        int64 // -1: tcptrace says NA (no SYN and FIN both ways)
}

var (
	tcptraceHost = regexp.MustCompile(`(?m)^\thost \w+:\s+(\S+)$`)
	tcptracePair = func(label string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\s+` + label + `:\s+(\d+|NA)(?: \w+)?\s+` + label + `:\s+(\d+|NA)`)
	}
)

// parseTcptrace reads tcptrace -l -n's connections into directions by
// "SRC DST".
func parseTcptrace(t *testing.T, out string) map[string]tcptraceDir {
	t.Helper()
	dirs := map[string]tcptraceDir{}
	for _, block := range regexp.MustCompile(`TCP connection \d+:`).Split(out, -1)[1:] {
		hosts := tcptraceHost.FindAllStringSubmatch(block, 2)
		if len(hosts) != 2 {
			t.Fatalf("tcptrace block without its two hosts:\n%s", block)
		}
		var ab, ba tcptraceDir
		for _, f := range []struct {
			label  string
			ab, ba *int64
		}{
			{"total packets", &ab.packets, &ba.packets}, {"actual data pkts", &ab.dataPackets, &ba.dataPackets},
			{"actual data bytes", &ab.dataBytes, &ba.dataBytes}, {"rexmt data pkts", &ab.rexmtPackets, &ba.rexmtPackets},
			{"missed data", &ab.missed, &ba.missed},
		} {
			m := tcptracePair(f.label).FindStringSubmatch(block)
			if m == nil {
				t.Fatalf("tcptrace block without %q:\n%s", f.label, block)
			}
			for i, p := range []*int64{f.ab, f.ba} {
				*p = -1
				if m[1+i] != "NA" {
					*p, _ = strconv.ParseInt(m[1+i], 10, 64)
				}
			}
		}
		a, b := hosts[0][1], hosts[1][1]
		dirs[a+" "+b], dirs[b+" "+a] = ab, ba
	}
	return dirs
}

// TestPcapAgreesWithTcptrace: per flow direction, packets, data packets,
// data bytes, retransmitted packets and missed data as tcptrace -l counts
// them, on every fixture capture tcptrace reads; one was taken by a tcpdump
// that dropped 175 packets (2,036,716 bytes missed).
func TestPcapAgreesWithTcptrace(t *testing.T) {
	tcptrace := testenv.Tool(t, "tcptrace")
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.pcap.gz"))
	var compared, missedCompared int
	for _, file := range files {
		name := filepath.Base(file)
		plain := filepath.Join(t.TempDir(), strings.TrimSuffix(name, ".gz"))
		gunzip(t, file, plain)
		out, err := exec.Command(tcptrace, "-l", "-n", plain).CombinedOutput()
		if strings.Contains(string(out), "did not understand link format") {
			t.Logf("%s: tcptrace does not read its link type", name)
			continue
		}
		if err != nil {
			t.Fatalf("tcptrace %s: %v\n%s", name, err, out)
		}
		theirs := parseTcptrace(t, string(out))
		js, err := exec.Command(binary, "pcap", file, "--json").Output()
		if err != nil {
			t.Fatalf("skbtrace pcap %s: %v", name, err)
		}
		var rep struct {
			Flows []struct {
				Src, Dst     string
				Packets      int64     `json:"packets"`
				DataPackets  int64     `json:"data_packets"`
				PayloadBytes int64     `json:"payload_bytes"`
				Fragments    *struct{} `json:"ip_fragments"`
				TCP          *struct {
					Retransmissions int64 `json:"retransmissions"`
					MissedBytes     int64 `json:"missed_bytes"`
				} `json:"tcp"`
			} `json:"flows"`
		}
		if err := json.Unmarshal(js, &rep); err != nil {
			t.Fatal(err)
		}
		for _, f := range rep.Flows {
			want, ok := theirs[f.Src+" "+f.Dst]
			// Not TCP; or only its outer packets to tcptrace (VXLAN); or
			// IP fragments, which skbtrace puts back into their segments
			// and tcptrace does not.
			if !ok || f.TCP == nil || f.Fragments != nil {
				continue
			}
			compared++
			got := tcptraceDir{f.Packets, f.DataPackets, f.PayloadBytes, f.TCP.Retransmissions, f.TCP.MissedBytes}
			if want.missed < 0 {
				got.missed = -1
			} else {
				missedCompared++
			}
			if got != want {
				t.Errorf("%s %s -> %s: skbtrace %+v, tcptrace %+v", name, f.Src, f.Dst, got, want)
			}
		}
	}
	if compared < 6 || missedCompared < 4 {
		t.Errorf("compared %d directions (%d with missed data): the fixtures tcptrace reads are gone", compared, missedCompared)
	}
}

func gunzip(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
}
