package packet

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// frame serializes layers with lengths and checksums computed.
func frame(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func eth(next layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: next}
}

func ip4(src, dst string, id uint16, df bool, proto layers.IPProtocol) *layers.IPv4 {
	l := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: id, Protocol: proto, SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	if df {
		l.Flags = layers.IPv4DontFragment
	}
	return l
}

func tcpSyn() *layers.TCP {
	return &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1000, SYN: true, Window: 64240, Options: []layers.TCPOption{
		{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}},
		{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2},
		{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}},
	}}
}

func TestDecodeEthernetVLANIPv4TCPWithOptions(t *testing.T) {
	tcp := tcpSyn()
	ip := ip4("10.0.0.1", "10.0.0.2", 77, true, layers.IPProtocolTCP)
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	data := frame(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 6, Type: layers.EthernetTypeIPv4}, ip, tcp, gopacket.Payload(make([]byte, 100)))
	var p Packet
	if err := Decode(LinkEthernet, data, len(data), &p); err != nil {
		t.Fatal(err)
	}
	if !p.HasTCP || p.Outer.Src.String() != "10.0.0.1" || p.Outer.ID != 77 || !p.Outer.DF || p.LinkHdrBytes != 22 {
		t.Fatalf("%+v", p)
	}
	if p.TCP.MSS != 1460 || p.TCP.WScale != 7 || !p.TCP.SACKOK || p.TCP.Flags&SYN == 0 || p.TCP.PayloadLen != 100 {
		t.Fatalf("tcp %+v", p.TCP)
	}
}

func TestDecodeKeepsLengthsUnderASnaplen(t *testing.T) {
	ip := ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 5, ACK: true, Window: 10}
	data := frame(t, eth(layers.EthernetTypeIPv4), ip, tcp, gopacket.Payload(make([]byte, 60000)))
	var p Packet
	if err := Decode(LinkEthernet, data[:96], len(data), &p); err != nil {
		t.Fatal(err)
	}
	if !p.HasTCP || p.TCP.PayloadLen != 60000 || p.Outer.TotalLen != 60040 {
		t.Fatalf("payload %d, total %d", p.TCP.PayloadLen, p.Outer.TotalLen)
	}
}

func TestDecodeIPv6WithExtensionHeaders(t *testing.T) {
	ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolIPv6HopByHop,
		SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
	hop := &layers.IPv6HopByHop{}
	hop.NextHeader = layers.IPProtocolTCP
	hop.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}
	tcp := &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 9, ACK: true, Window: 3}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	data := frame(t, eth(layers.EthernetTypeIPv6), ip, hop, tcp, gopacket.Payload(make([]byte, 10)))
	var p Packet
	if err := Decode(LinkEthernet, data, len(data), &p); err != nil {
		t.Fatal(err)
	}
	if !p.HasTCP || p.Outer.Version != 6 || p.Outer.HdrLen != 48 || p.TCP.PayloadLen != 10 || p.Outer.Dst.String() != "fd00::2" {
		t.Fatalf("%+v", p)
	}
}

func TestDecodeVXLANBothHeaders(t *testing.T) {
	inner := ip4("10.201.0.1", "10.201.0.2", 500, true, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1, ACK: true, Window: 100}
	if err := tcp.SetNetworkLayerForChecksum(inner); err != nil {
		t.Fatal(err)
	}
	data := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42},
		eth(layers.EthernetTypeIPv4), inner, tcp, gopacket.Payload(make([]byte, 1400)))
	var p Packet
	if err := Decode(LinkEthernet, data, len(data), &p); err != nil {
		t.Fatal(err)
	}
	if p.Encap != EncapVXLAN || p.VNI != 42 || p.Outer.DF || p.Outer.ID != 9 || p.OuterUDP.SrcPort != 33333 {
		t.Fatalf("outer %+v", p)
	}
	if !p.HasTCP || p.Inner.ID != 500 || p.L3().Src.String() != "10.201.0.1" || p.TCP.PayloadLen != 1400 {
		t.Fatalf("inner %+v %+v", p.Inner, p.TCP)
	}
}

