package pktfilter

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
)

// Packet builders for the tests: IP packets as the kernel hooks see them,
// starting at the IP header. Checksums stay zero; no filter reads them.

type v4Options struct {
	optionWords int    // IPv4 options, in 4-byte words (IHL - 5)
	fragment    uint16 // flags and fragment offset, host order
}

func ipv4Packet(src, dst string, proto uint8, payload []byte, o v4Options) []byte {
	hl := 20 + 4*o.optionWords
	b := make([]byte, hl, hl+len(payload))
	b[0] = 0x40 | byte(hl/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hl+len(payload)))
	binary.BigEndian.PutUint16(b[4:], 0x1234)
	binary.BigEndian.PutUint16(b[6:], o.fragment)
	b[8], b[9] = 64, proto
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	for i := 20; i < hl; i++ {
		b[i] = 1 // NOP options
	}
	return append(b, payload...)
}

// ipv6Packet builds the fixed header; next is the first next header, and
// payload holds any extension headers.
func ipv6Packet(src, dst string, next uint8, payload []byte) []byte {
	b := make([]byte, 40, 40+len(payload))
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(len(payload)))
	b[6], b[7] = next, 64
	s, d := netip.MustParseAddr(src).As16(), netip.MustParseAddr(dst).As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	return append(b, payload...)
}

func extensionHeader(next uint8, rest []byte) []byte {
	return append([]byte{next, 0, 1, 4, 0, 0, 0, 0}, rest...)
}

func fragmentHeader(next uint8, offset uint16, more bool, rest []byte) []byte {
	v := offset << 3
	if more {
		v |= 1
	}
	h := []byte{next, 0, byte(v >> 8), byte(v), 0, 0, 0x12, 0x34}
	return append(h, rest...)
}

func tcpSegment(sport, dport uint16, flags uint8, payload []byte) []byte {
	b := make([]byte, 20, 20+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0x01020304)
	binary.BigEndian.PutUint32(b[8:], 0x05060708)
	b[12], b[13] = 5<<4, flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	return append(b, payload...)
}

func udpDatagram(sport, dport uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	return append(b, payload...)
}

func sctpPacket(sport, dport uint16) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	return append(b, 1, 0, 0, 4) // an INIT chunk header
}

// icmpMessage serves ICMP, ICMPv6 and IGMP: type, code, checksum, rest.
func icmpMessage(typ, code uint8, payload []byte) []byte {
	return append([]byte{typ, code, 0, 0, 0, 1, 0, 1}, payload...)
}

var (
	testHosts4 = []string{"10.0.0.1", "10.0.0.2", "10.200.0.2", "10.1.2.3", "10.1.200.7",
		"192.168.1.1", "192.168.2.9", "224.0.0.1", "239.1.2.3", "255.255.255.255", "0.0.0.10", "1.1.1.1", "11.0.0.1"}
	testHosts6 = []string{"::1", "2001:db8::1", "2001:db8:1::5", "2001:db9::1", "fe80::1", "ff02::1",
		"::ffff:10.0.0.1", "::ffff:10.0.0.2", "2001:db8:1:ffff::1"}
	testPorts = []uint16{0, 22, 53, 80, 443, 999, 1000, 1500, 2000, 2001, 5201, 8080, 65535}
	testFlags = []uint8{0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x14, 0x01, 0x29, 0xc2, 0x00, 0xff}
)

