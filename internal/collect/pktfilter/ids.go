package pktfilter

import (
	"net/netip"
	"strconv"
	"strings"
)

// This file turns an id (an address, number or name) with the qualifiers
// in force into a test, refusing the combinations libpcap refuses.

// parseID reads an id and makes it a test with the qualifiers q.
func (p *parser) parseID(q qual) (node, error) {
	t := p.next()
	switch {
	case t.kind == tEther || t.kind == tArcnet:
		return nil, p.errAt(t, "%q is a link-layer address; skbtrace filters packets from their IP header", t.text)
	case t.kind == tNum:
		return p.resolveNumber(t, q)
	case !q.set:
		return nil, p.unqualified(t)
	case t.kind == tAddr4:
		return p.addr4(t, q)
	case t.kind == tAddr6:
		return p.addr6(t, q)
	}
	return p.name(t, q)
}

func (p *parser) unqualified(t token) error {
	return p.errAt(t, "%q needs a qualifier such as host, net or port before it", t.text)
}

// resolveNumber makes a number a test with the qualifiers q: an IPv4
// address, a short net, a port or a protocol.
func (p *parser) resolveNumber(t token, q qual) (node, error) {
	if !q.set {
		return nil, p.unqualified(t)
	}
	switch q.addr {
	case addrNet:
		if p.peek().isOp("/") {
			return nil, p.errAt(t, "write the network %q in dotted form, such as 10.0.0.0/8", t.text)
		}
		// libpcap widens a short net number: net 10 is 10.0.0.0/8.
		v, mask := t.num, ^uint32(0)
		for v != 0 && v&0xff000000 == 0 {
			v, mask = v<<8, mask<<8
		}
		return p.host4(t, q, v, mask)
	case addrPort, addrPortrange:
		if t.num > 0xffff {
			return nil, p.errAt(t, "port %s is out of range 0-65535", t.text)
		}
		over, err := p.numberTransports(q)
		return portNode{over, q.dir, uint16(t.num), uint16(t.num)}, err
	case addrProto:
		if t.num > 0xff {
			return nil, p.errAt(t, "protocol %s is out of range 0-255", t.text)
		}
		return p.protoTest(q, uint8(t.num))
	}
	return p.host4(t, q, t.num, ^uint32(0))
}

// addr4 reads a dotted IPv4 address, possibly short, and the prefix length
// or netmask after it.
func (p *parser) addr4(t token, q qual) (node, error) {
	if err := p.notAnAddress(t, q); err != nil {
		return nil, err
	}
	v, bits, ok := parseDotted(t.text)
	if !ok {
		return nil, p.errAt(t, "%q is not a valid IPv4 address", t.text)
	}
	v <<= 32 - bits
	mask := ^uint32(0) << (32 - bits) // libpcap reads host 10.1 as 10.1.0.0/16
	switch after := p.peek(); {
	case after.isOp("/"):
		plen, err := p.prefixLength(t, q, 32)
		if err != nil {
			return nil, err
		}
		mask = ^uint32(0) << (32 - plen)
		if plen == 0 {
			mask = 0
		}
	case after.is(kwMask):
		p.next()
		m := p.peek()
		if m.kind != tAddr4 {
			return nil, p.errAt(after, `"mask" needs a dotted netmask such as 255.255.0.0`)
		}
		p.next()
		mv, mbits, ok := parseDotted(m.text)
		if !ok {
			return nil, p.errAt(m, "%q is not a valid netmask", m.text)
		}
		if q.addr != addrNet {
			return nil, p.errAt(after, `a netmask needs "net", as in "net %s mask %s"`, t.text, m.text)
		}
		mask = mv << (32 - mbits)
	}
	if v&^mask != 0 {
		return nil, p.errAt(t, "%q has bits set outside its netmask", t.text)
	}
	return p.host4(t, q, v, mask)
}

// prefixLength reads "/N" after an address, at most max.
func (p *parser) prefixLength(addr token, q qual, max uint32) (uint32, error) {
	slash := p.next()
	n := p.peek()
	if n.kind != tNum {
		return 0, p.errAt(slash, `"/" after %q needs a prefix length`, addr.text)
	}
	p.next()
	if n.num > max {
		return 0, p.errAt(n, "prefix length %s is more than %d", n.text, max)
	}
	if q.addr != addrNet {
		return 0, p.errAt(slash, `a prefix length needs "net", as in "net %s/%s"`, addr.text, n.text)
	}
	return n.num, nil
}

// parseDotted reads 1 to 4 decimal bytes, as libpcap's __pcap_atoin.
func parseDotted(s string) (v uint32, bits int, ok bool) {
	for part := range strings.SplitSeq(s, ".") {
		n, err := strconv.ParseUint(part, 10, 8)
		if err != nil {
			return 0, 0, false
		}
		v, bits = v<<8|uint32(n), bits+8
	}
	return v, bits, true
}

func (p *parser) host4(t token, q qual, addr, mask uint32) (node, error) {
	switch {
	case q.proto.kind == tEOF || q.proto.is(kwIP):
	case q.proto.is(kwIP6):
		return nil, p.errAt(q.proto, `%q is an IPv4 address, which "ip6" cannot match`, t.text)
	default:
		return nil, p.hostQualifier(q)
	}
	return hostNode{dir: q.dir, addr: [4]uint32{addr}, mask: [4]uint32{mask}}, nil
}