func TestDecodeGeneveWithOptions(t *testing.T) {
	inner := ip4("10.1.0.1", "10.1.0.2", 3, false, layers.IPProtocolUDP)
	geneve := make([]byte, 16)
	geneve[0] = 2 // two 4-byte option words
	binary.BigEndian.PutUint16(geneve[2:], 0x6558)
	binary.BigEndian.PutUint32(geneve[4:], 7<<8)
	innerFrame := frame(t, eth(layers.EthernetTypeIPv4), inner, &layers.UDP{SrcPort: 5, DstPort: 6}, gopacket.Payload(make([]byte, 20)))
	data := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 1, DstPort: 6081}, gopacket.Payload(append(geneve, innerFrame...)))
	var p Packet
	if err := Decode(LinkEthernet, data, len(data), &p); err != nil {
		t.Fatal(err)
	}
	if p.Encap != EncapGeneve || p.VNI != 7 || !p.HasUDP || p.UDP.DstPort != 6 || p.Inner.ID != 3 {
		t.Fatalf("%+v", p)
	}
}

func TestDecodeCookedAndRawLinks(t *testing.T) {
	ip := ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolUDP)
	body := frame(t, ip, &layers.UDP{SrcPort: 1, DstPort: 2}, gopacket.Payload(make([]byte, 8)))
	sll := append(make([]byte, 16), body...)
	binary.BigEndian.PutUint16(sll[14:], 0x0800)
	sll2 := append(make([]byte, 20), body...)
	binary.BigEndian.PutUint16(sll2[0:], 0x0800)
	for _, c := range []struct {
		link int
		data []byte
	}{{LinkSLL, sll}, {LinkSLL2, sll2}, {LinkRaw, body}, {LinkIPv4, body}} {
		var p Packet
		if err := Decode(c.link, c.data, len(c.data), &p); err != nil || !p.HasUDP || p.UDP.DstPort != 2 {
			t.Errorf("link %d: %v %+v", c.link, err, p)
		}
	}
}

func TestDecodeRejectsContradictions(t *testing.T) {
	ip := ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolTCP)
	good := frame(t, eth(layers.EthernetTypeIPv4), ip, &layers.TCP{SrcPort: 1, DstPort: 2}, gopacket.Payload(make([]byte, 4)))
	badIHL := append([]byte(nil), good...)
	badIHL[14] = 0x42 // IHL 2 words
	badTCP := append([]byte(nil), good...)
	badTCP[14+20+12] = 0xf0 // 60-byte TCP header in a 24-byte segment
	var p Packet
	for name, data := range map[string][]byte{"ihl": badIHL, "tcp": badTCP} {
		if err := Decode(LinkEthernet, data, len(data), &p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if err := Decode(LinkEthernet, good[:10], len(good[:10]), &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("short ethernet: %v", err)
	}
	if err := Decode(999, good, len(good), &p); err == nil {
		t.Error("unknown link type accepted")
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	inner := ip4("10.201.0.1", "10.201.0.2", 500, true, layers.IPProtocolTCP)
	data := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42},
		eth(layers.EthernetTypeIPv4), inner, tcpSyn(), gopacket.Payload(make([]byte, 100)))
	var p Packet
	if n := testing.AllocsPerRun(100, func() { Decode(LinkEthernet, data, len(data), &p) }); n != 0 {
		t.Fatalf("%v allocations per decode", n)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(LinkEthernet, frame(f, eth(layers.EthernetTypeIPv4), ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolTCP), tcpSyn()), uint16(0))
	f.Add(LinkEthernet, frame(f, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 3, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 1}, eth(layers.EthernetTypeIPv4),
		ip4("10.1.0.1", "10.1.0.2", 2, false, layers.IPProtocolTCP), tcpSyn()), uint16(0))
	f.Add(LinkRaw, []byte{0x60, 0, 0, 0, 0, 8, 0, 64}, uint16(0))
	f.Add(LinkRaw, append(append(ipv4Fragment(9, true, true, 0, 1468, 6), tcpHeader(1)...), make([]byte, 1416)...), uint16(128))
	f.Add(LinkRaw, append(ipv4Fragment(9, false, false, 1448, 100, 17), make([]byte, 80)...), uint16(0))
	f.Add(LinkRaw, ipv6Fragment(5, true, 0, 6, append(tcpHeader(1), make([]byte, 100)...)), uint16(0))
	f.Add(LinkRaw, ipv6Fragment(5, false, 1232, 6, make([]byte, 100)), uint16(0))
	// snap, when inside the frame, is where the capture cut it.
	f.Fuzz(func(t *testing.T, link int, data []byte, snap uint16) {
		var p Packet
		captured := data
		if snap > 0 && int(snap) < len(data) {
			captured = data[:snap]
		}
		err := Decode(link, captured, len(data), &p)
		if fi := p.Frag(); err == nil && fi != nil && fi.FragOffset != 0 && fi == p.L3() && (p.HasTCP || p.HasUDP || p.Truncated) {
			t.Fatalf("a later fragment with a transport header: tcp %v udp %v truncated %v", p.HasTCP, p.HasUDP, p.Truncated)
		}
		if err != nil || !p.HasTCP {
			return
		}
		// The lengths must add up to the IP header's, whatever the capture holds.
		ip := p.L3()
		if p.TCP.HdrLen < 20 || uint32(ip.HdrLen)+uint32(p.TCP.HdrLen)+p.TCP.PayloadLen != ip.TotalLen {
			t.Fatalf("IP total %d, IP header %d, TCP header %d, payload %d", ip.TotalLen, ip.HdrLen, p.TCP.HdrLen, p.TCP.PayloadLen)
		}
	})
}

