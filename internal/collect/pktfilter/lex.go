package pktfilter

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

type tokKind int

const (
	tEOF     tokKind = iota
	tNum             // a number, or a named constant such as tcp-syn
	tName            // a name: service, protocol or host name; \name escapes keywords
	tAddr4           // dotted IPv4 address, possibly short (10.1)
	tAddr6           // IPv6 address
	tEther           // ethernet address
	tArcnet          // ARCnet address ($1f)
	tKeyword         // see keyword
	tOp              // operator or punctuation; op holds it
)

type token struct {
	kind tokKind
	kw   keyword // tKeyword
	op   string  // tOp, "==" written as "="
	text string  // as written, but without the backslash of an escaped name
	pos  int     // byte offset in the expression
	num  uint32  // tNum
}

func (t token) is(kw keyword) bool { return t.kind == tKeyword && t.kw == kw }

func (t token) isOp(op string) bool { return t.kind == tOp && t.op == op }

func (t token) isAndOr() bool { return t.is(kwAnd) || t.is(kwOr) }

// quoted names the token in messages.
func (t token) quoted() string {
	if t.kind == tEOF {
		return "the end of the expression"
	}
	return fmt.Sprintf("%q", t.text)
}

type keyword int

const (
	kwAnd keyword = iota + 1
	kwOr
	kwNot
	kwSrc
	kwDst
	kwHost
	kwNet
	kwMask
	kwPort
	kwPortrange
	kwProto
	kwLess
	kwGreater
	kwLen
	kwMulticast
	kwBroadcast

	// Protocol names: tests on their own, qualifiers, and packet accessors.
	kwIP
	kwIP6
	kwTCP
	kwUDP
	kwSCTP
	kwICMP
	kwICMP6
	kwIGMP
	kwIGRP
	kwPIM
	kwVRRP
	kwCARP
	kwAH
	kwESP

	// libpcap keywords Compile refuses, grouped by the reason.
	kwLinkLayer
	kwMetadata
	kwUnsupported
)

// keywords are libpcap's reserved words; words it knows but skbtrace cannot
// use are kept so that the error names them instead of calling them host names.
var keywords = map[string]keyword{
	"and": kwAnd, "&&": kwAnd, "or": kwOr, "||": kwOr, "not": kwNot, "!": kwNot,
	"src": kwSrc, "dst": kwDst, "host": kwHost, "net": kwNet, "mask": kwMask,
	"port": kwPort, "portrange": kwPortrange, "proto": kwProto,
	"less": kwLess, "greater": kwGreater, "len": kwLen, "length": kwLen,
	"multicast": kwMulticast, "broadcast": kwBroadcast,

	"ip": kwIP, "ip6": kwIP6, "tcp": kwTCP, "udp": kwUDP, "sctp": kwSCTP,
	"icmp": kwICMP, "icmp6": kwICMP6, "igmp": kwIGMP, "igrp": kwIGRP, "pim": kwPIM,
	"vrrp": kwVRRP, "carp": kwCARP, "ah": kwAH, "esp": kwESP,
}

func init() {
	for _, w := range strings.Fields(`link ether ppp slip fddi tr wlan arp rarp radio
		atalk aarp decnet lat sca moprc mopdl iso esis es-is isis is-is l1 l2 iih lsp
		snp csnp psnp clnp stp ipx netbeui gateway vlan mpls pppoed pppoes llc
		lane metac bcc oam oamf4 oamf4ec oamf4sc sc ilmic vpi vci connectmsg metaconnect
		fisu lssu lsu msu hfisu hlssu hmsu sio opc dpc sls hsio hopc hdpc hsls
		type subtype direction dir address1 addr1 address2 addr2 address3 addr3
		address4 addr4 ra ta`) {
		keywords[w] = kwLinkLayer
	}
	for _, w := range strings.Fields(`inbound outbound ifindex on ifname rset ruleset
		rnr rulenum srnr subrulenum reason action`) {
		keywords[w] = kwMetadata
	}
	for _, w := range strings.Fields(`protochain byte geneve vxlan batadv`) {
		keywords[w] = kwUnsupported
	}
}