// corpus is the packets the differential test runs: every protocol the
// filters know over both families, IPv4 options and fragments, IPv6
// extension headers, odd versions, and some packets cut at every length.
func corpus() [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	port := func() uint16 {
		if rng.IntN(8) == 0 {
			return uint16(rng.IntN(65536))
		}
		return testPorts[rng.IntN(len(testPorts))]
	}
	payload := func() []byte {
		b := make([]byte, []int{0, 0, 4, 20, 33, 60, 200, 1000, 1400}[rng.IntN(9)])
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	transport := func(v6 bool) (uint8, []byte) {
		switch rng.IntN(12) {
		case 0, 1, 2, 3:
			return protoTCP, tcpSegment(port(), port(), testFlags[rng.IntN(len(testFlags))], payload())
		case 4, 5:
			return protoUDP, udpDatagram(port(), port(), payload())
		case 6:
			return protoSCTP, sctpPacket(port(), port())
		case 7:
			if v6 {
				typ := []uint8{1, 3, 128, 129, 135, 136}[rng.IntN(6)]
				return protoICMP6, icmpMessage(typ, uint8(rng.IntN(3)), payload())
			}
			typ := []uint8{0, 3, 5, 8, 11, 13}[rng.IntN(6)]
			return protoICMP, icmpMessage(typ, uint8(rng.IntN(3)), payload())
		case 8:
			return protoIGMP, icmpMessage([]uint8{0x11, 0x16, 0x17}[rng.IntN(3)], 0, nil)
		default:
			return []uint8{protoPIM, protoVRRP, protoAH, protoESP, 47, protoIGRP, 0xfd}[rng.IntN(7)], payload()
		}
	}

	var pkts [][]byte
	add := func(p []byte) { pkts = append(pkts, p) }
	for range 4000 {
		if rng.IntN(5) > 0 {
			proto, body := transport(false)
			o := v4Options{}
			if rng.IntN(4) == 0 {
				o.optionWords = rng.IntN(11)
			}
			switch rng.IntN(6) {
			case 0:
				o.fragment = 0x2000 // more fragments, offset 0
			case 1:
				o.fragment = uint16(rng.IntN(0x1fff) + 1) // a later fragment
			case 2:
				o.fragment = 0x4000 // don't fragment
			}
			p := ipv4Packet(pick(testHosts4), pick(testHosts4), proto, body, o)
			p[8] = byte(rng.IntN(256)) // TTL
			add(p)
			continue
		}
		proto, body := transport(true)
		switch rng.IntN(5) {
		case 0:
			body, proto = fragmentHeader(proto, uint16(rng.IntN(2)*rng.IntN(100)), rng.IntN(2) == 0, body), protoFragment
		case 1:
			body, proto = extensionHeader(proto, body), 0 // hop-by-hop
		}
		p := ipv6Packet(pick(testHosts6), pick(testHosts6), proto, body)
		p[7] = byte(rng.IntN(256)) // hop limit
		add(p)
	}

	// Each port and flag against each protocol, on both families.
	for _, p := range testPorts {
		for _, f := range testFlags {
			add(ipv4Packet("10.0.0.1", "10.200.0.2", protoTCP, tcpSegment(p, 5201, f, nil), v4Options{}))
			add(ipv6Packet("2001:db8::1", "::1", protoTCP, tcpSegment(5201, p, f, nil)))
		}
		add(ipv4Packet("10.1.2.3", "10.0.0.2", protoUDP, udpDatagram(p, p, nil), v4Options{optionWords: 2}))
		add(ipv6Packet("::ffff:10.0.0.1", "2001:db8:1::5", protoUDP, udpDatagram(53, p, nil)))
		add(ipv4Packet("10.0.0.2", "10.1.2.3", protoSCTP, sctpPacket(p, 5201), v4Options{}))
		add(ipv6Packet("::1", "::1", protoSCTP, sctpPacket(5201, p)))
	}
	for typ := range uint8(20) {
		add(ipv4Packet("10.0.0.1", "10.0.0.2", protoICMP, icmpMessage(typ, typ%3, nil), v4Options{}))
	}
	for _, typ := range []uint8{1, 2, 3, 4, 128, 129, 133, 134, 135, 136, 137, 143} {
		add(ipv6Packet("fe80::1", "ff02::1", protoICMP6, icmpMessage(typ, 0, nil)))
		add(ipv6Packet("fe80::1", "ff02::1", protoFragment, fragmentHeader(protoICMP6, 0, false, icmpMessage(typ, 0, nil))))
	}
	add(ipv6Packet("2001:db8::1", "2001:db9::1", protoFragment, fragmentHeader(protoTCP, 0, true, tcpSegment(80, 443, 0x02, nil))))
	add(ipv6Packet("2001:db8::1", "2001:db9::1", protoFragment, fragmentHeader(protoTCP, 100, false, tcpSegment(80, 443, 0x02, nil))))
	add(ipv6Packet("2001:db8::1", "2001:db9::1", 0, extensionHeader(protoTCP, tcpSegment(443, 80, 0x12, nil))))
	add(ipv6Packet("2001:db8::1", "2001:db9::1", 0, extensionHeader(protoUDP, udpDatagram(53, 53, nil))))
	for _, first := range []byte{0x00, 0x05, 0x50, 0x7f, 0xf0, 0xff} {
		p := ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(80, 443, 0x02, nil), v4Options{})
		p[0] = first
		add(p)
	}
	add([]byte{0x00})

	// Cut short at every length: what a filter reads past the end rejects.
	whole := []([]byte){
		ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(80, 443, 0x02, []byte{1, 2, 3, 4}), v4Options{}),
		ipv4Packet("10.200.0.2", "10.0.0.1", protoTCP, tcpSegment(5201, 40000, 0x12, nil), v4Options{optionWords: 3}),
		ipv4Packet("10.1.2.3", "192.168.1.1", protoUDP, udpDatagram(53, 1500, []byte{9, 9}), v4Options{}),
		ipv4Packet("10.0.0.2", "10.0.0.1", protoICMP, icmpMessage(8, 0, nil), v4Options{}),
		ipv4Packet("10.0.0.1", "224.0.0.1", protoIGMP, icmpMessage(0x16, 0, nil), v4Options{}),
		ipv4Packet("10.0.0.1", "10.0.0.2", protoSCTP, sctpPacket(5201, 5201), v4Options{}),
		ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(80, 443, 0x02, nil), v4Options{fragment: 0x2000}),
		ipv6Packet("2001:db8::1", "::1", protoTCP, tcpSegment(443, 1000, 0x18, nil)),
		ipv6Packet("::ffff:10.0.0.1", "2001:db8:1::5", protoUDP, udpDatagram(1500, 53, nil)),
		ipv6Packet("fe80::1", "ff02::1", protoICMP6, icmpMessage(128, 0, nil)),
		ipv6Packet("2001:db8::1", "::1", protoFragment, fragmentHeader(protoTCP, 0, true, tcpSegment(80, 443, 0x02, nil))),
		ipv6Packet("2001:db8::1", "::1", 0, extensionHeader(protoTCP, tcpSegment(80, 443, 0x02, nil))),
	}
	for _, p := range whole {
		for n := range len(p) + 1 {
			add(p[:n])
		}
	}
	return pkts
}