// bigTCPv4 is a GSO packet above 64 KB as Linux 6.3's BIG TCP sends it, or
// a TSO sender's capture: IPv4 total length 0.
func bigTCPv4(t *testing.T, payload int) []byte {
	ip := ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolTCP)
	data := frame(t, eth(layers.EthernetTypeIPv4), ip, &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 5, ACK: true, Window: 10, DataOffset: 5},
		gopacket.Payload(make([]byte, payload)))
	binary.BigEndian.PutUint16(data[14+2:], 0)
	return data
}

func TestDecodeTakesAZeroIPv4LengthFromTheFrame(t *testing.T) {
	data := bigTCPv4(t, 80000)
	var p Packet
	// Cut by a 128-byte snaplen, as such captures usually are.
	if err := Decode(LinkEthernet, data[:128], len(data), &p); err != nil {
		t.Fatal(err)
	}
	if !p.HasTCP || !p.Outer.LenFromFrame || p.Outer.TotalLen != 80040 || p.TCP.PayloadLen != 80000 {
		t.Fatalf("from frame %v, total %d, payload %d", p.Outer.LenFromFrame, p.Outer.TotalLen, p.TCP.PayloadLen)
	}
}

// jumbogram is an IPv6 packet with payload length 0 and, when hbh, a
// hop-by-hop header carrying the jumbo payload option (RFC 2675), as BIG
// TCP for IPv6 sends it (Linux 5.19).
func jumbogram(t *testing.T, payload int, hbh bool) []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	tcp[12], tcp[13] = 5<<4, 0x10
	ip := make([]byte, 40)
	ip[0], ip[7] = 0x60, 64
	ip[8], ip[23], ip[24], ip[39] = 0xfd, 1, 0xfd, 2
	ip[6] = 6
	var ext []byte
	if hbh {
		ip[6] = 0
		ext = make([]byte, 8)
		ext[0], ext[1] = 6, 0
		ext[2], ext[3] = 0xC2, 4
		binary.BigEndian.PutUint32(ext[4:], uint32(len(ext)+len(tcp)+payload))
	}
	hdr := frame(t, eth(layers.EthernetTypeIPv6))[:14] // serializing pads to the 60-byte minimum
	return append(append(append(append(hdr, ip...), ext...), tcp...), make([]byte, payload)...)
}

func TestDecodeIPv6Jumbograms(t *testing.T) {
	for _, hbh := range []bool{true, false} {
		data := jumbogram(t, 80000, hbh)
		var p Packet
		if err := Decode(LinkEthernet, data[:128], len(data), &p); err != nil {
			t.Fatalf("hop-by-hop %v: %v", hbh, err)
		}
		hdrs := uint32(40 + 20)
		if hbh {
			hdrs += 8
		}
		if !p.HasTCP || p.TCP.PayloadLen != 80000 || p.Outer.TotalLen != hdrs+80000 || p.Outer.LenFromFrame == hbh {
			t.Fatalf("hop-by-hop %v: total %d, payload %d, from frame %v", hbh, p.Outer.TotalLen, p.TCP.PayloadLen, p.Outer.LenFromFrame)
		}
	}
}

