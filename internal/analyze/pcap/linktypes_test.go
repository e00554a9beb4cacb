package pcap

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/skbtrace/skbtrace/internal/capture"
	"github.com/skbtrace/skbtrace/internal/packet"
)

// linkFixtureFrames is how much of tso-sender the link-type fixtures hold.
const linkFixtureFrames = 400

// linkHeaders put each link type's header in front of an IP packet, as the
// systems that write them do (a little-endian Mac for NULL and PKTAP).
var linkHeaders = []struct {
	name string
	link int
	hdr  func(ip []byte, out bool) []byte
}{
	{"null", packet.LinkNull, func(ip []byte, _ bool) []byte {
		return binary.LittleEndian.AppendUint32(nil, bsdFamily(ip, 30))
	}},
	{"loop", packet.LinkLoop, func(ip []byte, _ bool) []byte {
		return binary.BigEndian.AppendUint32(nil, bsdFamily(ip, 24))
	}},
	{"ppp", packet.LinkPPP, func(ip []byte, _ bool) []byte { return pppProto(ip) }},
	{"ppp-hdlc", packet.LinkPPPHDLC, func(ip []byte, _ bool) []byte { return append([]byte{0xff, 0x03}, pppProto(ip)...) }},
	{"cisco-hdlc", packet.LinkPPPHDLC, func(ip []byte, _ bool) []byte {
		return binary.BigEndian.AppendUint16([]byte{0x0f, 0x00}, etherTypeOf(ip))
	}},
	{"pktap", packet.LinkPKTAP, func(_ []byte, out bool) []byte {
		h := make([]byte, 108)
		binary.LittleEndian.PutUint32(h[0:], 108)
		binary.LittleEndian.PutUint32(h[4:], 1)
		binary.LittleEndian.PutUint32(h[8:], 12) // DLT_RAW on macOS, as from a utun interface
		copy(h[12:], "utun3")
		flags := uint32(1) // received
		if out {
			flags = 2
		}
		binary.LittleEndian.PutUint32(h[36:], flags)
		return h
	}},
	{"raw", packet.LinkRaw, func([]byte, bool) []byte { return nil }},
}

func etherTypeOf(ip []byte) uint16 {
	if ip[0]>>4 == 6 {
		return 0x86DD
	}
	return 0x0800
}

func bsdFamily(ip []byte, inet6 uint32) uint32 {
	if ip[0]>>4 == 6 {
		return inet6
	}
	return 2
}

func pppProto(ip []byte) []byte {
	if ip[0]>>4 == 6 {
		return []byte{0x00, 0x57}
	}
	return []byte{0x00, 0x21}
}

// sourceFrames reads the first frames of tso-sender (Linux cooked v2) as IP
// packets with their times, original lengths and directions.
type sourceFrame struct {
	ci  gopacket.CaptureInfo
	ip  []byte
	out bool
}

func sourceFrames(t *testing.T) []sourceFrame {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "tso-sender.pcap.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []sourceFrame
	var fr capture.Frame
	for len(out) < linkFixtureFrames {
		err := r.Next(&fr)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || fr.LinkType != packet.LinkSLL2 {
			t.Fatalf("tso-sender frame %d: link %d, %v", fr.Number, fr.LinkType, err)
		}
		ip := bytes.Clone(fr.Data[20:])
		out = append(out, sourceFrame{gopacket.CaptureInfo{Timestamp: time.Unix(0, fr.TimeNs), CaptureLength: len(ip), Length: fr.WireLen - 20},
			ip, fr.Data[10] == 4})
	}
	return out
}

