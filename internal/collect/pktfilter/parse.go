package pktfilter

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// maxNesting bounds parentheses, negations and nested accessors, so that a
// hostile expression cannot exhaust the stack.
const maxNesting = 200

// qual is the qualifiers in force for an id ("host", "tcp src port"...).
// pcap-filter(7) lets a bare id after "and" or "or" inherit them from the
// test before: "host a or b" is "host a or host b".
type qual struct {
	set   bool  // false where libpcap has no qualifiers to pass on: after "tcp", a comparison...
	proto token // protocol qualifier, or a tEOF token when there is none
	dir   direction
	addr  addrKind
	head  token // the last qualifier word, which messages name
}

type addrKind int

const (
	addrDefault addrKind = iota // only a direction or protocol: an address
	addrHost
	addrNet
	addrPort
	addrPortrange
	addrProto
)

var addrKeywords = map[keyword]addrKind{
	kwHost: addrHost, kwNet: addrNet, kwPort: addrPort, kwPortrange: addrPortrange, kwProto: addrProto,
}

// unit is what the parser has read where a test may stand. Whether a bare
// number is an id ("port 80 or 443") or a value ("(80) > len"), and whether
// a parenthesized expression is a test or a value, shows only in what
// follows it, so the parser keeps it open until then.
type unit struct {
	kind unitKind
	test node  // unitTest, unitID
	q    qual  // unitTest: what a bare id after it inherits
	num  token // unitNum
	val  expr  // unitNum, unitArith
	at   token // where it starts
}

type unitKind int

const (
	unitTest  unitKind = iota // a test
	unitID                    // an id, or a list of them, with the inherited qualifiers
	unitNum                   // a bare number
	unitArith                 // an arithmetic value with no comparison
)

var binaryOps = map[string]struct {
	prec int
	op   bpf.ALUOp
}{
	"|": {1, bpf.ALUOpOr}, "&": {2, bpf.ALUOpAnd},
	"<<": {3, bpf.ALUOpShiftLeft}, ">>": {3, bpf.ALUOpShiftRight},
	"+": {4, bpf.ALUOpAdd}, "-": {4, bpf.ALUOpSub},
	"*": {5, bpf.ALUOpMul}, "/": {5, bpf.ALUOpDiv},
	// libpcap's grammar gives % and ^ no precedence, so yacc always shifts
	// them: each takes the single operand before it and everything after it.
	"%": {0, bpf.ALUOpMod}, "^": {0, bpf.ALUOpXor},
}

var relops = map[string]bpf.JumpTest{
	">": bpf.JumpGreaterThan, ">=": bpf.JumpGreaterOrEqual, "=": bpf.JumpEqual,
	"<": bpf.JumpLessThan, "<=": bpf.JumpLessOrEqual, "!=": bpf.JumpNotEqual,
}

// accessorHeaders are the protocols that can be indexed, proto[off:size].
var accessorHeaders = map[keyword]header{
	kwIP: {kind: ipv4Header}, kwIP6: {kind: ipv6Header}, kwICMP6: {kind: icmp6Header},
	kwTCP: {transportHeader, protoTCP}, kwUDP: {transportHeader, protoUDP},
	kwSCTP: {transportHeader, protoSCTP}, kwICMP: {transportHeader, protoICMP},
	kwIGMP: {transportHeader, protoIGMP}, kwIGRP: {transportHeader, protoIGRP},
	kwPIM: {transportHeader, protoPIM}, kwVRRP: {transportHeader, protoVRRP},
	kwCARP: {transportHeader, protoVRRP},
}

type parser struct {
	expr  string
	toks  []token
	i     int
	depth int
}

// parse turns expr into a test; the empty expression accepts every packet.
func parse(expr string) (node, error) {
	toks, lexErr := lex(expr)
	if lexErr != nil {
		lexErr.Expr = expr
		return nil, lexErr
	}
	p := &parser{expr: expr, toks: toks}
	if p.peek().kind == tEOF {
		return acceptAll{}, nil
	}
	u, err := p.parseSeq(qual{})
	if err != nil {
		return nil, err
	}
	n, _, err := p.asTest(u, qual{})
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.isOp(")") {
		return nil, p.errAt(t, `")" has no matching "("`)
	} else if t.kind != tEOF {
		return nil, p.unexpected(t)
	}
	return n, nil
}

func (p *parser) peek() token { return p.peekAt(0) }

