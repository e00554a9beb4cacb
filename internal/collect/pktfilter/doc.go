// Package pktfilter compiles tcpdump filter expressions (pcap-filter(7))
// into classic BPF, in pure Go, for packets that start at their IP header:
// libpcap's LINKTYPE_RAW, where the first nibble tells IPv4 from IPv6. The
// kernel hooks skbtrace filters at see packets from the IP header, so the
// verdicts are libpcap's for a raw-IP capture; a test on the link layer
// cannot apply there and is refused with an error that names it.
//
// Supported, with libpcap's meaning:
//
//   - "and" (&&), "or" (||), "not" (!) and parentheses; "and" and "or" have
//     equal precedence and group left to right, "not" binds tightest.
//   - Qualifier inheritance: "host a or b", "tcp port 80 or 443",
//     "not host a and b", "port (80 or 443)".
//   - [ip|ip6] [src|dst|src or dst|src and dst] host ADDR, for IPv4 and IPv6
//     literals; short IPv4 forms as libpcap reads them (host 10.1 is
//     10.1.0.0/16).
//   - [ip|ip6] [src|dst] net NET/LEN, net NET mask MASK, short nets
//     (net 10 is 10.0.0.0/8, net 10.1 is 10.1.0.0/16), IPv6 prefixes.
//   - [tcp|udp|sctp] [src|dst] port N|NAME and portrange A-B, names from
//     /etc/services. On IPv4 only first fragments have ports, found past the
//     options; on IPv6 only a transport header right after the fixed header,
//     as in libpcap, which does not walk extension headers for ports.
//   - ip, ip6, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim, vrrp, carp, ah,
//     esp, and [ip|ip6] proto N|NAME. As in libpcap, an IPv6 protocol test
//     also takes a fragment header followed by the protocol.
//   - ip multicast, ip6 multicast (the destination address).
//   - less N, greater N and len, which count from the IP header.
//   - Comparisons (> < >= <= = == !=) of 32-bit unsigned arithmetic
//     (+ - * / % & | ^ << >>, unary minus) over numbers (decimal, 0x hex,
//     0 octal), len and accessors proto[off] and proto[off:size] with size
//     1, 2 or 4, for ip, ip6, tcp, udp, sctp, icmp, icmp6, igmp, igrp, pim,
//     vrrp and carp; transport accessors read IPv4 first fragments only.
//     libpcap's named constants work: tcpflags, tcp-syn, icmptype,
//     icmp-echo, icmp6type, icmp6-echo and the rest.
//
// As in libpcap, "|" binds looser than "&", "&" than shifts, shifts than
// "+" and "-", and those than "*" and "/"; "%" and "^", which libpcap's
// grammar leaves without a precedence, take the operand just before them
// and everything after: len % 7 + 1 is len % (7 + 1).
//
// Tests run in the order written, and a read past the end of the packet
// rejects it whatever the expression around it ("not tcp[100] = 0" rejects
// a short TCP packet): the semantics of libpcap's program before its
// optimizer, which for some cut-short packets can change a verdict.
//
// Where this package parts from libpcap 1.10:
//
//   - The empty expression matches every packet, as with tcpdump.
//   - Host and network names are not resolved: give addresses.
//   - Protocol names come from a built-in copy of /etc/protocols, and
//     "proto tcp" needs no backslash.
//   - A protocol number above 255 is an error rather than a test that
//     never matches.
//   - In arithmetic, libpcap checks the protocol of the left operand's
//     accessors only ("1 + tcp[0] = 5" reads tcp[0] of any packet); here
//     every accessor's checks apply.
//
// Refused, each with an error naming the part:
//
//   - The link layer: ether, arp, rarp, vlan, mpls, pppoed, pppoes, llc,
//     wlan, gateway, decnet, atalk, iso, ipx, stp, netbeui, ATM and SS7
//     tests, link-layer "broadcast" and "multicast", ethernet addresses.
//     The hooks see no link-layer header.
//   - Capture metadata: inbound, outbound, ifindex, ifname and pflog's
//     rule tests. A filter sees only the packet's bytes.
//   - ip broadcast, which needs the interface's netmask.
//   - protochain, which walks IPv6 extension headers in a loop; byte,
//     for which ip[N] serves; geneve, vxlan and batadv.
package pktfilter