// namedConstants are the numbers libpcap's scanner knows by name.
var namedConstants = map[string]uint32{
	"icmptype": 0, "icmpcode": 1,
	"icmp-echoreply": 0, "icmp-unreach": 3, "icmp-sourcequench": 4, "icmp-redirect": 5,
	"icmp-echo": 8, "icmp-routeradvert": 9, "icmp-routersolicit": 10, "icmp-timxceed": 11,
	"icmp-paramprob": 12, "icmp-tstamp": 13, "icmp-tstampreply": 14, "icmp-ireq": 15,
	"icmp-ireqreply": 16, "icmp-maskreq": 17, "icmp-maskreply": 18,

	"icmp6type": 0, "icmp6code": 1,
	"icmp6-destinationunreach": 1, "icmp6-packettoobig": 2, "icmp6-timeexceeded": 3,
	"icmp6-parameterproblem": 4, "icmp6-echo": 128, "icmp6-echoreply": 129,
	"icmp6-multicastlistenerquery": 130, "icmp6-multicastlistenerreportv1": 131,
	"icmp6-multicastlistenerdone": 132, "icmp6-routersolicit": 133, "icmp6-routeradvert": 134,
	"icmp6-neighborsolicit": 135, "icmp6-neighboradvert": 136, "icmp6-redirect": 137,
	"icmp6-routerrenum": 138, "icmp6-nodeinformationquery": 139,
	"icmp6-nodeinformationresponse": 140, "icmp6-ineighbordiscoverysolicit": 141,
	"icmp6-ineighbordiscoveryadvert": 142, "icmp6-multicastlistenerreportv2": 143,
	"icmp6-homeagentdiscoveryrequest": 144, "icmp6-homeagentdiscoveryreply": 145,
	"icmp6-mobileprefixsolicit": 146, "icmp6-mobileprefixadvert": 147,
	"icmp6-certpathsolicit": 148, "icmp6-certpathadvert": 149,
	"icmp6-multicastrouteradvert": 151, "icmp6-multicastroutersolicit": 152,
	"icmp6-multicastrouterterm": 153,

	"tcpflags": 13, "tcp-fin": 0x01, "tcp-syn": 0x02, "tcp-rst": 0x04, "tcp-push": 0x08,
	"tcp-ack": 0x10, "tcp-urg": 0x20, "tcp-ece": 0x40, "tcp-cwr": 0x80,
}

// operators, longest first so that ">=" is not read as ">".
var operators = []string{">=", "<=", "!=", "==", "<<", ">>", "&&", "||",
	"+", "-", "*", "/", "%", ":", "[", "]", "!", "<", ">", "(", ")", "&", "|", "^", "="}

// The token patterns of libpcap's scanner.
var (
	numPattern = `(?:[0-9]+|0[xX][0-9A-Fa-f]+)`
	hexByte    = `[0-9A-Fa-f][0-9A-Fa-f]?`
	hexWord    = `[0-9A-Fa-f]{4}`
	hexGroup   = `[0-9A-Fa-f]{1,4}`

	reName    = longest(`[A-Za-z0-9](?:[-_.A-Za-z0-9]*[.A-Za-z0-9])?`)
	reEscaped = longest(`\\[^ !()\n\t]+`)
	reNum     = longest(numPattern)
	reAddr4   = longest(numPattern + `\.` + numPattern + `(?:\.` + numPattern + `(?:\.` + numPattern + `)?)?`)
	reAddr6   = longest(addr6Pattern())
	reArcnet  = longest(`\$` + hexByte)
	reEther   = longest(strings.Join([]string{repeatSep(hexByte, ":", 6), repeatSep(hexByte, "-", 6),
		repeatSep(hexByte, `\.`, 6), repeatSep(hexWord, `\.`, 3), hexWord + hexWord + hexWord}, "|"))
	reBadEther = longest(hexByte + `:+(?:` + hexByte + `:+)+`)
)

func longest(pattern string) *regexp.Regexp {
	re := regexp.MustCompile(`^(?:` + pattern + `)`)
	re.Longest()
	return re
}

func repeatSep(item, sep string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = item
	}
	return strings.Join(parts, sep)
}

// addr6Pattern is the scanner's list of IPv6 spellings: eight groups, or
// fewer around one "::", optionally ending in a dotted IPv4 address.
func addr6Pattern() string {
	v4 := repeatSep(numPattern, `\.`, 4)
	alts := []string{repeatSep(hexGroup, ":", 8), repeatSep(hexGroup, ":", 6) + ":" + v4}
	for before := 0; before <= 7; before++ {
		for after := 0; before+after <= 7; after++ {
			around := repeatSep(hexGroup, ":", before) + "::" + repeatSep(hexGroup, ":", after)
			alts = append(alts, around)
			switch {
			case before+after > 5:
			case after > 0:
				alts = append(alts, around+":"+v4)
			default:
				alts = append(alts, around+v4)
			}
		}
	}
	return strings.Join(alts, "|")
}

// The scanner's rules in its order. Like flex, the lexer takes the longest
// match and, on a tie, the rule listed first: "tcp" is a keyword, "tcp-syn"
// a constant, "len-1" a name and "1:2:3:4:5:6" an ethernet address.
type rule int