func (p *parser) hostQualifier(q qual) error {
	return p.errAt(q.proto, `%q cannot qualify a host or net; write "%s and host ..." or "%s port ..."`,
		q.proto.text, q.proto.text, q.proto.text)
}

func (p *parser) addr6(t token, q qual) (node, error) {
	if err := p.notAnAddress(t, q); err != nil {
		return nil, err
	}
	a, err := netip.ParseAddr(t.text)
	if err != nil {
		return nil, p.errAt(t, "%q is not a valid IPv6 address", t.text)
	}
	plen := uint32(128)
	if p.peek().isOp("/") {
		if plen, err = p.prefixLength(t, q, 128); err != nil {
			return nil, err
		}
	}
	switch {
	case q.proto.kind == tEOF || q.proto.is(kwIP6):
	case q.proto.is(kwIP):
		return nil, p.errAt(q.proto, `%q is an IPv6 address, which "ip" cannot match`, t.text)
	default:
		return nil, p.hostQualifier(q)
	}
	b := a.As16()
	n := hostNode{v6: true, dir: q.dir}
	for i := range 4 {
		n.addr[i] = uint32(b[4*i])<<24 | uint32(b[4*i+1])<<16 | uint32(b[4*i+2])<<8 | uint32(b[4*i+3])
		if bits := int(plen) - 32*i; bits >= 32 {
			n.mask[i] = ^uint32(0)
		} else if bits > 0 {
			n.mask[i] = ^uint32(0) << (32 - bits)
		}
		if n.addr[i]&^n.mask[i] != 0 {
			return nil, p.errAt(t, "%q has bits set beyond the prefix length %d", t.text, plen)
		}
	}
	return n, nil
}

// notAnAddress refuses an address where a port or protocol belongs.
func (p *parser) notAnAddress(t token, q qual) error {
	switch q.addr {
	case addrPort, addrPortrange, addrProto:
		return p.errAt(t, "%q needs a number or name, not the address %q", q.head.text, t.text)
	}
	return nil
}

func (p *parser) name(t token, q qual) (node, error) {
	switch q.addr {
	case addrPort:
		port, over, ok := lookupService(t.text)
		if !ok {
			return nil, p.errAt(t, "%q is not a service name in /etc/services; give a port number", t.text)
		}
		over, err := p.nameTransports(q, t.text, over)
		return portNode{over, q.dir, uint16(port), uint16(port)}, err
	case addrPortrange:
		return p.portRange(t, q)
	case addrProto:
		v, ok := protocolNames[t.text]
		if !ok {
			return nil, p.errAt(t, "%q is not a known IP protocol name; give the protocol number", t.text)
		}
		return p.protoTest(q, v)
	}
	return nil, p.errAt(t, "%q: host names are not resolved; give an IPv4 or IPv6 address", t.text)
}

// portRange reads "lo-hi", each a number or a service name.
func (p *parser) portRange(t token, q qual) (node, error) {
	loText, hiText, ok := strings.Cut(t.text, "-")
	if !ok {
		return nil, p.errAt(t, "%q is not a port range such as 1000-2000", t.text)
	}
	var ports [2]int
	var over [2]transports
	for i, s := range []string{loText, hiText} {
		if n, err := strconv.ParseUint(s, 10, 32); err == nil {
			if n > 0xffff {
				return nil, p.errAt(t, "port %s in %q is out of range 0-65535", s, t.text)
			}
			ports[i], over[i] = int(n), overAny
		} else if ports[i], over[i], ok = lookupService(s); !ok {
			return nil, p.errAt(t, "%q in the range %q is neither a port number nor a service name", s, t.text)
		}
	}
	both := over[0]
	if over[0] != over[1] {
		both = overAny
	}
	both, err := p.nameTransports(q, t.text, both)
	lo, hi := ports[0], ports[1]
	if lo > hi {
		lo, hi = hi, lo
	}
	return portNode{both, q.dir, uint16(lo), uint16(hi)}, err
}

// numberTransports are the transports a numeric port test covers.
func (p *parser) numberTransports(q qual) (transports, error) {
	switch {
	case q.proto.kind == tEOF:
		return overAny, nil
	case q.proto.is(kwTCP):
		return overTCP, nil
	case q.proto.is(kwUDP):
		return overUDP, nil
	case q.proto.is(kwSCTP):
		return overSCTP, nil
	}
	return 0, p.errAt(q.proto, "%q cannot qualify %q; use tcp, udp or sctp", q.proto.text, q.head.text)
}

// nameTransports narrows the transports of a service name to the protocol
// qualifier, refusing, as libpcap does, a service not defined for it.
func (p *parser) nameTransports(q qual, name string, over transports) (transports, error) {
	want, err := p.numberTransports(q)
	if err != nil || want == overAny {
		return over, err
	}
	if over != overAny && over != want {
		return 0, p.errAt(q.proto, "%q is not a %s service in /etc/services", name, q.proto.text)
	}
	return want, nil
}

func (p *parser) protoTest(q qual, num uint8) (node, error) {
	switch {
	case q.proto.kind == tEOF:
		return protoNode{anyFamily, num}, nil
	case q.proto.is(kwIP):
		return protoNode{ipv4Only, num}, nil
	case q.proto.is(kwIP6):
		return protoNode{ipv6Only, num}, nil
	}
	return nil, p.errAt(q.proto, `%q cannot qualify "proto"; use "ip proto", "ip6 proto" or "proto"`, q.proto.text)
}
