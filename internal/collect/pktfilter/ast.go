package pktfilter

import "golang.org/x/net/bpf"

// node is a test on a packet; the parser builds them, gen compiles them.
type node interface{ isNode() }

type (
	acceptAll struct{} // the empty expression
	andNode   struct{ l, r node }
	orNode    struct{ l, r node }
	notNode   struct{ x node }

	// familyNode is "ip" or "ip6": the IP version.
	familyNode struct{ v6 bool }

	// protoNode is "ip proto N", "ip6 proto N" or both; like libpcap, the
	// IPv6 test also takes a fragment header followed by N.
	protoNode struct {
		family family
		num    uint8
	}

	// hostNode compares the source, destination or both addresses under a
	// mask: hosts, nets and prefixes alike. IPv4 uses word 0 only.
	hostNode struct {
		v6   bool
		dir  direction
		addr [4]uint32
		mask [4]uint32
	}

	// portNode is a port or port range on TCP, UDP or SCTP.
	portNode struct {
		over   transports
		dir    direction
		lo, hi uint16
	}

	// multicastNode is "ip multicast" or "ip6 multicast": the destination.
	multicastNode struct{ v6 bool }

	// relNode compares two arithmetic expressions; it holds only for packets
	// that have every header the expressions read.
	relNode struct {
		cond bpf.JumpTest
		l, r expr
	}
)

func (acceptAll) isNode()     {}
func (andNode) isNode()       {}
func (orNode) isNode()        {}
func (notNode) isNode()       {}
func (familyNode) isNode()    {}
func (protoNode) isNode()     {}
func (hostNode) isNode()      {}
func (portNode) isNode()      {}
func (multicastNode) isNode() {}
func (relNode) isNode()       {}

type family int

const (
	anyFamily family = iota
	ipv4Only
	ipv6Only
)

type direction int

const (
	srcOrDst direction = iota
	srcOnly
	dstOnly
	srcAndDst
)

// expr is an arithmetic expression over 32-bit unsigned values.
type expr interface{ isExpr() }

type (
	constExpr struct{ v uint32 }
	lenExpr   struct{} // the packet's length from its IP header
	negExpr   struct{ x expr }
	binExpr   struct {
		op   bpf.ALUOp
		l, r expr
	}
	// loadExpr reads size bytes at off from the start of a header.
	loadExpr struct {
		from header
		off  expr
		size int
	}
)

func (constExpr) isExpr() {}
func (lenExpr) isExpr()   {}
func (negExpr) isExpr()   {}
func (binExpr) isExpr()   {}
func (loadExpr) isExpr()  {}

// header is where a packet accessor counts from.
type header struct {
	kind  headerKind
	proto uint8 // transport: the IPv4 protocol number
}

type headerKind int

const (
	ipv4Header      headerKind = iota // ip[]
	ipv6Header                        // ip6[]
	transportHeader                   // tcp[], udp[]...: after the IPv4 header, first fragments only
	icmp6Header                       // icmp6[]: right after the fixed IPv6 header
)
