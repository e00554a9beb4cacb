package pktfilter

import (
	"math"
	"slices"

	"golang.org/x/net/bpf"
)

const (
	acceptValue  = 0x40000 // what an accepting program returns: tcpdump's default snapshot length
	scratchSlots = 16      // classic BPF's scratch memory words
)

// IP header fields the programs read.
const (
	ipv4Proto      = 9  // IPv4 protocol
	ipv4Fragment   = 6  // IPv4 flags and fragment offset
	ipv4Src        = 12 // IPv4 source address; the destination follows
	ipv6NextHeader = 6  // IPv6 next header
	ipv6Src        = 8  // IPv6 source address; the destination follows
	ipv6Len        = 40 // the fixed IPv6 header

	fragmentOffsetMask = 0x1fff
)

// label names a place in the program being built; jumps go to labels and
// link turns them into offsets.
type label int

type opKind int

const (
	opPlain  opKind = iota // an instruction that does not jump
	opMark                 // where a label is
	opJump                 // jump to l
	opBranch               // compare A with val (or X) and go to onTrue or onFalse
)

type op struct {
	kind opKind
	ins  bpf.Instruction // opPlain
	l    label           // opMark, opJump
	cond bpf.JumpTest    // opBranch
	val  uint32
	x    bool // compare with X, not val

	onTrue, onFalse label // opBranch
}

// gen builds a program as a list of ops. Each test is compiled with the
// labels to go to when it holds and when it does not, so "and", "or" and
// "not" only pass labels on: nothing is ever compiled twice.
type gen struct {
	ops    []op
	labels int
}

func (g *gen) label() label {
	g.labels++
	return label(g.labels - 1)
}

func (g *gen) mark(l label) { g.ops = append(g.ops, op{kind: opMark, l: l}) }

func (g *gen) emit(ins ...bpf.Instruction) {
	for _, in := range ins {
		g.ops = append(g.ops, op{kind: opPlain, ins: in})
	}
}

func (g *gen) jump(l label) { g.ops = append(g.ops, op{kind: opJump, l: l}) }

func (g *gen) branch(cond bpf.JumpTest, val uint32, t, f label) {
	g.ops = append(g.ops, op{kind: opBranch, cond: cond, val: val, onTrue: t, onFalse: f})
}

func (g *gen) branchX(cond bpf.JumpTest, t, f label) {
	g.ops = append(g.ops, op{kind: opBranch, cond: cond, x: true, onTrue: t, onFalse: f})
}

// test compiles n to go to t when it holds and to f when it does not.
func (g *gen) test(n node, t, f label) {
	switch n := n.(type) {
	case acceptAll:
		g.jump(t)
	case andNode:
		mid := g.label()
		g.test(n.l, mid, f)
		g.mark(mid)
		g.test(n.r, t, f)
	case orNode:
		mid := g.label()
		g.test(n.l, t, mid)
		g.mark(mid)
		g.test(n.r, t, f)
	case notNode:
		g.test(n.x, f, t)
	case familyNode:
		g.loadVersion()
		g.branch(bpf.JumpEqual, versionNibble(n.v6), t, f)
	case protoNode:
		g.proto(n, t, f)
	case hostNode:
		g.host(n, t, f)
	case portNode:
		g.port(n, t, f)
	case multicastNode:
		fam := ipv4Only
		if n.v6 {
			fam = ipv6Only
		}
		g.eachFamily(fam, t, f, func(t, f label) {
			g.emit(bpf.LoadAbsolute{Off: ipv4Src + 4, Size: 1})
			g.branch(bpf.JumpGreaterOrEqual, 224, t, f)
		}, func(t, f label) {
			g.emit(bpf.LoadAbsolute{Off: ipv6Src + 16, Size: 1})
			g.branch(bpf.JumpEqual, 0xff, t, f)
		})
	case relNode:
		g.relation(n, t, f)
	}
}

// loadVersion leaves the IP version in A's high nibble, as libpcap does.
func (g *gen) loadVersion() {
	g.emit(bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0})
}

func versionNibble(v6 bool) uint32 {
	if v6 {
		return 0x60
	}
	return 0x40
}

// eachFamily runs v4 on IPv4 packets and v6 on IPv6 ones, as fam allows;
// other packets go to f.
func (g *gen) eachFamily(fam family, t, f label, v4, v6 func(t, f label)) {
	g.loadVersion()
	ok := g.label()
	switch fam {
	case ipv4Only:
		g.branch(bpf.JumpEqual, 0x40, ok, f)
		g.mark(ok)
		v4(t, f)
	case ipv6Only:
		g.branch(bpf.JumpEqual, 0x60, ok, f)
		g.mark(ok)
		v6(t, f)
	default:
		not4, ok6 := g.label(), g.label()
		g.branch(bpf.JumpEqual, 0x40, ok, not4)
		g.mark(ok)
		v4(t, f)
		g.mark(not4) // A still holds the version
		g.branch(bpf.JumpEqual, 0x60, ok6, f)
		g.mark(ok6)
		v6(t, f)
	}
}

