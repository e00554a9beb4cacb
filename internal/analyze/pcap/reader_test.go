package pcap

// Reading captures: byte orders, resolutions, pcapng and gzip, a capture cut
// short, malformed and snapped frames.

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/skbtrace/skbtrace/internal/capture"
)

// pcapOf writes frames into a classic pcap with the given byte order and
// timestamp resolution, by hand, so both byte orders are covered.
func pcapOf(order binary.ByteOrder, nanos bool, link uint32, frames ...[]byte) []byte {
	var b bytes.Buffer
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	hdr := make([]byte, 24)
	order.PutUint32(hdr[0:], magic)
	order.PutUint16(hdr[4:], 2)
	order.PutUint16(hdr[6:], 4)
	order.PutUint32(hdr[16:], 65535)
	order.PutUint32(hdr[20:], link)
	b.Write(hdr)
	for i, f := range frames {
		rec := make([]byte, 16)
		order.PutUint32(rec[0:], uint32(1700000000+i))
		order.PutUint32(rec[4:], 500)
		order.PutUint32(rec[8:], uint32(len(f)))
		order.PutUint32(rec[12:], uint32(len(f)))
		b.Write(rec)
		b.Write(f)
	}
	return b.Bytes()
}

func TestReaderHandlesByteOrdersResolutionsPcapngAndGzip(t *testing.T) {
	f1 := tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, 100, 0, 1000, false)
	f2 := tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, 1100, 0, 1000, false)
	var ng bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&ng, pcapgo.NgInterface{LinkType: layers.LinkTypeEthernet, SnapLength: 65535}, pcapgo.DefaultNgWriterOptions)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := w.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkTypeRaw, SnapLength: 65535})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(f1), Length: len(f1)}, f1); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1700000001, 0), CaptureLength: len(f2) - 14, Length: len(f2) - 14, InterfaceIndex: raw}, f2[14:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := newGzip(&gz)
	if _, err := zw.Write(pcapOf(binary.BigEndian, true, 1, f1, f2)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"little-endian µs":       pcapOf(binary.LittleEndian, false, 1, f1, f2),
		"big-endian ns":          pcapOf(binary.BigEndian, true, 1, f1, f2),
		"pcapng, two link types": ng.Bytes(),
		"gzip":                   gz.Bytes(),
	} {
		r, err := capture.Open(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a := New(Options{})
		if err := a.Run(r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rep := a.Report(name, r.Format, nil)
		if len(rep.Flows) != 1 || rep.Flows[0].PayloadBytes != 2000 || rep.Capture.Seconds != 1 {
			t.Fatalf("%s (%s): %+v %+v", name, r.Format, rep.Capture, rep.Flows)
		}
	}
}

func TestTruncatedCaptureIsAnalyzedUpToTheDamage(t *testing.T) {
	f := tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, 100, 0, 1000, false)
	data := pcapOf(binary.LittleEndian, false, 1, f, f, f)
	data = data[:len(data)-100]
	r, err := capture.Open(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{})
	runErr := a.Run(r)
	if runErr == nil || !strings.Contains(runErr.Error(), "reading packet 3") || !strings.Contains(runErr.Error(), "truncated") {
		t.Fatalf("err %v", runErr)
	}
	rep := a.Report("cut", r.Format, runErr)
	if rep.Capture.Frames != 2 || rep.Capture.Error == "" || rep.Flows[0].DataPackets != 2 {
		t.Fatalf("%+v", rep.Capture)
	}
}

// One corrupted IP header in the middle of a capture costs that frame
// only: it is counted by the header at fault, named by number, and every
// other frame is analyzed. A capture of an unknown link type is an error.
func TestMalformedFrameIsCountedAndSkipped(t *testing.T) {
	var frames [][]byte
	for i := 0; i < 9; i++ {
		frames = append(frames, tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, 100+uint32(i)*10, 0, 10, false))
	}
	frames[4][14] = 0x41 // IHL of one word
	r, err := capture.Open(bytes.NewReader(pcapOf(binary.LittleEndian, false, 1, frames...)))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{})
	if err := a.Run(r); err != nil {
		t.Fatal(err)
	}
	rep := a.Report("t.pcap", r.Format, nil)
	if a.Malformed["IP header"] != 1 || len(a.MalformedFirst) != 1 || a.MalformedFirst[0].Number != 5 ||
		rep.Capture.Malformed != 1 || len(rep.Flows) != 1 || rep.Flows[0].Packets != 8 {
		t.Fatalf("malformed %v %v, report %+v", a.Malformed, a.MalformedFirst, rep.Capture)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "1 malformed frame skipped (IP header 1): #5 IP header length or version invalid") {
		t.Fatalf("text report:\n%s", text.String())
	}
	if r, err = capture.Open(bytes.NewReader(pcapOf(binary.LittleEndian, false, 147, frames[0], frames[1]))); err != nil {
		t.Fatal(err)
	}
	a = New(Options{})
	err = a.Run(r)
	if err == nil || !strings.Contains(err.Error(), "unsupported link type 147 (supported: ") {
		t.Fatalf("err %v", err)
	}
	// Frames of a link type not read are not malformed, and the capture
	// is not damaged: it says so.
	text.Reset()
	rep = a.Report("t.pcap", r.Format, err)
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if rep.Capture.Malformed != 0 || strings.Contains(text.String(), "damaged") ||
		!strings.Contains(text.String(), "2 frames of unsupported link type 147 skipped") ||
		!strings.Contains(text.String(), "nothing was analyzed") {
		t.Fatalf("report of an unsupported link type:\n%s", text.String())
	}
	if _, err := capture.Open(bytes.NewReader([]byte("not a capture at all"))); err == nil || !strings.Contains(err.Error(), "not a pcap or pcapng capture: it starts with 0x6e6f7420") {
		t.Fatalf("err %v", err)
	}
	if _, err := capture.Open(bytes.NewReader([]byte("ab\n"))); err == nil || !strings.Contains(err.Error(), "not a pcap or pcapng capture: 3 bytes in all") {
		t.Fatalf("err %v", err)
	}
}

