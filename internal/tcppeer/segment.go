package tcppeer

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Flags are the TCP header's control bits. AE is the accurate-ECN bit
// (formerly NS), the low bit of the data-offset byte.
type Flags uint16

const (
	FIN Flags = 1 << iota
	SYN
	RST
	PSH
	ACK
	URG
	ECE
	CWR
	AE
)

// String prints the flags as tcpdump does: "S.", "P.", "R", ...
func (f Flags) String() string {
	var b strings.Builder
	for _, l := range []struct {
		f Flags
		c byte
	}{{SYN, 'S'}, {FIN, 'F'}, {PSH, 'P'}, {RST, 'R'}, {URG, 'U'}, {ECE, 'E'}, {CWR, 'W'}, {AE, 'e'}, {ACK, '.'}} {
		if f&l.f != 0 {
			b.WriteByte(l.c)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// SACKBlock is one selective acknowledgement: bytes [Left, Right).
type SACKBlock struct{ Left, Right uint32 }

// TCPOptions are the options of a segment. A parsed segment has the fields
// of the options it carries and Raw set to their bytes; a segment to send
// is encoded from the fields (in Linux's order) unless Raw is set, which is
// sent verbatim, padded to 4 bytes, to craft anything the fields cannot.
type TCPOptions struct {
	MSS           uint16 // 0: no MSS option
	HasWScale     bool
	WScale        uint8
	SACKPermitted bool
	HasTS         bool
	TSval, TSecr  uint32
	SACK          []SACKBlock
	Raw           []byte
}

// TCP option kinds (RFC 9293, 2018, 7323).
const (
	optEOL       = 0
	optNOP       = 1
	optMSS       = 2
	optWScale    = 3
	optSACKPerm  = 4
	optSACK      = 5
	optTimestamp = 8
)

func parseOptions(b []byte) TCPOptions {
	o := TCPOptions{Raw: b}
	for i := 0; i < len(b); {
		kind := b[i]
		if kind == optEOL {
			break
		}
		if kind == optNOP {
			i++
			continue
		}
		if i+1 >= len(b) {
			break
		}
		n := int(b[i+1])
		if n < 2 || i+n > len(b) {
			break
		}
		data := b[i+2 : i+n]
		switch {
		case kind == optMSS && n == 4:
			o.MSS = binary.BigEndian.Uint16(data)
		case kind == optWScale && n == 3:
			o.HasWScale, o.WScale = true, data[0]
		case kind == optSACKPerm && n == 2:
			o.SACKPermitted = true
		case kind == optSACK && (n-2)%8 == 0:
			for j := 0; j < len(data); j += 8 {
				o.SACK = append(o.SACK, SACKBlock{binary.BigEndian.Uint32(data[j:]), binary.BigEndian.Uint32(data[j+4:])})
			}
		case kind == optTimestamp && n == 10:
			o.HasTS, o.TSval, o.TSecr = true, binary.BigEndian.Uint32(data), binary.BigEndian.Uint32(data[4:])
		}
		i += n
	}
	return o
}

// encode lays the options out as Linux does (MSS, SACK-permitted with
// timestamps, window scale, SACK blocks), so segments look familiar in dumps.
func (o *TCPOptions) encode() ([]byte, error) {
	var b []byte
	if o.Raw != nil {
		b = append(b, o.Raw...)
	} else {
		if o.MSS != 0 {
			b = append(b, optMSS, 4, byte(o.MSS>>8), byte(o.MSS))
		}
		switch {
		case o.HasTS && o.SACKPermitted:
			b = append(b, optSACKPerm, 2, optTimestamp, 10)
		case o.HasTS:
			b = append(b, optNOP, optNOP, optTimestamp, 10)
		case o.SACKPermitted:
			b = append(b, optNOP, optNOP, optSACKPerm, 2)
		}
		if o.HasTS {
			b = binary.BigEndian.AppendUint32(b, o.TSval)
			b = binary.BigEndian.AppendUint32(b, o.TSecr)
		}
		if o.HasWScale {
			b = append(b, optNOP, optWScale, 3, o.WScale)
		}
		if len(o.SACK) > 0 {
			b = append(b, optNOP, optNOP, optSACK, byte(2+8*len(o.SACK)))
			for _, s := range o.SACK {
				b = binary.BigEndian.AppendUint32(b, s.Left)
				b = binary.BigEndian.AppendUint32(b, s.Right)
			}
		}
	}
	for len(b)%4 != 0 {
		b = append(b, optEOL)
	}
	if len(b) > 40 {
		return nil, fmt.Errorf("%d bytes of TCP options, at most 40 fit", len(b))
	}
	return b, nil
}

func (o *TCPOptions) String() string {
	var parts []string
	if o.MSS != 0 {
		parts = append(parts, fmt.Sprintf("mss %d", o.MSS))
	}
	if o.SACKPermitted {
		parts = append(parts, "sackOK")
	}
	if o.HasTS {
		parts = append(parts, fmt.Sprintf("TS val %d ecr %d", o.TSval, o.TSecr))
	}
	if o.HasWScale {
		parts = append(parts, fmt.Sprintf("wscale %d", o.WScale))
	}
	for _, s := range o.SACK {
		parts = append(parts, fmt.Sprintf("sack %d:%d", s.Left, s.Right))
	}
	return strings.Join(parts, ",")
}

// Protocol numbers of the IPv4 header.
const (
	ProtoICMP = 1
	ProtoTCP  = 6
)

// Segment is one IP packet through the tun device, with its IPv4 and TCP
// headers parsed when it has them. To send one, fill the TCP fields and
// pass it to Peer.Write (or Conn.Write); zero addresses, and TTL 0, take
// the peer's defaults.
type Segment struct {
	At       time.Time // when the reader got it, or the peer sent it
	FromPeer bool      // sent by the peer rather than the kernel
	Raw      []byte    // the whole IP packet

	Version  uint8 // IP version; the other fields are parsed only for 4
	Protocol uint8
	Src, Dst netip.Addr
	TOS      uint8
	ID       uint16
	DF       bool
	TTL      uint8

	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            Flags
	Window           uint16 // the raw field: scaling is the reader's business
	Urgent           uint16
	Opts             TCPOptions
	Payload          []byte
	// BadChecksum: the TCP checksum is wrong. Set it on a segment to send
	// to make the kernel drop it (TcpInCsumErrors).
	BadChecksum bool

	tcp bool
}

// IsTCP says whether the packet is IPv4 with a well-formed TCP header.
func (s *Segment) IsTCP() bool { return s.tcp }

// Len is the sequence space the segment occupies: payload, SYN and FIN.
func (s *Segment) Len() uint32 {
	n := uint32(len(s.Payload))
	if s.Flags&SYN != 0 {
		n++
	}
	if s.Flags&FIN != 0 {
		n++
	}
	return n
}

// String prints the packet much as tcpdump does.
func (s *Segment) String() string {
	switch {
	case s.tcp:
		bad := ""
		if s.BadChecksum {
			bad = " (bad checksum)"
		}
		return fmt.Sprintf("%s.%d > %s.%d: Flags [%s], seq %d, ack %d, win %d, options [%s], length %d%s",
			s.Src, s.SrcPort, s.Dst, s.DstPort, s.Flags, s.Seq, s.Ack, s.Window, s.Opts.String(), len(s.Payload), bad)
	case s.Version == 4:
		return fmt.Sprintf("%s > %s: IPv4 protocol %d, length %d", s.Src, s.Dst, s.Protocol, len(s.Raw))
	default:
		return fmt.Sprintf("IPv%d packet, length %d", s.Version, len(s.Raw))
	}
}

// parse decodes an IP packet; what it cannot decode it leaves zero.
func parse(b []byte) *Segment {
	s := &Segment{Raw: b}
	if len(b) == 0 {
		return s
	}
	s.Version = b[0] >> 4
	if s.Version != 4 || len(b) < 20 {
		return s
	}
	ihl := int(b[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < 20 || total < ihl || total > len(b) {
		return s
	}
	b = b[:total]
	s.TOS, s.ID, s.DF, s.TTL, s.Protocol = b[1], binary.BigEndian.Uint16(b[4:]), b[6]&0x40 != 0, b[8], b[9]
	s.Src, s.Dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	t := b[ihl:]
	if s.Protocol != ProtoTCP || len(t) < 20 {
		return s
	}
	doff := int(t[12]>>4) * 4
	if doff < 20 || doff > len(t) {
		return s
	}
	s.tcp = true
	s.SrcPort, s.DstPort = binary.BigEndian.Uint16(t), binary.BigEndian.Uint16(t[2:])
	s.Seq, s.Ack = binary.BigEndian.Uint32(t[4:]), binary.BigEndian.Uint32(t[8:])
	s.Flags = Flags(t[13]) | Flags(t[12]&1)<<8
	s.Window, s.Urgent = binary.BigEndian.Uint16(t[14:]), binary.BigEndian.Uint16(t[18:])
	s.Opts = parseOptions(t[20:doff])
	s.Payload = t[doff:]
	s.BadChecksum = fold(pseudoSum(s.Src, s.Dst, ProtoTCP, len(t))+sum(t)) != 0xffff
	return s
}

// marshal builds the IPv4 packet of a TCP segment.
func (s *Segment) marshal(id uint16) ([]byte, error) {
	if !s.Src.Is4() || !s.Dst.Is4() {
		return nil, fmt.Errorf("segment %s > %s: addresses must be IPv4", s.Src, s.Dst)
	}
	opts, err := s.Opts.encode()
	if err != nil {
		return nil, err
	}
	tcpLen := 20 + len(opts) + len(s.Payload)
	if 20+tcpLen > 0xffff {
		return nil, fmt.Errorf("segment of %d bytes does not fit an IPv4 packet", tcpLen)
	}
	pkt := ipv4Header(s.Src, s.Dst, ProtoTCP, tcpLen, id, s.TTL, s.TOS)
	t := make([]byte, 20, tcpLen)
	binary.BigEndian.PutUint16(t, s.SrcPort)
	binary.BigEndian.PutUint16(t[2:], s.DstPort)
	binary.BigEndian.PutUint32(t[4:], s.Seq)
	binary.BigEndian.PutUint32(t[8:], s.Ack)
	t[12] = byte((20+len(opts))/4)<<4 | byte(s.Flags>>8&1)
	t[13] = byte(s.Flags)
	binary.BigEndian.PutUint16(t[14:], s.Window)
	binary.BigEndian.PutUint16(t[18:], s.Urgent)
	t = append(append(t, opts...), s.Payload...)
	csum := ^fold(pseudoSum(s.Src, s.Dst, ProtoTCP, tcpLen) + sum(t))
	if s.BadChecksum {
		// Flipping a bit changes the sum by one, which no ones' complement
		// representation of zero absorbs (unlike inverting all bits).
		csum ^= 1
	}
	binary.BigEndian.PutUint16(t[16:], csum)
	return append(pkt, t...), nil
}

// ipv4Header is a 20-byte header with DF set and a valid checksum.
func ipv4Header(src, dst netip.Addr, proto uint8, payloadLen int, id uint16, ttl, tos uint8) []byte {
	if ttl == 0 {
		ttl = 64
	}
	h := make([]byte, 20, 20+payloadLen)
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], uint16(20+payloadLen))
	binary.BigEndian.PutUint16(h[4:], id)
	h[6], h[8], h[9] = 0x40, ttl, proto
	s4, d4 := src.As4(), dst.As4()
	copy(h[12:], s4[:])
	copy(h[16:], d4[:])
	binary.BigEndian.PutUint16(h[10:], ^fold(sum(h)))
	return h
}

func pseudoSum(src, dst netip.Addr, proto uint8, n int) uint32 {
	s4, d4 := src.As4(), dst.As4()
	return sum(s4[:]) + sum(d4[:]) + uint32(proto) + uint32(n)
}

// sum adds b as big-endian 16-bit words (RFC 1071), unfolded.
func sum(b []byte) uint32 {
	var s uint32
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// Sequence-space comparisons, modulo 2^32.
func seqLT(a, b uint32) bool { return int32(a-b) < 0 }
func seqLE(a, b uint32) bool { return int32(a-b) <= 0 }