// oneOf goes to t when A is one of vals.
func (g *gen) oneOf(vals []uint32, t, f label) {
	for _, v := range vals[:len(vals)-1] {
		next := g.label()
		g.branch(bpf.JumpEqual, v, t, next)
		g.mark(next)
	}
	g.branch(bpf.JumpEqual, vals[len(vals)-1], t, f)
}

func (g *gen) proto(n protoNode, t, f label) {
	num := uint32(n.num)
	g.eachFamily(n.family, t, f, func(t, f label) {
		g.emit(bpf.LoadAbsolute{Off: ipv4Proto, Size: 1})
		g.branch(bpf.JumpEqual, num, t, f)
	}, func(t, f label) {
		g.emit(bpf.LoadAbsolute{Off: ipv6NextHeader, Size: 1})
		if num == protoFragment {
			g.branch(bpf.JumpEqual, num, t, f)
			return
		}
		// libpcap also takes a fragment header whose next header is num.
		other, fragment := g.label(), g.label()
		g.branch(bpf.JumpEqual, num, t, other)
		g.mark(other)
		g.branch(bpf.JumpEqual, protoFragment, fragment, f)
		g.mark(fragment)
		g.emit(bpf.LoadAbsolute{Off: ipv6Len, Size: 1})
		g.branch(bpf.JumpEqual, num, t, f)
	})
}

func (g *gen) host(n hostNode, t, f label) {
	fam, src, words := ipv4Only, uint32(ipv4Src), 1
	if n.v6 {
		fam, src, words = ipv6Only, ipv6Src, 4
	}
	dst := src + 4*uint32(words)
	body := func(t, f label) {
		g.both(n.dir, t, f,
			func(t, f label) { g.addrEqual(src, n, words, t, f) },
			func(t, f label) { g.addrEqual(dst, n, words, t, f) })
	}
	g.eachFamily(fam, t, f, body, body)
}

// both combines a source and a destination test as dir says.
func (g *gen) both(dir direction, t, f label, src, dst func(t, f label)) {
	switch dir {
	case srcOnly:
		src(t, f)
	case dstOnly:
		dst(t, f)
	case srcOrDst:
		mid := g.label()
		src(t, mid)
		g.mark(mid)
		dst(t, f)
	case srcAndDst:
		mid := g.label()
		src(mid, f)
		g.mark(mid)
		dst(t, f)
	}
}

// addrEqual compares the address at off under n's mask a word at a time,
// as libpcap does. A word the mask leaves out is still read when it is the
// last: libpcap reads it too, and a packet too short for it is rejected.
func (g *gen) addrEqual(off uint32, n hostNode, words int, t, f label) {
	for i := range words {
		last := i == words-1
		if n.mask[i] == 0 {
			if last {
				g.emit(bpf.LoadAbsolute{Off: off + 4*uint32(i), Size: 4})
				g.jump(t)
			}
			continue // the next word's read reaches farther
		}
		g.emit(bpf.LoadAbsolute{Off: off + 4*uint32(i), Size: 4})
		if n.mask[i] != math.MaxUint32 {
			g.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: n.mask[i]})
		}
		if last {
			g.branch(bpf.JumpEqual, n.addr[i], t, f)
			return
		}
		next := g.label()
		g.branch(bpf.JumpEqual, n.addr[i], next, f)
		g.mark(next)
	}
}

// port tests ports as libpcap does: on IPv4 only in first fragments, past
// the options; on IPv6 only right after the fixed header.
func (g *gen) port(n portNode, t, f label) {
	var protos []uint32
	for _, p := range []struct {
		over  transports
		proto uint32
	}{{overTCP, protoTCP}, {overUDP, protoUDP}, {overSCTP, protoSCTP}} {
		if n.over&p.over != 0 {
			protos = append(protos, p.proto)
		}
	}
	g.eachFamily(anyFamily, t, f, func(t, f label) {
		isProto, first := g.label(), g.label()
		g.emit(bpf.LoadAbsolute{Off: ipv4Proto, Size: 1})
		g.oneOf(protos, isProto, f)
		g.mark(isProto)
		g.emit(bpf.LoadAbsolute{Off: ipv4Fragment, Size: 2})
		g.branch(bpf.JumpBitsSet, fragmentOffsetMask, f, first)
		g.mark(first)
		g.emit(bpf.LoadMemShift{Off: 0})
		g.ports(n, func(off uint32) bpf.Instruction { return bpf.LoadIndirect{Off: off, Size: 2} }, t, f)
	}, func(t, f label) {
		isProto := g.label()
		g.emit(bpf.LoadAbsolute{Off: ipv6NextHeader, Size: 1})
		g.oneOf(protos, isProto, f)
		g.mark(isProto)
		g.ports(n, func(off uint32) bpf.Instruction { return bpf.LoadAbsolute{Off: ipv6Len + off, Size: 2} }, t, f)
	})
}

