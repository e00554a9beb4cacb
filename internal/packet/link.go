package packet

import "encoding/binary"

// maxLinkNesting bounds link headers inside link headers (PKTAP's).
const maxLinkNesting = 2

// link finds the network protocol (an EtherType, 0 for a frame without IP),
// where it starts, and the frame's direction where the link header says.
func link(linkType int, data []byte, depth int) (etherType uint16, off int, dir uint8, err error) {
	switch linkType {
	case LinkEthernet:
		etherType, off, err = ethernet(data)
		return etherType, off, DirUnknown, err
	case LinkRaw:
		if len(data) == 0 {
			return 0, 0, DirUnknown, errShortLink
		}
		return ipVersion(data[0]), 0, DirUnknown, nil
	case LinkIPv4:
		return 0x0800, 0, DirUnknown, nil
	case LinkIPv6:
		return 0x86DD, 0, DirUnknown, nil
	case LinkSLL:
		if len(data) < 16 {
			return 0, 0, DirUnknown, errShortLink
		}
		return ipEtherType(binary.BigEndian.Uint16(data[14:])), 16, cookedDirection(data[1]), nil
	case LinkSLL2:
		if len(data) < 20 {
			return 0, 0, DirUnknown, errShortLink
		}
		return ipEtherType(binary.BigEndian.Uint16(data[0:])), 20, cookedDirection(data[10]), nil
	case LinkNull, LinkLoop:
		if len(data) < 4 {
			return 0, 0, DirUnknown, errShortLink
		}
		family := binary.BigEndian.Uint32(data)
		if linkType == LinkNull && family > 0xffff { // written by a little-endian host
			family = binary.LittleEndian.Uint32(data)
		}
		return bsdFamily(family), 4, DirUnknown, nil
	case LinkPPP, LinkPPPHDLC:
		etherType, off, err = ppp(data)
		return etherType, off, DirUnknown, err
	case LinkNFLOG:
		etherType, off, err = nflog(data)
		return etherType, off, DirUnknown, err
	case LinkPKTAP:
		if depth < maxLinkNesting {
			return pktap(data, depth)
		}
	}
	return 0, 0, DirUnknown, errLinkType
}

// cookedDirection reads the packet type of Linux cooked captures (tcpdump -i
// any): 4 is a frame this host sent.
func cookedDirection(pktType byte) uint8 {
	if pktType == 4 {
		return DirOut
	}
	return DirIn
}

func ipVersion(b byte) uint16 {
	switch b >> 4 {
	case 4:
		return 0x0800
	case 6:
		return 0x86DD
	}
	return 0
}

// bsdFamily maps a BSD loopback's address family: IPv4 is 2 everywhere,
// IPv6 24 (NetBSD, OpenBSD), 28 (FreeBSD) or 30 (macOS).
func bsdFamily(family uint32) uint16 {
	switch family {
	case 2:
		return 0x0800
	case 24, 28, 30:
		return 0x86DD
	}
	return 0
}

// ppp reads a PPP header, with or without the HDLC-like address and
// control bytes (0xff 0x03), or a Cisco HDLC header (0x0f or 0x8f, 0x00,
// then an EtherType).
func ppp(data []byte) (uint16, int, error) {
	if len(data) < 2 {
		return 0, 0, errShortLink
	}
	off := 0
	switch {
	case data[0] == 0xff && data[1] == 0x03:
		off = 2
	case (data[0] == 0x0f || data[0] == 0x8f) && data[1] == 0x00:
		if len(data) < 4 {
			return 0, 0, errShortLink
		}
		return ipEtherType(binary.BigEndian.Uint16(data[2:])), 4, nil
	}
	if len(data) < off+1 {
		return 0, 0, errShortLink
	}
	var proto uint16
	if data[off]&1 == 1 { // a compressed one-byte protocol field (PFC)
		proto, off = uint16(data[off]), off+1
	} else {
		if len(data) < off+2 {
			return 0, 0, errShortLink
		}
		proto, off = binary.BigEndian.Uint16(data[off:]), off+2
	}
	switch proto {
	case 0x0021:
		return 0x0800, off, nil
	case 0x0057:
		return 0x86DD, off, nil
	}
	return 0, off, nil
}

// nflog finds the packet in a netfilter log record: a 4-byte header (the
// address family first), then type-length-value attributes in the logging
// host's byte order, each padded to 4 bytes; type 9 holds the packet.
func nflog(data []byte) (uint16, int, error) {
	if len(data) < 4 {
		return 0, 0, errShortLink
	}
	var etherType uint16
	switch data[0] {
	case 2:
		etherType = 0x0800
	case 10:
		etherType = 0x86DD
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if len(data) >= 8 && binary.LittleEndian.Uint16(data[4:]) > uint16(min(len(data)-4, 0xffff)) {
		order = binary.BigEndian
	}
	for off := 4; off+4 <= len(data); {
		n, typ := int(order.Uint16(data[off:])), order.Uint16(data[off+2:])
		if n < 4 {
			break
		}
		if typ == 9 {
			return etherType, off + 4, nil
		}
		off += (n + 3) &^ 3
	}
	return 0, len(data), nil // a record without the packet (a snaplen cut it): nothing to analyze
}

// DLT_RAW as macOS and OpenBSD number it (LINKTYPE_RAW is 101).
const (
	dltRaw        = 12
	dltRawOpenBSD = 14
)

// pktap reads Apple's packet tap header (host byte order, little-endian on
// every Mac): its length, the link type of the frame that follows, and the
// direction flags.
func pktap(data []byte, depth int) (uint16, int, uint8, error) {
	if len(data) < 40 {
		return 0, 0, DirUnknown, errShortLink
	}
	hdrLen := int(binary.LittleEndian.Uint32(data[0:]))
	next := int(binary.LittleEndian.Uint32(data[8:]))
	flags := binary.LittleEndian.Uint32(data[36:])
	if hdrLen < 40 || hdrLen > len(data) {
		return 0, 0, DirUnknown, errShortLink
	}
	if next == dltRaw || next == dltRawOpenBSD { // the header holds the host's DLT_ value, not a LINKTYPE_
		next = LinkRaw
	}
	etherType, off, dir, err := link(next, data[hdrLen:], depth+1)
	switch {
	case flags&0x1 != 0:
		dir = DirIn
	case flags&0x2 != 0:
		dir = DirOut
	}
	return etherType, hdrLen + off, dir, err
}
