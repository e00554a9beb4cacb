package tcppeer

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func fullSegment() *Segment {
	return &Segment{
		Src: netip.MustParseAddr("10.201.0.2"), Dst: netip.MustParseAddr("10.201.0.1"), TTL: 17,
		SrcPort: 40001, DstPort: 80, Seq: 0xfffffff0, Ack: 12345, Flags: SYN | ACK | ECE | AE, Window: 513, Urgent: 3,
		Opts: TCPOptions{MSS: 1400, HasWScale: true, WScale: 9, SACKPermitted: true, HasTS: true, TSval: 7, TSecr: 8,
			SACK: []SACKBlock{{100, 200}}},
		Payload: []byte("hello, kernel"),
	}
}

// TestMarshalAgainstGopacket: an independent decoder agrees on every field
// and on both checksums.
func TestMarshalAgainstGopacket(t *testing.T) {
	s := fullSegment()
	pkt, err := s.marshal(42)
	if err != nil {
		t.Fatal(err)
	}
	gp := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
	ip, _ := gp.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	tcp, _ := gp.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if ip == nil || tcp == nil {
		t.Fatalf("gopacket could not decode it: %v", gp.ErrorLayer())
	}
	if err, r := ip.VerifyChecksum(); err != nil || !r.Valid {
		t.Errorf("IPv4 checksum %#x, want %#x (%v)", r.Actual, r.Correct, err)
	}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	if err, r := tcp.VerifyChecksum(); err != nil || !r.Valid {
		t.Errorf("TCP checksum %#x, want %#x (%v)", r.Actual, r.Correct, err)
	}
	if ip.Id != 42 || ip.TTL != 17 || ip.Flags != layers.IPv4DontFragment || ip.SrcIP.String() != "10.201.0.2" {
		t.Errorf("IPv4 header %+v", ip)
	}
	if tcp.Seq != s.Seq || tcp.Ack != s.Ack || !tcp.SYN || !tcp.ACK || !tcp.ECE || !tcp.NS || tcp.FIN ||
		tcp.Window != 513 || tcp.Urgent != 3 || !bytes.Equal(tcp.Payload, s.Payload) {
		t.Errorf("TCP header %+v", tcp)
	}
	kinds := map[layers.TCPOptionKind][]byte{}
	for _, o := range tcp.Options {
		kinds[o.OptionType] = o.OptionData
	}
	want := map[layers.TCPOptionKind][]byte{
		layers.TCPOptionKindMSS: {0x05, 0x78}, layers.TCPOptionKindWindowScale: {9},
		layers.TCPOptionKindSACKPermitted: nil, layers.TCPOptionKindTimestamps: {0, 0, 0, 7, 0, 0, 0, 8},
		layers.TCPOptionKindSACK: {0, 0, 0, 100, 0, 0, 0, 200},
	}
	for k, v := range want {
		if got, ok := kinds[k]; !ok || !bytes.Equal(got, v) {
			t.Errorf("option %v: got %v (present %v), want %v", k, got, ok, v)
		}
	}
}

// TestParseRoundTrip: parse gives back what marshal was given, and flags a
// corrupted checksum.
func TestParseRoundTrip(t *testing.T) {
	s := fullSegment()
	pkt, err := s.marshal(1)
	if err != nil {
		t.Fatal(err)
	}
	got := parse(pkt)
	if !got.IsTCP() || got.BadChecksum || !got.DF || got.ID != 1 {
		t.Fatalf("parsed %v (tcp %v, bad checksum %v)", got, got.IsTCP(), got.BadChecksum)
	}
	got.Opts.Raw = nil
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"addresses", [2]netip.Addr{got.Src, got.Dst}, [2]netip.Addr{s.Src, s.Dst}},
		{"ports", [2]uint16{got.SrcPort, got.DstPort}, [2]uint16{s.SrcPort, s.DstPort}},
		{"seq/ack", [2]uint32{got.Seq, got.Ack}, [2]uint32{s.Seq, s.Ack}},
		{"flags", got.Flags, s.Flags},
		{"window/urgent", [2]uint16{got.Window, got.Urgent}, [2]uint16{s.Window, s.Urgent}},
		{"options", got.Opts, s.Opts},
		{"payload", string(got.Payload), string(s.Payload)},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
		}
	}

	s.BadChecksum = true
	if pkt, err = s.marshal(1); err != nil {
		t.Fatal(err)
	}
	if !parse(pkt).BadChecksum {
		t.Error("a corrupted checksum parsed as good")
	}
}

func TestOptionsTooLong(t *testing.T) {
	s := fullSegment()
	s.Opts.SACK = make([]SACKBlock, 4)
	if _, err := s.marshal(1); err == nil {
		t.Error("52 bytes of options were accepted")
	}
}

func TestFlagsString(t *testing.T) {
	for f, want := range map[Flags]string{SYN: "S", SYN | ACK: "S.", PSH | ACK: "P.", RST: "R", FIN | ACK: "F.", 0: "none"} {
		if got := f.String(); got != want {
			t.Errorf("%#x: got %q, want %q", uint16(f), got, want)
		}
	}
}
