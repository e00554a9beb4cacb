// Package packet decodes captured frames into the header fields capture
// analysis needs: link layer, IPv4/IPv6 (with extension headers and
// fragments), TCP and UDP, and VXLAN or Geneve with the encapsulated
// frame's headers too. It decodes into a caller-owned Packet and never
// allocates.
package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Link types (the pcap LINKTYPE_ values) the decoder understands.
const (
	LinkNull     = 0 // BSD loopback: the address family in the capturing host's byte order
	LinkEthernet = 1
	LinkPPP      = 9   // PPP, with or without HDLC-like framing (RFC 1661, 1662)
	LinkPPPHDLC  = 50  // PPP in HDLC-like framing, or Cisco HDLC
	LinkRaw      = 101 // raw IPv4 or IPv6
	LinkLoop     = 108 // OpenBSD loopback: the address family in network byte order
	LinkSLL      = 113 // Linux cooked capture v1
	LinkIPv4     = 228
	LinkIPv6     = 229
	LinkNFLOG    = 239 // Linux netfilter log (tcpdump -i nflog:N)
	LinkPKTAP    = 258 // Apple's packet tap (macOS tcpdump -i any / -k)
	LinkSLL2     = 276 // Linux cooked capture v2
)

// SupportedLinks names the link types Decode reads, for errors.
const SupportedLinks = "Ethernet (1), BSD loopback (0, 108), PPP (9, 50), raw IP (101, 228, 229), " +
	"Linux cooked v1 (113) and v2 (276), NFLOG (239), PKTAP (258)"

// Encapsulations.
const (
	EncapNone = iota
	EncapVXLAN
	EncapGeneve
)

// Well-known UDP ports of the tunnels.
const (
	VXLANPort  = 4789
	GenevePort = 6081
)

// IP is one IP header. Its fields are ordered so the struct packs into
// 72 bytes: decoded frames are handed between goroutines in batches.
type IP struct {
	Src, Dst netip.Addr
	// TotalLen is the IP datagram length from the header (the payload
	// length plus headers for IPv6), so sizes stay right under a short
	// snaplen; for BIG TCP's IPv6 jumbograms, from the jumbo payload option.
	TotalLen uint32
	// ID is IPv4's identification, or the 32 bits of an IPv6 fragment header.
	ID     uint32
	HdrLen uint16 // including IPv6 extension headers
	// Fragment marks one piece of a datagram (IPv4's MF flag or a fragment
	// offset, an IPv6 fragment header with either): only the first piece,
	// at offset 0, carries the transport header, and TotalLen is the
	// piece's, not the datagram's. FragLen is how many bytes of the
	// datagram's payload (after the fragment header, for IPv6) it holds.
	FragOffset uint16 // bytes
	FragLen    uint32
	Fragment   bool
	MoreFrags  bool
	Version    uint8
	// LenFromFrame says the header's length field read 0, as on a GSO
	// packet above 64 KB (BIG TCP) or one captured on a TSO sender, and
	// TotalLen is the original frame's length from this header on.
	LenFromFrame bool
	DF           bool
	TTL          uint8
	Proto        uint8
}

// TCP is a TCP header with the options analysis uses.
type TCP struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint8
	Window           uint16
	HdrLen           uint16
	PayloadLen       uint32 // from the IP length fields
	// Options; MSS and WScale only on SYNs, as sent.
	MSS          uint16
	WScale       int8 // -1 when absent
	SACKOK       bool
	SACKBlocks   uint8
	SACK         [4][2]uint32
	HasTimestamp bool
}

// TCP flags.
const (
	FIN = 1 << iota
	SYN
	RST
	PSH
	ACK
	URG
	ECE
	CWR
)

// UDP is a UDP header.
type UDP struct {
	SrcPort, DstPort uint16
	Len              uint16
}

// Packet is one decoded frame. Outer is the frame's own IP header; when the
// frame carries a tunnel, Inner is the encapsulated IP header and TCP/UDP
// belong to it; otherwise Inner is unused and TCP/UDP belong to Outer.
type Packet struct {
	Encap        uint8
	VNI          uint32
	Outer        IP
	OuterUDP     UDP // the tunnel's UDP header
	Inner        IP
	HasTCP       bool
	HasUDP       bool
	TCP          TCP
	UDP          UDP
	ICMPTooBig   bool   // ICMP fragmentation needed or ICMPv6 packet too big
	ICMPMTU      uint16 // the MTU it announces
	NotIP        bool   // a frame without IP (ARP, LLDP ...): nothing to analyze
	Direction    uint8  // DirIn or DirOut where the link header says (Linux cooked), else 0
	Truncated    bool   // the snaplen cut a header the analysis wanted
	LinkHdrBytes uint16
}

