package pktfilter

import (
	"net"
	"strings"
)

// IP protocol numbers the filters name.
const (
	protoICMP     = 1
	protoIGMP     = 2
	protoTCP      = 6
	protoIGRP     = 9
	protoUDP      = 17
	protoFragment = 44 // IPv6 fragment header
	protoESP      = 50
	protoAH       = 51
	protoICMP6    = 58
	protoPIM      = 103
	protoVRRP     = 112
	protoSCTP     = 132
)

// keywordProtocols are the protocol keywords and their IP protocol numbers.
var keywordProtocols = map[keyword]uint8{
	kwTCP: protoTCP, kwUDP: protoUDP, kwSCTP: protoSCTP, kwICMP: protoICMP, kwICMP6: protoICMP6,
	kwIGMP: protoIGMP, kwIGRP: protoIGRP, kwPIM: protoPIM, kwVRRP: protoVRRP, kwCARP: protoVRRP,
	kwAH: protoAH, kwESP: protoESP,
}

// protocolNames are the names and aliases of Debian's /etc/protocols, built
// in so that a filter means the same on every host.
var protocolNames = map[string]uint8{}

func init() {
	for _, line := range strings.Split(`0 ip IP hopopt HOPOPT
		1 icmp ICMP
		2 igmp IGMP
		3 ggp GGP
		4 ipencap IP-ENCAP
		5 st ST
		6 tcp TCP
		8 egp EGP
		9 igp IGP
		12 pup PUP
		17 udp UDP
		20 hmp HMP
		22 xns-idp XNS-IDP
		27 rdp RDP
		29 iso-tp4 ISO-TP4
		33 dccp DCCP
		36 xtp XTP
		37 ddp DDP
		38 idpr-cmtp IDPR-CMTP
		41 ipv6 IPv6
		43 ipv6-route IPv6-Route
		44 ipv6-frag IPv6-Frag
		45 idrp IDRP
		46 rsvp RSVP
		47 gre GRE
		50 esp IPSEC-ESP
		51 ah IPSEC-AH
		57 skip SKIP
		58 ipv6-icmp IPv6-ICMP
		59 ipv6-nonxt IPv6-NoNxt
		60 ipv6-opts IPv6-Opts
		73 rspf RSPF CPHB
		81 vmtp VMTP
		88 eigrp EIGRP
		89 ospf OSPFIGP
		93 ax.25 AX.25
		94 ipip IPIP
		97 etherip ETHERIP
		98 encap ENCAP
		103 pim PIM
		108 ipcomp IPCOMP
		112 vrrp VRRP
		115 l2tp L2TP
		124 isis ISIS
		132 sctp SCTP
		133 fc FC
		135 mobility-header Mobility-Header
		136 udplite UDPLite
		137 mpls-in-ip MPLS-in-IP
		138 manet
		139 hip HIP
		140 shim6 Shim6
		141 wesp WESP
		142 rohc ROHC
		143 ethernet Ethernet`, "\n") {
		fields := strings.Fields(line)
		v, _ := parseNumber(fields[0])
		for _, name := range fields[1:] {
			protocolNames[name] = uint8(v)
		}
	}
}

// transports names which transport protocols a port test covers.
type transports uint8

const (
	overTCP transports = 1 << iota
	overUDP
	overSCTP
	overAny = overTCP | overUDP | overSCTP
)

// lookupService finds a service name in /etc/services as libpcap does: the
// TCP port when there is one, and both TCP and UDP (and so SCTP too) when the
// name has the same port over both.
func lookupService(name string) (port int, over transports, ok bool) {
	tcp, tcpErr := net.LookupPort("tcp", name)
	udp, udpErr := net.LookupPort("udp", name)
	switch {
	case tcpErr == nil && udpErr == nil && tcp == udp:
		return tcp, overAny, true
	case tcpErr == nil:
		return tcp, overTCP, true
	case udpErr == nil:
		return udp, overUDP, true
	}
	return 0, 0, false
}