// BIG TCP through a VXLAN tunnel: both IPv4 lengths read 0.
func TestDecodeBigTCPInsideVXLAN(t *testing.T) {
	inner := bigTCPv4(t, 70000)
	outer := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42}, gopacket.Payload(inner))
	binary.BigEndian.PutUint16(outer[14+2:], 0)
	binary.BigEndian.PutUint16(outer[14+20+4:], 0) // UDP length too
	var p Packet
	if err := Decode(LinkEthernet, outer[:200], len(outer), &p); err != nil {
		t.Fatal(err)
	}
	if p.Encap != EncapVXLAN || !p.HasTCP || p.Inner.TotalLen != 70040 || !p.Inner.LenFromFrame || p.Outer.TotalLen != uint32(len(outer)-14) {
		t.Fatalf("encap %d, inner total %d, outer total %d", p.Encap, p.Inner.TotalLen, p.Outer.TotalLen)
	}
}

// Every link type's header in front of the same IPv4/TCP packet decodes to
// that packet, with the direction where the header gives one.
func TestDecodeLinkTypes(t *testing.T) {
	ip := ip4("10.0.0.1", "10.0.0.2", 7, true, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1, ACK: true, Window: 100}
	pkt := frame(t, ip, tcp, gopacket.Payload(make([]byte, 100)))
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	nflogHdr := []byte{2, 0, 0, 5}
	prefix := append(binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, 4+8), 10), "skbtrace"...)
	payloadTLV := binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(nil, uint16(4+len(pkt))), 9)
	pktap := make([]byte, 108)
	binary.LittleEndian.PutUint32(pktap[0:], 108)
	binary.LittleEndian.PutUint32(pktap[4:], 1)               // a packet follows
	binary.LittleEndian.PutUint32(pktap[8:], uint32(LinkRaw)) // of this link type
	binary.LittleEndian.PutUint32(pktap[36:], 0x2)            // sent
	for _, c := range []struct {
		name string
		link int
		hdr  []byte
		dir  uint8
	}{
		{"null, little-endian host", LinkNull, le32(2), DirUnknown},
		{"null, big-endian host", LinkNull, be32(2), DirUnknown},
		{"loop", LinkLoop, be32(2), DirUnknown},
		{"ppp", LinkPPP, []byte{0x00, 0x21}, DirUnknown},
		{"ppp with address and control", LinkPPP, []byte{0xff, 0x03, 0x00, 0x21}, DirUnknown},
		{"ppp, protocol compressed", LinkPPP, []byte{0x21}, DirUnknown},
		{"ppp in hdlc", LinkPPPHDLC, []byte{0xff, 0x03, 0x00, 0x21}, DirUnknown},
		{"cisco hdlc", LinkPPPHDLC, []byte{0x0f, 0x00, 0x08, 0x00}, DirUnknown},
		{"nflog", LinkNFLOG, append(append(nflogHdr, prefix...), payloadTLV...), DirUnknown},
		{"pktap", LinkPKTAP, pktap, DirOut},
	} {
		data := append(append([]byte(nil), c.hdr...), pkt...)
		var p Packet
		if err := Decode(c.link, data, len(data), &p); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !p.HasTCP || p.TCP.DstPort != 5201 || p.Outer.TotalLen != uint32(len(pkt)) || p.Direction != c.dir || int(p.LinkHdrBytes) != len(c.hdr) {
			t.Errorf("%s: tcp %v port %d total %d direction %d link header %d", c.name, p.HasTCP, p.TCP.DstPort, p.Outer.TotalLen, p.Direction, p.LinkHdrBytes)
		}
	}
	// An IPv6 family on each BSD: 24, 28, 30.
	ip6 := jumbogram(t, 100, false)[14:]
	binary.BigEndian.PutUint16(ip6[4:], uint16(len(ip6)-40))
	for _, family := range []uint32{24, 28, 30} {
		data := append(le32(family), ip6...)
		var p Packet
		if err := Decode(LinkNull, data, len(data), &p); err != nil || !p.HasTCP || p.Outer.Version != 6 {
			t.Errorf("null family %d: %v, version %d", family, err, p.Outer.Version)
		}
	}
}