// ports compares the source port (at 0) and the destination port (at 2)
// that load reads.
func (g *gen) ports(n portNode, load func(off uint32) bpf.Instruction, t, f label) {
	one := func(off uint32) func(t, f label) {
		return func(t, f label) {
			g.emit(load(off))
			if n.lo == n.hi {
				g.branch(bpf.JumpEqual, uint32(n.lo), t, f)
				return
			}
			above := g.label()
			g.branch(bpf.JumpGreaterOrEqual, uint32(n.lo), above, f)
			g.mark(above)
			g.branch(bpf.JumpLessOrEqual, uint32(n.hi), t, f)
		}
	}
	g.both(n.dir, t, f, one(0), one(2))
}

// check is a header test that a packet accessor needs before its load.
type check struct {
	kind  checkKind
	proto uint8
}

type checkKind int

const (
	isIPv4 checkKind = iota
	isIPv6
	ipv4ProtoIs       // valid after isIPv4
	ipv4FirstFragment // valid after isIPv4
	ipv6NextIs        // valid after isIPv6
)

// appendChecks adds the checks e's accessors need, in libpcap's order: the
// offset's own checks come after the family check of a transport accessor
// but before its protocol and fragment checks.
func appendChecks(cs []check, e expr) []check {
	switch e := e.(type) {
	case negExpr:
		return appendChecks(cs, e.x)
	case binExpr:
		return appendChecks(appendChecks(cs, e.l), e.r)
	case loadExpr:
		switch e.from.kind {
		case ipv4Header:
			return append(appendChecks(cs, e.off), check{kind: isIPv4})
		case ipv6Header:
			return append(appendChecks(cs, e.off), check{kind: isIPv6})
		case icmp6Header:
			return append(appendChecks(cs, e.off), check{kind: isIPv6}, check{ipv6NextIs, protoICMP6})
		case transportHeader:
			cs = appendChecks(append(cs, check{kind: isIPv4}), e.off)
			return append(cs, check{ipv4ProtoIs, e.from.proto}, check{kind: ipv4FirstFragment})
		}
	}
	return cs
}

func (g *gen) check(c check, t, f label) {
	switch c.kind {
	case isIPv4, isIPv6:
		g.loadVersion()
		g.branch(bpf.JumpEqual, versionNibble(c.kind == isIPv6), t, f)
	case ipv4ProtoIs:
		g.emit(bpf.LoadAbsolute{Off: ipv4Proto, Size: 1})
		g.branch(bpf.JumpEqual, uint32(c.proto), t, f)
	case ipv4FirstFragment:
		g.emit(bpf.LoadAbsolute{Off: ipv4Fragment, Size: 2})
		g.branch(bpf.JumpBitsSet, fragmentOffsetMask, f, t)
	case ipv6NextIs:
		g.emit(bpf.LoadAbsolute{Off: ipv6NextHeader, Size: 1})
		g.branch(bpf.JumpEqual, uint32(c.proto), t, f)
	}
}

// relation makes the checks of every accessor in the comparison first, as
// libpcap does, then computes both sides and compares them.
func (g *gen) relation(n relNode, t, f label) {
	var checks []check
	for _, c := range appendChecks(appendChecks(nil, n.l), n.r) {
		if !slices.Contains(checks, c) { // a check passed once passes again
			checks = append(checks, c)
		}
	}
	for _, c := range checks {
		ok := g.label()
		g.check(c, ok, f)
		g.mark(ok)
	}
	lc, lConst := n.l.(constExpr)
	rc, rConst := n.r.(constExpr)
	switch {
	case lConst && rConst:
		if holds(n.cond, lc.v, rc.v) {
			g.jump(t)
		} else {
			g.jump(f)
		}
	case rConst:
		g.arith(n.l, 0)
		g.branch(n.cond, rc.v, t, f)
	case lConst:
		g.arith(n.r, 0)
		g.branch(mirrored[n.cond], lc.v, t, f)
	default:
		g.operands(n.l, n.r, 0)
		g.branchX(n.cond, t, f)
	}
}