func (p *parser) peekAt(k int) token {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.peek()
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) errAt(t token, format string, args ...any) *Error {
	return &Error{Expr: p.expr, Pos: t.pos, Token: t.text, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) unexpected(t token) *Error {
	if t.kind == tEOF {
		return p.errAt(t, "the expression ends too early")
	}
	return p.errAt(t, "%s is unexpected here", t.quoted())
}

func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > maxNesting {
		return p.errAt(t, "the expression nests more than %d deep", maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseSeq reads units joined by "and" and "or", which libpcap gives equal
// precedence, left to right. A sequence that starts with an id is a list
// of ids sharing the qualifiers in force, as in "host (a or b)".
func (p *parser) parseSeq(ctx qual) (unit, error) {
	first, err := p.parseUnit(ctx)
	if err != nil || !p.peek().isAndOr() {
		return first, err
	}
	list := first.kind == unitID || first.kind == unitNum
	n, q, err := p.asTest(first, ctx)
	if err != nil {
		return unit{}, err
	}
	for p.peek().isAndOr() {
		op := p.next()
		if t := p.peek(); t.kind == tEOF || t.isOp(")") {
			return unit{}, p.errAt(op, "%q needs a test after it", op.text)
		}
		u, err := p.parseUnit(q)
		if err != nil {
			return unit{}, err
		}
		if list && u.kind == unitTest {
			return unit{}, p.errAt(u.at, "%s cannot follow %q in a list of values; only addresses, numbers and names can",
				u.at.quoted(), op.text)
		}
		r, rq, err := p.asTest(u, q)
		if err != nil {
			return unit{}, err
		}
		if op.is(kwAnd) {
			n = andNode{n, r}
		} else {
			n = orNode{n, r}
		}
		q = rq
	}
	kind := unitTest
	if list {
		kind = unitID
	}
	return unit{kind: kind, test: n, q: q, at: first.at}, nil
}

// asTest settles a unit that stands as a test, with q the qualifiers in
// force, and says which qualifiers a following bare id inherits.
func (p *parser) asTest(u unit, q qual) (node, qual, error) {
	switch u.kind {
	case unitTest:
		return u.test, u.q, nil
	case unitID:
		return u.test, q, nil
	case unitNum:
		n, err := p.resolveNumber(u.num, q)
		return n, q, err
	}
	return nil, q, p.errAt(u.at, "the value starting at %s is not compared to anything; add a comparison such as != 0",
		u.at.quoted())
}

func (p *parser) parseUnit(ctx qual) (unit, error) {
	t := p.peek()
	switch {
	case t.is(kwNot):
		return p.parseNot(ctx)
	case t.isOp("("):
		g, err := p.parseGroup(ctx)
		if err == nil && (g.kind == unitNum || g.kind == unitArith) && p.continuesArith(p.peek()) {
			return p.parseComparison(&g)
		}
		return g, err
	case t.kind == tNum:
		if p.continuesArith(p.peekAt(1)) {
			return p.parseComparison(nil)
		}
		p.next()
		return unit{kind: unitNum, num: t, val: constExpr{t.num}, at: t}, nil
	case t.isOp("-") || t.is(kwLen) || (protocolKeyword(t) && p.peekAt(1).isOp("[")):
		return p.parseComparison(nil)
	case t.kind == tName || t.kind == tAddr4 || t.kind == tAddr6 || t.kind == tEther || t.kind == tArcnet:
		n, err := p.parseID(ctx)
		return unit{kind: unitID, test: n, at: t}, err
	case protocolKeyword(t):
		return p.parseProtoTerm()
	case t.is(kwSrc) || t.is(kwDst) || addrKeywords[t.kw] != addrDefault && t.kind == tKeyword:
		return p.parseHead(token{kind: tEOF})
	case t.is(kwLess) || t.is(kwGreater):
		p.next()
		n := p.peek()
		if n.kind != tNum {
			return unit{}, p.errAt(t, "%q needs a number of bytes", t.text)
		}
		p.next()
		cond := bpf.JumpLessOrEqual
		if t.is(kwGreater) {
			cond = bpf.JumpGreaterOrEqual
		}
		return unit{kind: unitTest, test: relNode{cond, lenExpr{}, constExpr{n.num}}, at: t}, nil
	case t.is(kwMulticast):
		return unit{}, p.errAt(t, `"multicast" alone is a link-layer test; skbtrace filters packets from their IP header, use "ip multicast" or "ip6 multicast"`)
	case t.is(kwMask):
		return unit{}, p.errAt(t, `"mask" must follow a net address, as in "net 10.0.0.0 mask 255.0.0.0"`)
	case t.isAndOr():
		return unit{}, p.errAt(t, "%q needs a test before it", t.text)
	case t.kind == tKeyword:
		return unit{}, p.unsupported(t)
	}
	return unit{}, p.unexpected(t)
}

func (p *parser) parseNot(ctx qual) (unit, error) {
	t := p.next()
	if err := p.enter(t); err != nil {
		return unit{}, err
	}
	defer p.leave()
	if n := p.peek(); n.kind == tEOF || n.isOp(")") || n.isAndOr() {
		return unit{}, p.errAt(t, "%q needs a test after it", t.text)
	}
	u, err := p.parseUnit(ctx)
	if err != nil {
		return unit{}, err
	}
	switch u.kind {
	case unitTest:
		return unit{kind: unitTest, test: notNode{u.test}, q: u.q, at: t}, nil
	case unitID:
		return unit{kind: unitID, test: notNode{u.test}, at: t}, nil
	case unitNum:
		n, err := p.resolveNumber(u.num, ctx)
		return unit{kind: unitID, test: notNode{n}, at: t}, err
	}
	return unit{}, p.errAt(t, "%q applies to tests, not to the value after it; compare the value first", t.text)
}

// parseGroup reads a parenthesized test, value or list of ids.
func (p *parser) parseGroup(ctx qual) (unit, error) {
	open := p.next()
	if err := p.enter(open); err != nil {
		return unit{}, err
	}
	defer p.leave()
	if p.peek().isOp(")") {
		return unit{}, p.errAt(open, "the parentheses are empty")
	}
	u, err := p.parseSeq(ctx)
	if err != nil {
		return unit{}, err
	}
	if t := p.peek(); t.kind == tEOF {
		return unit{}, p.errAt(open, `"(" is not closed`)
	} else if !t.isOp(")") {
		return unit{}, p.errAt(t, `%s is unexpected here; expected ")"`, t.quoted())
	}
	p.next()
	// libpcap passes on the qualifiers from before the parentheses.
	u.q = ctx
	if u.kind != unitNum {
		u.at = open
	}
	return u, nil
}

func (p *parser) continuesArith(t token) bool {
	if t.kind != tOp {
		return false
	}
	_, arith := binaryOps[t.op]
	_, rel := relops[t.op]
	return arith || rel
}

// parseComparison reads an arithmetic value and, if a comparison follows,
// the comparison; first is a value already read in parentheses.
func (p *parser) parseComparison(first *unit) (unit, error) {
	at := p.peek()
	var firstVal expr
	if first != nil {
		at, firstVal = first.at, first.val
	}
	l, err := p.parseArith(1, firstVal)
	if err != nil {
		return unit{}, err
	}
	rel := p.peek()
	cond, ok := relops[rel.op]
	if rel.kind != tOp || !ok {
		return unit{kind: unitArith, val: l, at: at}, nil
	}
	p.next()
	r, err := p.parseArith(1, nil)
	if err != nil {
		return unit{}, err
	}
	if need := scratchNeed(binExpr{l: l, r: r}); need > scratchSlots {
		return unit{}, p.errAt(rel, "the comparison needs %d scratch registers; classic BPF has %d", need, scratchSlots)
	}
	return unit{kind: unitTest, test: relNode{cond, l, r}, at: at}, nil
}

// parseArith reads operators of precedence minPrec and up, starting from
// the value first when it is not nil.
func (p *parser) parseArith(minPrec int, first expr) (expr, error) {
	l, err := p.parseOperand(first)
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		b, ok := binaryOps[t.op]
		if t.kind != tOp || !ok || b.prec == 0 || b.prec < minPrec {
			return l, nil
		}
		p.next()
		r, err := p.parseArith(b.prec+1, nil)
		if err != nil {
			return nil, err
		}
		if l, err = p.binary(t, b.op, l, r); err != nil {
			return nil, err
		}
	}
}

// parseOperand reads a value with its unary minus, and a % or ^ after it
// with everything that follows, as libpcap groups them.
func (p *parser) parseOperand(first expr) (expr, error) {
	t := p.peek()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	v := first
	if v == nil && t.isOp("-") {
		p.next()
		x, err := p.parseOperand(nil)
		if err != nil {
			return nil, err
		}
		if c, ok := x.(constExpr); ok {
			return constExpr{-c.v}, nil
		}
		return negExpr{x}, nil
	}
	if v == nil {
		var err error
		if v, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if op := p.peek(); op.isOp("%") || op.isOp("^") {
		p.next()
		r, err := p.parseArith(1, nil)
		if err != nil {
			return nil, err
		}
		return p.binary(op, binaryOps[op.op].op, v, r)
	}
	return v, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.peek()
	switch {
	case t.kind == tNum:
		p.next()
		return constExpr{t.num}, nil
	case t.is(kwLen):
		p.next()
		return lenExpr{}, nil
	case protocolKeyword(t) && p.peekAt(1).isOp("["):
		return p.parseAccessor()
	case t.isOp("("):
		g, err := p.parseGroup(qual{})
		if err != nil {
			return nil, err
		}
		if g.kind != unitNum && g.kind != unitArith {
			return nil, p.errAt(g.at, "the parentheses hold a test where a value is expected")
		}
		return g.val, nil
	case t.kind == tEOF:
		return nil, p.errAt(t, "the expression ends where a value is expected")
	}
	return nil, p.errAt(t, "%s is not a value; expected a number, len or an accessor such as ip[0]", t.quoted())
}

func (p *parser) parseAccessor() (expr, error) {
	name := p.next()
	h, ok := accessorHeaders[name.kw]
	if !ok {
		return nil, p.errAt(name, "%q cannot be indexed; ip, ip6, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim, vrrp and carp can",
			name.text)
	}
	open := p.next()
	if err := p.enter(open); err != nil {
		return nil, err
	}
	defer p.leave()
	off, err := p.parseArith(1, nil)
	if err != nil {
		return nil, err
	}
	size := 1
	if colon := p.peek(); colon.isOp(":") {
		p.next()
		s := p.peek()
		if s.kind != tNum {
			return nil, p.errAt(colon, `":" in %s[] needs an access size: 1, 2 or 4`, name.text)
		}
		p.next()
		if s.num != 1 && s.num != 2 && s.num != 4 {
			return nil, p.errAt(s, "access size %s must be 1, 2 or 4", s.text)
		}
		size = int(s.num)
	}
	if t := p.peek(); t.kind == tEOF {
		return nil, p.errAt(open, `"[" is not closed`)
	} else if !t.isOp("]") {
		return nil, p.errAt(t, `%s is unexpected here; expected "]"`, t.quoted())
	}
	p.next()
	return loadExpr{from: h, off: off, size: size}, nil
}

// binary builds l op r, folding constants and refusing what libpcap refuses.
func (p *parser) binary(opTok token, op bpf.ALUOp, l, r expr) (expr, error) {
	rc, ok := r.(constExpr)
	if !ok {
		return binExpr{op, l, r}, nil
	}
	switch {
	case op == bpf.ALUOpDiv && rc.v == 0:
		return nil, p.errAt(opTok, "division by zero")
	case op == bpf.ALUOpMod && rc.v == 0:
		return nil, p.errAt(opTok, "modulus by zero")
	case (op == bpf.ALUOpShiftLeft || op == bpf.ALUOpShiftRight) && rc.v > 31:
		return nil, p.errAt(opTok, "%q shifts by %d bits; at most 31 are possible", opTok.text, rc.v)
	}
	if lc, ok := l.(constExpr); ok {
		return constExpr{fold(op, lc.v, rc.v)}, nil
	}
	return binExpr{op, l, r}, nil
}

func fold(op bpf.ALUOp, a, b uint32) uint32 {
	switch op {
	case bpf.ALUOpAdd:
		return a + b
	case bpf.ALUOpSub:
		return a - b
	case bpf.ALUOpMul:
		return a * b
	case bpf.ALUOpDiv:
		return a / b
	case bpf.ALUOpMod:
		return a % b
	case bpf.ALUOpAnd:
		return a & b
	case bpf.ALUOpOr:
		return a | b
	case bpf.ALUOpXor:
		return a ^ b
	case bpf.ALUOpShiftLeft:
		return a << b
	default:
		return a >> b
	}
}

// parseProtoTerm reads what starts with a protocol name: a test on its own
// ("tcp"), a qualified id ("tcp port 80") or "ip multicast".
func (p *parser) parseProtoTerm() (unit, error) {
	pt := p.next()
	t := p.peek()
	switch {
	case t.is(kwSrc) || t.is(kwDst) || t.kind == tKeyword && addrKeywords[t.kw] != addrDefault:
		return p.parseHead(pt)
	case t.is(kwMulticast):
		p.next()
		if !pt.is(kwIP) && !pt.is(kwIP6) {
			return unit{}, p.errAt(pt, `%q cannot qualify "multicast"; use "ip multicast" or "ip6 multicast"`, pt.text)
		}
		return unit{kind: unitTest, test: multicastNode{v6: pt.is(kwIP6)}, at: pt}, nil
	case t.kind == tKeyword && t.kw >= kwLinkLayer || t.is(kwBroadcast):
		return unit{}, p.unsupported(t)
	}
	var n node
	switch pt.kw {
	case kwIP, kwIP6:
		n = familyNode{v6: pt.is(kwIP6)}
	case kwICMP, kwIGMP, kwIGRP, kwVRRP, kwCARP:
		n = protoNode{ipv4Only, keywordProtocols[pt.kw]}
	case kwICMP6:
		n = protoNode{ipv6Only, protoICMP6}
	default:
		n = protoNode{anyFamily, keywordProtocols[pt.kw]}
	}
	return unit{kind: unitTest, test: n, at: pt}, nil
}

// parseHead reads the qualifiers and the id they qualify; proto is the
// protocol qualifier already read, or a tEOF token.
func (p *parser) parseHead(proto token) (unit, error) {
	at := p.peek()
	if proto.kind != tEOF {
		at = proto
	}
	q := qual{set: true, proto: proto}
	t := p.next()
	q.head = t
	if t.is(kwSrc) || t.is(kwDst) {
		q.dir = srcOnly
		if t.is(kwDst) {
			q.dir = dstOnly
		}
		if conj, other := p.peek(), p.peekAt(1); conj.isAndOr() && (other.is(kwSrc) || other.is(kwDst)) && other.kw != t.kw {
			p.next()
			p.next()
			q.dir = srcOrDst
			if conj.is(kwAnd) {
				q.dir = srcAndDst
			}
		}
		if a := p.peek(); a.kind == tKeyword {
			switch kind := addrKeywords[a.kw]; kind {
			case addrProto:
				return unit{}, p.errAt(a, "%q cannot qualify %q", t.text, a.text)
			case addrDefault:
			default:
				p.next()
				q.addr, q.head = kind, a
			}
		}
	} else {
		q.addr = addrKeywords[t.kw]
	}
	n, err := p.parseValue(q)
	return unit{kind: unitTest, test: n, q: q, at: at}, err
}

// parseValue reads the id after qualifiers: "80", "(80 or 443)", "not 10.0.0.1".
func (p *parser) parseValue(q qual) (node, error) {
	t := p.peek()
	switch {
	case t.is(kwNot):
		p.next()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		n, err := p.parseValue(q)
		return notNode{n}, err
	case t.isOp("("):
		g, err := p.parseGroup(q)
		switch {
		case err != nil:
			return nil, err
		case g.kind == unitID:
			return g.test, nil
		case g.kind == unitNum:
			return p.resolveNumber(g.num, q)
		}
		return nil, p.errAt(g.at, "%s may be followed by values in parentheses, not by tests", q.head.quoted())
	case q.addr == addrProto && t.kind == tKeyword && keywordProtocols[t.kw] != 0:
		// Unlike libpcap, "proto tcp" needs no backslash.
		p.next()
		return p.protoTest(q, keywordProtocols[t.kw])
	case t.kind == tNum || t.kind == tName || t.kind == tAddr4 || t.kind == tAddr6 || t.kind == tEther || t.kind == tArcnet:
		return p.parseID(q)
	}
	var what string
	switch q.addr {
	case addrDefault:
		what = "an address"
	case addrHost:
		what = "an IPv4 or IPv6 address"
	case addrNet:
		what = "a network such as 10.0.0.0/8"
	case addrPort:
		what = "a number or service name"
	case addrPortrange:
		what = "a range such as 1000-2000"
	case addrProto:
		what = "a protocol number or name"
	}
	return nil, p.errAt(q.head, "%q needs %s", q.head.text, what)
}

func (p *parser) unsupported(t token) error {
	switch {
	case t.kw == kwLinkLayer:
		return p.errAt(t, "%q is a link-layer test; skbtrace filters packets from their IP header", t.text)
	case t.kw == kwMetadata:
		return p.errAt(t, "%q tests capture metadata, not packet bytes; skbtrace filters see only the packet", t.text)
	case t.is(kwBroadcast):
		return p.errAt(t, `"broadcast" needs the link layer or the interface netmask; skbtrace filters see neither`)
	case t.text == "protochain":
		return p.errAt(t, `"protochain" is not supported: it walks IPv6 extension headers; use "proto" or "ip6 proto"`)
	case t.text == "byte":
		return p.errAt(t, `"byte" is not supported; use ip[N], as in "ip[8] < 2"`)
	case t.kw == kwUnsupported:
		return p.errAt(t, "%q is not supported: skbtrace filters do not look inside tunnels", t.text)
	}
	return p.unexpected(t)
}

func protocolKeyword(t token) bool { return t.kind == tKeyword && t.kw >= kwIP && t.kw <= kwESP }