// An IPv6 jumbogram inside Geneve (an IP payload, protocol 0x86DD): its
// length comes from the hop-by-hop option, the outer IPv4's from the frame.
func TestDecodeJumbogramInsideGeneve(t *testing.T) {
	inner := jumbogram(t, 90000, true)[14:]
	geneve := make([]byte, 8)
	binary.BigEndian.PutUint16(geneve[2:], 0x86DD)
	binary.BigEndian.PutUint32(geneve[4:], 7<<8)
	outer := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: GenevePort}, gopacket.Payload(append(geneve, inner...)))
	binary.BigEndian.PutUint16(outer[14+2:], 0)
	var p Packet
	if err := Decode(LinkEthernet, outer[:256], len(outer), &p); err != nil {
		t.Fatal(err)
	}
	if p.Encap != EncapGeneve || p.VNI != 7 || !p.HasTCP || p.Inner.TotalLen != 40+8+20+90000 || p.TCP.PayloadLen != 90000 || !p.Outer.LenFromFrame {
		t.Fatalf("encap %d vni %d, inner total %d, payload %d, outer from frame %v", p.Encap, p.VNI, p.Inner.TotalLen, p.TCP.PayloadLen, p.Outer.LenFromFrame)
	}
}

// ipv4Fragment is an IPv4 header written by hand: ID, DF, MF, the offset in
// bytes and the total length, with proto as the datagram's protocol.
func ipv4Fragment(id uint16, df, mf bool, offset, total uint16, proto byte) []byte {
	h := make([]byte, 20)
	h[0], h[8], h[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(h[2:], total)
	binary.BigEndian.PutUint16(h[4:], id)
	flags := offset / 8
	if df {
		flags |= 0x4000
	}
	if mf {
		flags |= 0x2000
	}
	binary.BigEndian.PutUint16(h[6:], flags)
	copy(h[12:], []byte{10, 200, 0, 1, 10, 200, 0, 2})
	return h
}

// tcpHeader is a 32-byte TCP header with NOP, NOP, timestamps, as Linux sends.
func tcpHeader(seq uint32) []byte {
	h := make([]byte, 32)
	binary.BigEndian.PutUint16(h[0:], 57864)
	binary.BigEndian.PutUint16(h[2:], 5201)
	binary.BigEndian.PutUint32(h[4:], seq)
	h[12], h[13] = 8<<4, 0x18
	copy(h[20:], []byte{1, 1, 8, 10})
	return h
}

// A TSO packet that QEMU 7.2's e1000e sent as IP fragments (the e1000e
// fixture's first datagram): 1468-byte fragments with MF and DF, the first
// holding the TCP header, the last 52 bytes long. Captured at 128 bytes.
func TestDecodeIPv4Fragments(t *testing.T) {
	ethHdr := frame(t, eth(layers.EthernetTypeIPv4))[:14]
	first := append(append(append(append([]byte(nil), ethHdr...), ipv4Fragment(11869, true, true, 0, 1468, 6)...), tcpHeader(38)...), make([]byte, 1416)...)
	middle := append(append(append([]byte(nil), ethHdr...), ipv4Fragment(11869, true, true, 1448, 1468, 6)...), make([]byte, 1448)...)
	last := append(append(append([]byte(nil), ethHdr...), ipv4Fragment(11869, true, false, 7240, 52, 6)...), make([]byte, 32)...)
	for _, c := range []struct {
		name              string
		data              []byte
		tcp, more         bool
		offset            uint16
		fragLen, tcpBytes uint32
	}{
		{"first", first, true, true, 0, 1448, 1416},
		{"middle", middle, false, true, 1448, 1448, 0},
		{"last", last, false, false, 7240, 32, 0},
	} {
		var p Packet
		if err := Decode(LinkEthernet, c.data[:min(128, len(c.data))], len(c.data), &p); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ip := &p.Outer
		if !ip.Fragment || ip.MoreFrags != c.more || ip.FragOffset != c.offset || ip.FragLen != c.fragLen || ip.ID != 11869 || !ip.DF || ip.Proto != 6 {
			t.Errorf("%s: fragment %v more %v offset %d length %d id %d df %v proto %d", c.name, ip.Fragment, ip.MoreFrags, ip.FragOffset, ip.FragLen, ip.ID, ip.DF, ip.Proto)
		}
		// A later fragment has no transport header to cut: not truncated.
		if p.HasTCP != c.tcp || p.TCP.PayloadLen != c.tcpBytes || p.Truncated || p.Frag() != ip {
			t.Errorf("%s: tcp %v payload %d truncated %v", c.name, p.HasTCP, p.TCP.PayloadLen, p.Truncated)
		}
	}
	var p Packet
	whole := append(append(append([]byte(nil), ethHdr...), ipv4Fragment(1, true, false, 0, 52, 6)...), tcpHeader(1)...)
	if err := Decode(LinkEthernet, whole, len(whole), &p); err != nil || p.Outer.Fragment || p.Frag() != nil || !p.HasTCP {
		t.Errorf("a whole packet: %v, fragment %v", err, p.Outer.Fragment)
	}
}

// ipv6Fragment is an IPv6 header and a fragment header written by hand;
// rest follows the fragment header, whose next header is next.
func ipv6Fragment(id uint32, more bool, offset uint16, next byte, rest []byte) []byte {
	h := make([]byte, 48)
	h[0], h[6], h[7] = 0x60, 44, 64
	h[8], h[23], h[24], h[39] = 0xfd, 1, 0xfd, 2
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(rest)))
	h[40] = next
	fo := offset
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(h[42:], fo)
	binary.BigEndian.PutUint32(h[44:], id)
	return append(h, rest...)
}