// mirrored[c] is the condition c with its operands swapped.
var mirrored = map[bpf.JumpTest]bpf.JumpTest{
	bpf.JumpEqual: bpf.JumpEqual, bpf.JumpNotEqual: bpf.JumpNotEqual,
	bpf.JumpGreaterThan: bpf.JumpLessThan, bpf.JumpLessThan: bpf.JumpGreaterThan,
	bpf.JumpGreaterOrEqual: bpf.JumpLessOrEqual, bpf.JumpLessOrEqual: bpf.JumpGreaterOrEqual,
}

func holds(cond bpf.JumpTest, a, b uint32) bool {
	switch cond {
	case bpf.JumpEqual:
		return a == b
	case bpf.JumpNotEqual:
		return a != b
	case bpf.JumpGreaterThan:
		return a > b
	case bpf.JumpLessThan:
		return a < b
	case bpf.JumpGreaterOrEqual:
		return a >= b
	default:
		return a <= b
	}
}

// arith computes e into A, using scratch words from slot up.
func (g *gen) arith(e expr, slot int) {
	switch e := e.(type) {
	case constExpr:
		g.emit(bpf.LoadConstant{Dst: bpf.RegA, Val: e.v})
	case lenExpr:
		g.emit(bpf.LoadExtension{Num: bpf.ExtLen})
	case negExpr:
		g.arith(e.x, slot)
		// -A as A * (2^32 - 1): x/net/bpf's VM does not run NegateA.
		g.emit(bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: math.MaxUint32})
	case binExpr:
		if c, ok := e.r.(constExpr); ok {
			g.arith(e.l, slot)
			g.emit(bpf.ALUOpConstant{Op: e.op, Val: c.v})
			return
		}
		g.operands(e.l, e.r, slot)
		g.emit(bpf.ALUOpX{Op: e.op})
	case loadExpr:
		g.load(e, slot)
	}
}

// operands computes l into A and r into X, the side needing more scratch
// words first, so that a long chain needs only one.
func (g *gen) operands(l, r expr, slot int) {
	if scratchNeed(l) >= scratchNeed(r) {
		g.arith(l, slot)
		g.emit(bpf.StoreScratch{Src: bpf.RegA, N: slot})
		g.arith(r, slot+1)
		g.emit(bpf.TAX{}, bpf.LoadScratch{Dst: bpf.RegA, N: slot})
		return
	}
	g.arith(r, slot)
	g.emit(bpf.StoreScratch{Src: bpf.RegA, N: slot})
	g.arith(l, slot+1)
	g.emit(bpf.LoadScratch{Dst: bpf.RegX, N: slot})
}

// scratchNeed is how many scratch words arith uses for e.
func scratchNeed(e expr) int {
	switch e := e.(type) {
	case negExpr:
		return scratchNeed(e.x)
	case loadExpr:
		return scratchNeed(e.off)
	case binExpr:
		if _, ok := e.r.(constExpr); ok {
			return scratchNeed(e.l)
		}
		l, r := scratchNeed(e.l), scratchNeed(e.r)
		if l == r {
			return l + 1
		}
		return max(l, r)
	}
	return 0
}

func (g *gen) load(e loadExpr, slot int) {
	if c, ok := e.off.(constExpr); ok {
		switch e.from.kind {
		case ipv4Header, ipv6Header:
			g.emit(bpf.LoadAbsolute{Off: c.v, Size: e.size})
		case icmp6Header:
			off := uint64(c.v) + ipv6Len
			// Past 4 GiB no packet reaches: keep the load out of range.
			g.emit(bpf.LoadAbsolute{Off: uint32(min(off, math.MaxUint32)), Size: e.size})
		case transportHeader:
			g.emit(bpf.LoadMemShift{Off: 0}, bpf.LoadIndirect{Off: c.v, Size: e.size})
		}
		return
	}
	g.arith(e.off, slot)
	switch e.from.kind {
	case ipv4Header, ipv6Header:
		g.emit(bpf.TAX{}, bpf.LoadIndirect{Off: 0, Size: e.size})
	case icmp6Header:
		g.emit(bpf.TAX{}, bpf.LoadIndirect{Off: ipv6Len, Size: e.size})
	case transportHeader:
		g.emit(bpf.LoadMemShift{Off: 0}, bpf.ALUOpX{Op: bpf.ALUOpAdd}, bpf.TAX{}, bpf.LoadIndirect{Off: 0, Size: e.size})
	}
}