func FuzzCapture(f *testing.F) {
	fr := tcpFrame(f, "10.0.0.1", "10.0.0.2", 1, 2, 100, 0, 100, false)
	f.Add(pcapOf(binary.LittleEndian, false, 1, fr, fr))
	f.Add(pcapOf(binary.BigEndian, true, 101, fr[14:]))
	f.Add([]byte{0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a})
	// A TCP segment in IPv4 fragments, last first, and an IPv6 one.
	v4 := fragments(f, ipPacket(f, false, false, 3000), 1232)
	f.Add(pcapOf(binary.LittleEndian, false, 1, v4[2], v4[1], v4[0]))
	f.Add(pcapOf(binary.LittleEndian, false, 1, fragments(f, ipPacket(f, true, false, 2000), 1232)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := capture.Open(bytes.NewReader(data))
		if err != nil {
			return
		}
		a := New(Options{Graphs: true})
		runErr := a.Run(r)
		rep := a.Report("fuzz", r.Format, runErr)
		if err := rep.WriteText(&bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
	})
}

func newGzip(w *bytes.Buffer) *gzip.Writer { return gzip.NewWriter(w) }

// A capture taken with -s 128 says how many frames its snaplen cut, cut
// inside a header or not.
func TestSnaplenCutFramesAreCounted(t *testing.T) {
	var frames [][]byte
	for i := range 5 {
		frames = append(frames, tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, 1000+uint32(i)*1448, 0, 1448, false))
	}
	frames = append(frames, tcpFrame(t, "10.0.0.2", "10.0.0.1", 2, 1, 1, 1000, 0, true))
	a := New(Options{})
	for i, f := range frames {
		data := f
		if len(data) > 128 {
			data = data[:128]
		}
		a.Add(capture.Frame{Number: uint64(i + 1), TimeNs: int64(1e18) + int64(i), LinkType: 1, WireLen: len(f), Data: data})
	}
	if rep := a.Report("s128", "pcap", nil); rep.Capture.Snapped != 5 || rep.Capture.Truncated != 0 {
		t.Errorf("%d frames cut by the snaplen (%d inside a header), want 5 (none inside)", rep.Capture.Snapped, rep.Capture.Truncated)
	}
}