func TestDecodeIPv6FragmentHeader(t *testing.T) {
	ethHdr := frame(t, eth(layers.EthernetTypeIPv6))[:14]
	// The first fragment: a destination-options header in the fragmentable
	// part, then TCP.
	dstOpts := []byte{6, 0, 1, 4, 0, 0, 0, 0}
	first := append(append([]byte(nil), ethHdr...), ipv6Fragment(0xdeadbeef, true, 0, 60, append(append(dstOpts, tcpHeader(1)...), make([]byte, 1192)...))...)
	later := append(append([]byte(nil), ethHdr...), ipv6Fragment(0xdeadbeef, false, 1232, 60, make([]byte, 500))...)
	atomic := append(append([]byte(nil), ethHdr...), ipv6Fragment(7, false, 0, 6, append(tcpHeader(1), make([]byte, 10)...))...)
	var p Packet
	if err := Decode(LinkEthernet, first[:128], len(first), &p); err != nil {
		t.Fatal(err)
	}
	ip := &p.Outer
	if !ip.Fragment || !ip.MoreFrags || ip.FragOffset != 0 || ip.ID != 0xdeadbeef || ip.FragLen != 8+32+1192 || ip.HdrLen != 56 ||
		!p.HasTCP || p.TCP.PayloadLen != 1192 || ip.Proto != 6 {
		t.Fatalf("first: %+v, tcp %v payload %d", *ip, p.HasTCP, p.TCP.PayloadLen)
	}
	if err := Decode(LinkEthernet, later, len(later), &p); err != nil {
		t.Fatal(err)
	}
	if !ip.Fragment || ip.MoreFrags || ip.FragOffset != 1232 || ip.FragLen != 500 || ip.HdrLen != 48 || p.HasTCP || p.Truncated {
		t.Fatalf("later: %+v, tcp %v truncated %v", *ip, p.HasTCP, p.Truncated)
	}
	// Offset 0 without M: an atomic fragment (RFC 6946), a whole packet.
	if err := Decode(LinkEthernet, atomic, len(atomic), &p); err != nil {
		t.Fatal(err)
	}
	if ip.Fragment || p.Frag() != nil || !p.HasTCP || p.TCP.PayloadLen != 10 || ip.ID != 7 {
		t.Fatalf("atomic: %+v, tcp %v payload %d", *ip, p.HasTCP, p.TCP.PayloadLen)
	}
	// A fragment header the payload length leaves no room for.
	binary.BigEndian.PutUint16(later[14+4:], 4)
	if err := Decode(LinkEthernet, later, len(later), &p); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short payload length: %v", err)
	}
}