// L3 is the IP header the transport belongs to.
func (p *Packet) L3() *IP {
	if p.Encap != EncapNone {
		return &p.Inner
	}
	return &p.Outer
}

// Frag is the IP header that is a fragment, the outer one first, or nil
// when the frame is a whole packet.
func (p *Packet) Frag() *IP {
	switch {
	case p.Outer.Fragment:
		return &p.Outer
	case p.Encap != EncapNone && p.Inner.Fragment:
		return &p.Inner
	}
	return nil
}

// Directions of a frame relative to the capturing host.
const (
	DirUnknown = iota
	DirIn
	DirOut
)

// ErrMalformed marks a frame whose headers contradict themselves.
var ErrMalformed = errors.New("malformed")

// ErrLinkType marks a frame of a link type the decoder does not know.
var ErrLinkType = errors.New("unsupported link type")

// DecodeError is a frame the decoder cannot take; Part names the header at
// fault (link header, IP header, TCP header), for counting.
type DecodeError struct {
	Part, What string
	kind       error
}

func (e *DecodeError) Error() string { return e.What }
func (e *DecodeError) Unwrap() error { return e.kind }

var (
	errShortLink = &DecodeError{"link header", "frame shorter than its link-layer header", ErrMalformed}
	errBadIP     = &DecodeError{"IP header", "IP header length or version invalid", ErrMalformed}
	errBadTCP    = &DecodeError{"TCP header", "TCP header length invalid", ErrMalformed}
	errLinkType  = &DecodeError{"link type", "unsupported link type", ErrLinkType}
)

// Decode fills p from one frame of the given link type, whose original
// length was wireLen (the captured data may be shorter). A frame cut short
// by the snaplen decodes as far as it goes and sets Truncated; only headers
// that contradict themselves are errors.
func Decode(linkType int, data []byte, wireLen int, p *Packet) error {
	*p = Packet{}
	p.TCP.WScale = -1
	etherType, off, dir, err := link(linkType, data, 0)
	if err != nil {
		return err
	}
	p.Direction = dir
	p.LinkHdrBytes = uint16(off)
	if etherType == 0 {
		p.NotIP = true
		return nil
	}
	return p.network(etherType, data[off:], max(wireLen, len(data))-off, false)
}

func ipEtherType(t uint16) uint16 {
	if t == 0x0800 || t == 0x86DD {
		return t
	}
	return 0
}

// ethernet skips VLAN and QinQ tags.
func ethernet(data []byte) (uint16, int, error) {
	if len(data) < 14 {
		return 0, 0, errShortLink
	}
	t, off := binary.BigEndian.Uint16(data[12:]), 14
	for t == 0x8100 || t == 0x88A8 || t == 0x9100 {
		if len(data) < off+4 {
			return 0, 0, errShortLink
		}
		t, off = binary.BigEndian.Uint16(data[off+2:]), off+4
	}
	return ipEtherType(t), off, nil
}

// network decodes an IP header and what it carries; wire is how many bytes
// the original frame had from data on.
func (p *Packet) network(etherType uint16, data []byte, wire int, inner bool) error {
	ip := &p.Outer
	if inner {
		ip = &p.Inner
	}
	var payload []byte
	var err error
	if etherType == 0x0800 {
		payload, err = ipv4(data, wire, ip)
	} else {
		payload, err = ipv6(data, wire, ip)
	}
	if err != nil {
		return err
	}
	if ip.FragOffset != 0 {
		return nil // a later fragment: the transport header is in the first
	}
	if payload == nil {
		p.Truncated = true
		return nil
	}
	// The transport's length comes from the IP header, not the capture.
	l4Len := ip.TotalLen - uint32(ip.HdrLen)
	switch ip.Proto {
	case 6:
		return p.tcp(payload, l4Len)
	case 17:
		return p.udp(payload, wire-int(ip.HdrLen), inner)
	case 1, 58:
		p.icmp(payload, ip.Proto)
	}
	return nil
}

