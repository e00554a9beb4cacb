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
	tcp.SetNetworkLayerForChecksum(ip)
	data := frame(t, eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 6, Type: layers.EthernetTypeIPv4}, ip, tcp, gopacket.Payload(make([]byte, 100)))
	var p Packet
	if err := Decode(LinkEthernet, data, &p); err != nil {
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
	if err := Decode(LinkEthernet, data[:96], &p); err != nil {
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
	tcp.SetNetworkLayerForChecksum(ip)
	data := frame(t, eth(layers.EthernetTypeIPv6), ip, hop, tcp, gopacket.Payload(make([]byte, 10)))
	var p Packet
	if err := Decode(LinkEthernet, data, &p); err != nil {
		t.Fatal(err)
	}
	if !p.HasTCP || p.Outer.Version != 6 || p.Outer.HdrLen != 48 || p.TCP.PayloadLen != 10 || p.Outer.Dst.String() != "fd00::2" {
		t.Fatalf("%+v", p)
	}
}

func TestDecodeVXLANBothHeaders(t *testing.T) {
	inner := ip4("10.201.0.1", "10.201.0.2", 500, true, layers.IPProtocolTCP)
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 5201, Seq: 1, ACK: true, Window: 100}
	tcp.SetNetworkLayerForChecksum(inner)
	data := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42},
		eth(layers.EthernetTypeIPv4), inner, tcp, gopacket.Payload(make([]byte, 1400)))
	var p Packet
	if err := Decode(LinkEthernet, data, &p); err != nil {
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
	if err := Decode(LinkEthernet, data, &p); err != nil {
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
		if err := Decode(c.link, c.data, &p); err != nil || !p.HasUDP || p.UDP.DstPort != 2 {
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
		if err := Decode(LinkEthernet, data, &p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if err := Decode(LinkEthernet, good[:10], &p); !errors.Is(err, ErrMalformed) {
		t.Errorf("short ethernet: %v", err)
	}
	if err := Decode(999, good, &p); err == nil {
		t.Error("unknown link type accepted")
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	inner := ip4("10.201.0.1", "10.201.0.2", 500, true, layers.IPProtocolTCP)
	data := frame(t, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 33333, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 42},
		eth(layers.EthernetTypeIPv4), inner, tcpSyn(), gopacket.Payload(make([]byte, 100)))
	var p Packet
	if n := testing.AllocsPerRun(100, func() { Decode(LinkEthernet, data, &p) }); n != 0 {
		t.Fatalf("%v allocations per decode", n)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(LinkEthernet, frame(f, eth(layers.EthernetTypeIPv4), ip4("10.0.0.1", "10.0.0.2", 1, true, layers.IPProtocolTCP), tcpSyn()))
	f.Add(LinkEthernet, frame(f, eth(layers.EthernetTypeIPv4), ip4("10.200.0.1", "10.200.0.2", 9, false, layers.IPProtocolUDP),
		&layers.UDP{SrcPort: 3, DstPort: 4789}, &layers.VXLAN{ValidIDFlag: true, VNI: 1}, eth(layers.EthernetTypeIPv4),
		ip4("10.1.0.1", "10.1.0.2", 2, false, layers.IPProtocolTCP), tcpSyn()))
	f.Add(LinkRaw, []byte{0x60, 0, 0, 0, 0, 8, 0, 64})
	f.Fuzz(func(t *testing.T, link int, data []byte) {
		var p Packet
		if err := Decode(link, data, &p); err != nil || !p.HasTCP {
			return
		}
		// The lengths must add up to the IP header's, whatever the capture holds.
		ip := p.L3()
		if p.TCP.HdrLen < 20 || uint32(ip.HdrLen)+uint32(p.TCP.HdrLen)+p.TCP.PayloadLen != ip.TotalLen {
			t.Fatalf("IP total %d, IP header %d, TCP header %d, payload %d", ip.TotalLen, ip.HdrLen, p.TCP.HdrLen, p.TCP.PayloadLen)
		}
	})
}