// writeLinkFixture writes frames with a link type's headers as pcap or pcapng, gzipped.
func writeLinkFixture(t *testing.T, file string, link int, hdr func([]byte, bool) []byte, frames []sourceFrame, ng bool) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	var write func(gopacket.CaptureInfo, []byte) error
	flush := func() error { return nil }
	if ng {
		w, err := pcapgo.NewNgWriter(zw, layers.LinkType(link))
		if err != nil {
			t.Fatal(err)
		}
		write, flush = w.WritePacket, w.Flush
	} else {
		w := pcapgo.NewWriter(zw)
		if err := w.WriteFileHeader(65535, layers.LinkType(link)); err != nil {
			t.Fatal(err)
		}
		write = w.WritePacket
	}
	for _, f := range frames {
		h := hdr(f.ip, f.out)
		ci := f.ci
		ci.CaptureLength += len(h)
		ci.Length += len(h)
		if err := write(ci, append(h, f.ip...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(flush(), zw.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The link types met on Linux and macOS analyze as the same traffic does
// over Ethernet: fixtures (SKBTRACE_UPDATE_PCAP_FIXTURES=1 makes them from
// tso-sender) in pcap and pcapng, each with the same flows, packets, bytes,
// retransmissions and RTT samples as the original's frames.
func TestLinkTypeFixturesAnalyzeLikeTheOriginal(t *testing.T) {
	frames := sourceFrames(t)
	dir := filepath.Join("testdata", "linktypes")
	if os.Getenv("SKBTRACE_UPDATE_PCAP_FIXTURES") != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, lh := range linkHeaders {
			for _, ng := range []bool{false, true} {
				writeLinkFixture(t, linkFixtureFile(dir, lh.name, ng), lh.link, lh.hdr, frames, ng)
			}
		}
	}
	want := summarize(t, analyzeBytes(t, rawCapture(t, frames)))
	if len(want) == 0 {
		t.Fatal("the original frames hold no flow")
	}
	for _, lh := range linkHeaders {
		for _, ng := range []bool{false, true} {
			file := linkFixtureFile(dir, lh.name, ng)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			a, r := analyzeReport(t, data)
			if a.Malformed != nil || a.Frames != uint64(len(frames)) {
				t.Errorf("%s: %d frames, malformed %v", file, a.Frames, a.Malformed)
				continue
			}
			if got := summarize(t, r); !equalSummaries(got, want) {
				t.Errorf("%s: flows %+v, the original's %+v", file, got, want)
			}
		}
	}
}

func linkFixtureFile(dir, name string, ng bool) string {
	if ng {
		return filepath.Join(dir, name+".pcapng.gz")
	}
	return filepath.Join(dir, name+".pcap.gz")
}

// rawCapture is the frames as raw IP, the reference the fixtures are judged against.
func rawCapture(t *testing.T, frames []sourceFrame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeRaw); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := w.WritePacket(f.ci, f.ip); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func analyzeReport(t *testing.T, data []byte) (*Analyzer, *Report) {
	t.Helper()
	r, err := capture.Open(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{})
	if err := a.Run(r); err != nil {
		t.Fatal(err)
	}
	return a, a.Report("fixture", r.Format, nil)
}

func analyzeBytes(t *testing.T, data []byte) *Report {
	_, r := analyzeReport(t, data)
	return r
}

type flowSummary struct {
	src, dst                     string
	packets, payload, retransmit uint64
	rttSamples                   uint64
}

func summarize(t *testing.T, r *Report) []flowSummary {
	var out []flowSummary
	for _, f := range r.Flows {
		s := flowSummary{src: f.Src, dst: f.Dst, packets: f.Packets, payload: f.PayloadBytes}
		if f.TCP != nil {
			s.retransmit, s.rttSamples = f.TCP.Retransmissions, f.TCP.RTT.Samples
		}
		out = append(out, s)
	}
	return out
}

func equalSummaries(a, b []flowSummary) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// nflog.pcap.gz is a real NFLOG capture (the e2e test's: nft logging the
// receiver's input to group 5, tcpdump -i nflog:5): every frame's packet is
// found among the TLVs.
func TestNFLOGCapture(t *testing.T) {
	a, r := analyzeFile(t, "nflog.pcap.gz", Options{})
	f := busiest(t, r)
	if a.Malformed != nil || a.NonIP != 0 || a.Frames != 2000 || f.DataPackets < 1900 || f.Dst != "10.200.0.2:5301" {
		t.Fatalf("%d frames, %d without IP, malformed %v; busiest %s -> %s with %d data packets", a.Frames, a.NonIP, a.Malformed, f.Src, f.Dst, f.DataPackets)
	}
}