func ipv4(data []byte, wire int, ip *IP) ([]byte, error) {
	if len(data) < 20 {
		return nil, nil
	}
	if data[0]>>4 != 4 {
		return nil, errBadIP
	}
	hl := int(data[0]&0x0f) * 4
	total := uint32(binary.BigEndian.Uint16(data[2:]))
	if total == 0 && hl >= 20 && wire >= hl {
		// GSO above 64 KB (BIG TCP, Linux 6.3) or a TSO sender's capture:
		// Wireshark's "reported as 0, presumed TSO". The frame says how long.
		total, ip.LenFromFrame = uint32(wire), true
	}
	if hl < 20 || int(total) < hl {
		return nil, errBadIP
	}
	ip.Version, ip.HdrLen, ip.TotalLen = 4, uint16(hl), total
	ip.ID = uint32(binary.BigEndian.Uint16(data[4:]))
	ip.DF = data[6]&0x40 != 0
	ip.TTL, ip.Proto = data[8], data[9]
	ip.Src = netip.AddrFrom4([4]byte(data[12:16]))
	ip.Dst = netip.AddrFrom4([4]byte(data[16:20]))
	frag := binary.BigEndian.Uint16(data[6:])
	ip.MoreFrags, ip.FragOffset = frag&0x2000 != 0, (frag&0x1fff)*8
	if ip.Fragment = ip.MoreFrags || ip.FragOffset != 0; ip.Fragment {
		ip.FragLen = total - uint32(hl)
	}
	if ip.FragOffset != 0 || len(data) < hl {
		return nil, nil
	}
	return data[hl:], nil
}

func ipv6(data []byte, wire int, ip *IP) ([]byte, error) {
	if len(data) < 40 {
		return nil, nil
	}
	if data[0]>>4 != 6 {
		return nil, errBadIP
	}
	ip.Version = 6
	payloadLen := uint32(binary.BigEndian.Uint16(data[4:]))
	ip.TotalLen = 40 + payloadLen
	if payloadLen == 0 && data[6] != 59 { // 59: no next header, truly empty
		// A jumbogram (RFC 2675, BIG TCP) gives its length in a hop-by-hop
		// option; a GSO packet captured without one, in the frame's length.
		if jumbo, ok := jumboPayload(data); ok {
			ip.TotalLen = 40 + jumbo
		} else if wire > 40 {
			ip.TotalLen, ip.LenFromFrame = uint32(wire), true
		}
	}
	ip.TTL = data[7]
	ip.Src = netip.AddrFrom16([16]byte(data[8:24]))
	ip.Dst = netip.AddrFrom16([16]byte(data[24:40]))
	next, off := data[6], 40
	for {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(data) < off+2 {
				return nil, nil
			}
			next, off = data[off], off+(int(data[off+1])+1)*8
		case 44: // fragment
			if len(data) < off+8 {
				return nil, nil
			}
			if uint32(off+8) > ip.TotalLen {
				return nil, errBadIP
			}
			ip.ID = binary.BigEndian.Uint32(data[off+4:])
			frag := binary.BigEndian.Uint16(data[off+2:])
			ip.MoreFrags, ip.FragOffset = frag&1 != 0, frag&^7
			next, off = data[off], off+8
			// Offset 0 without M is an atomic fragment (RFC 6946): a whole packet.
			if ip.Fragment = ip.MoreFrags || ip.FragOffset != 0; ip.Fragment {
				ip.FragLen = ip.TotalLen - uint32(off)
			}
			if ip.FragOffset != 0 {
				ip.Proto, ip.HdrLen = next, uint16(off)
				return nil, nil
			}
		default:
			if uint32(off) > ip.TotalLen {
				return nil, errBadIP
			}
			ip.Proto, ip.HdrLen = next, uint16(off)
			if len(data) < off {
				return nil, nil
			}
			return data[off:], nil
		}
	}
}

// jumboPayload reads the jumbo payload option (0xC2) of a hop-by-hop
// header right after the fixed IPv6 header.
func jumboPayload(data []byte) (uint32, bool) {
	if data[6] != 0 || len(data) < 42 {
		return 0, false
	}
	end := min(48+int(data[41])*8, len(data))
	for off := 42; off < end; {
		typ := data[off]
		if typ == 0 { // Pad1
			off++
			continue
		}
		if off+2 > end {
			break
		}
		n := int(data[off+1])
		if typ == 0xC2 && n == 4 && off+6 <= end {
			return binary.BigEndian.Uint32(data[off+2:]), true
		}
		off += 2 + n
	}
	return 0, false
}