const (
	ruleKeyword rule = iota
	ruleOp
	ruleArcnet
	ruleEther
	ruleNum
	ruleAddr4
	ruleAddr6
	ruleBadEther
	ruleConstant
	ruleName
	ruleEscaped
	ruleCount
)

// lex splits expr into tokens, ending with a tEOF token.
func lex(expr string) ([]token, *Error) {
	var toks []token
	for pos := 0; ; {
		for pos < len(expr) && strings.IndexByte(" \t\r\n", expr[pos]) >= 0 {
			pos++
		}
		if pos == len(expr) {
			return append(toks, token{kind: tEOF, pos: pos}), nil
		}
		tok, n, err := lexOne(expr, pos)
		if err != nil {
			return nil, err
		}
		toks = append(toks, tok)
		pos += n
	}
}

// lexOne reads the token at pos and says how many bytes it took.
func lexOne(expr string, pos int) (token, int, *Error) {
	rest := expr[pos:]
	var lens [ruleCount]int
	name := matchLen(reName, rest)
	if _, ok := keywords[rest[:name]]; ok {
		lens[ruleKeyword] = name
	}
	for _, op := range operators {
		if strings.HasPrefix(rest, op) {
			lens[ruleOp] = len(op)
			break
		}
	}
	lens[ruleArcnet] = matchLen(reArcnet, rest)
	lens[ruleEther] = matchLen(reEther, rest)
	lens[ruleNum] = matchLen(reNum, rest)
	lens[ruleAddr4] = matchLen(reAddr4, rest)
	lens[ruleAddr6] = matchLen(reAddr6, rest)
	lens[ruleBadEther] = matchLen(reBadEther, rest)
	if _, ok := namedConstants[rest[:name]]; ok {
		lens[ruleConstant] = name
	}
	lens[ruleName] = name
	lens[ruleEscaped] = matchLen(reEscaped, rest)

	best := ruleKeyword
	for r := range lens {
		if lens[r] > lens[best] {
			best = rule(r)
		}
	}
	n := lens[best]
	if n == 0 {
		return token{}, 0, &Error{Pos: pos, Token: rest[:1], Msg: fmt.Sprintf("%q is not valid in a filter expression", rest[:1])}
	}
	text := rest[:n]
	tok := token{pos: pos, text: text}
	switch best {
	case ruleKeyword:
		tok.kind, tok.kw = tKeyword, keywords[text]
	case ruleOp:
		if kw, ok := keywords[text]; ok {
			tok.kind, tok.kw = tKeyword, kw
		} else {
			tok.kind, tok.op = tOp, strings.Replace(text, "==", "=", 1)
		}
	case ruleArcnet:
		tok.kind = tArcnet
	case ruleEther:
		tok.kind = tEther
	case ruleNum:
		v, msg := parseNumber(text)
		if msg != "" {
			return token{}, 0, &Error{Pos: pos, Token: text, Msg: fmt.Sprintf("number %q %s", text, msg)}
		}
		tok.kind, tok.num = tNum, v
	case ruleAddr4:
		tok.kind = tAddr4
	case ruleAddr6:
		if _, err := netip.ParseAddr(text); err != nil {
			return token{}, 0, &Error{Pos: pos, Token: text, Msg: fmt.Sprintf("%q is not a valid IPv6 address", text)}
		}
		tok.kind = tAddr6
	case ruleBadEther:
		return token{}, 0, &Error{Pos: pos, Token: text, Msg: fmt.Sprintf("%q is not a valid ethernet address", text)}
	case ruleConstant:
		tok.kind, tok.num = tNum, namedConstants[text]
	case ruleName:
		tok.kind = tName
	case ruleEscaped:
		tok.kind, tok.text, tok.pos = tName, text[1:], pos+1
	}
	return tok, n, nil
}

func matchLen(re *regexp.Regexp, s string) int {
	if loc := re.FindStringIndex(s); loc != nil {
		return loc[1]
	}
	return 0
}

// parseNumber reads a number as libpcap does: 0x hex, leading 0 octal,
// else decimal, all 32 bits wide; msg says what is wrong, if anything.
func parseNumber(s string) (v uint32, msg string) {
	base, digits := uint64(10), s
	switch {
	case len(s) > 1 && (s[1] == 'x' || s[1] == 'X'):
		base, digits = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, digits = 8, s[1:]
	}
	var n uint64
	for _, c := range digits {
		d := uint64(strings.IndexRune("0123456789abcdef", c|0x20))
		if d >= base {
			return 0, "has a digit that is not octal"
		}
		n = n*base + d
		if n > 0xffffffff {
			return 0, "does not fit in 32 bits"
		}
	}
	return uint32(n), ""
}