func (p *Packet) tcp(data []byte, l4Len uint32) error {
	if len(data) < 20 {
		p.Truncated = true
		return nil
	}
	t := &p.TCP
	hl := int(data[12]>>4) * 4
	if hl < 20 || uint32(hl) > l4Len {
		return errBadTCP
	}
	p.HasTCP = true
	t.SrcPort, t.DstPort = binary.BigEndian.Uint16(data[0:]), binary.BigEndian.Uint16(data[2:])
	t.Seq, t.Ack = binary.BigEndian.Uint32(data[4:]), binary.BigEndian.Uint32(data[8:])
	t.Flags = data[13]
	t.Window = binary.BigEndian.Uint16(data[14:])
	t.HdrLen, t.PayloadLen = uint16(hl), l4Len-uint32(hl)
	if len(data) < hl {
		p.Truncated = true
		return nil
	}
	tcpOptions(data[20:hl], t)
	return nil
}

func tcpOptions(opts []byte, t *TCP) {
	// Nearly every segment of a Linux connection carries NOP, NOP,
	// timestamps and nothing else.
	if len(opts) == 12 && opts[0] == 1 && opts[1] == 1 && opts[2] == 8 && opts[3] == 10 {
		t.HasTimestamp = true
		return
	}
	for len(opts) > 0 {
		kind := opts[0]
		if kind == 0 {
			return
		}
		if kind == 1 {
			opts = opts[1:]
			continue
		}
		if len(opts) < 2 || int(opts[1]) < 2 || int(opts[1]) > len(opts) {
			return
		}
		body := opts[2:opts[1]]
		switch {
		case kind == 2 && len(body) == 2:
			t.MSS = binary.BigEndian.Uint16(body)
		case kind == 3 && len(body) == 1:
			t.WScale = int8(min(body[0], 14))
		case kind == 4:
			t.SACKOK = true
		case kind == 5:
			for i := 0; i+8 <= len(body) && t.SACKBlocks < 4; i += 8 {
				t.SACK[t.SACKBlocks] = [2]uint32{binary.BigEndian.Uint32(body[i:]), binary.BigEndian.Uint32(body[i+4:])}
				t.SACKBlocks++
			}
		case kind == 8:
			t.HasTimestamp = true
		}
		opts = opts[opts[1]:]
	}
}

func (p *Packet) udp(data []byte, wire int, inner bool) error {
	if len(data) < 8 {
		p.Truncated = true
		return nil
	}
	u := UDP{SrcPort: binary.BigEndian.Uint16(data[0:]), DstPort: binary.BigEndian.Uint16(data[2:]), Len: binary.BigEndian.Uint16(data[4:])}
	if !inner {
		switch u.DstPort {
		case VXLANPort:
			if len(data) >= 16 && data[8]&0x08 != 0 {
				p.Encap, p.OuterUDP = EncapVXLAN, u
				p.VNI = binary.BigEndian.Uint32(data[12:]) >> 8
				return p.encapsulated(data[16:], wire-16, 0x6558)
			}
		case GenevePort:
			if len(data) >= 16 {
				optLen := int(data[8]&0x3f) * 4
				proto := binary.BigEndian.Uint16(data[10:])
				if len(data) >= 16+optLen {
					p.Encap, p.OuterUDP = EncapGeneve, u
					p.VNI = binary.BigEndian.Uint32(data[12:]) >> 8
					return p.encapsulated(data[16+optLen:], wire-16-optLen, proto)
				}
			}
		}
	}
	p.HasUDP, p.UDP = true, u
	return nil
}

// encapsulated decodes a tunnel's payload: an Ethernet frame (0x6558) or an
// IP packet.
func (p *Packet) encapsulated(data []byte, wire int, proto uint16) error {
	if proto == 0x6558 {
		t, off, err := ethernet(data)
		if err != nil {
			p.Truncated = true
			return nil
		}
		proto, data, wire = t, data[off:], wire-off
	}
	if ipEtherType(proto) == 0 {
		return nil
	}
	return p.network(proto, data, wire, true)
}

func (p *Packet) icmp(data []byte, proto uint8) {
	if len(data) < 8 {
		return
	}
	if proto == 1 && data[0] == 3 && data[1] == 4 {
		p.ICMPTooBig, p.ICMPMTU = true, binary.BigEndian.Uint16(data[6:])
	}
	if proto == 58 && data[0] == 2 {
		p.ICMPTooBig, p.ICMPMTU = true, uint16(min(binary.BigEndian.Uint32(data[4:]), 65535))
	}
}
