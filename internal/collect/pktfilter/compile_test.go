package pktfilter

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
)

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		expr, token, msg string
	}{
		{"tcp port", "port", `"port" needs a number or service name`},
		{"host", "host", `"host" needs an IPv4 or IPv6 address`},
		{"src net", "net", `"net" needs a network such as 10.0.0.0/8`},
		{"ip proto", "proto", `"proto" needs a protocol number or name`},
		{"(tcp", "(", `"(" is not closed`},
		{"tcp)", ")", `")" has no matching "("`},
		{"()", "(", "the parentheses are empty"},
		{"port 99999", "99999", "port 99999 is out of range 0-65535"},
		{"ip proto 300", "300", "protocol 300 is out of range 0-255"},
		{"net 10.0.0.0/33", "33", "prefix length 33 is more than 32"},
		{"net 2001:db8::/129", "129", "prefix length 129 is more than 128"},
		{"net 10.0.0.1/8", "10.0.0.1", `"10.0.0.1" has bits set outside its netmask`},
		{"host 10.0.0.0/8", "/", `a prefix length needs "net"`},
		{"net 10/8", "10", "in dotted form"},
		{"tcp[0:3] = 1", "3", "access size 3 must be 1, 2 or 4"},
		{"tcp[13 = 1", "=", `"=" is unexpected here; expected "]"`},
		{"tcp[13", "[", `"[" is not closed`},
		{"and", "and", `"and" needs a test before it`},
		{"tcp and", "and", `"and" needs a test after it`},
		{"not", "not", `"not" needs a test after it`},
		{"ether host 1:2:3:4:5:6", "ether",
			`"ether" is a link-layer test; skbtrace filters packets from their IP header`},
		{"arp", "arp", "link-layer"},
		{"vlan 100 and tcp", "vlan", "link-layer"},
		{"multicast", "multicast", `use "ip multicast" or "ip6 multicast"`},
		{"ip broadcast", "broadcast", "netmask"},
		{"inbound", "inbound", "capture metadata"},
		{"ip protochain 6", "protochain", `"protochain" is not supported`},
		{"byte 0 & 1", "byte", "use ip[N]"},
		{"geneve", "geneve", "tunnels"},
		{"host 1:2:3:4:5:6", "1:2:3:4:5:6", "link-layer address"},
		{"host foo.example.com", "foo.example.com", "host names are not resolved; give an IPv4 or IPv6 address"},
		{"port nosuchservice", "nosuchservice", `"nosuchservice" is not a service name in /etc/services`},
		{"udp port ssh", "udp", `"ssh" is not a udp service`},
		{`ip proto \nosuch`, "nosuch", `"nosuch" is not a known IP protocol name`},
		{"portrange http", "http", `"http" is not a port range such as 1000-2000`},
		{"10.0.0.1", "10.0.0.1", "needs a qualifier such as host, net or port"},
		{"tcp and 10.0.0.1", "10.0.0.1", "needs a qualifier"},
		{"tcp[13] & 2", "tcp", "is not compared to anything"},
		{"len / 0 > 1", "/", "division by zero"},
		{"len % 0 > 1", "%", "modulus by zero"},
		{"len << 32 = 0", "<<", `"<<" shifts by 32 bits`},
		{"ip[0] = 08", "08", `number "08" has a digit that is not octal`},
		{"ip[0] = 4294967296", "4294967296", "does not fit in 32 bits"},
		{"tcp host 10.0.0.1", "tcp", `"tcp" cannot qualify a host or net`},
		{"ip port 80", "ip", `"ip" cannot qualify "port"`},
		{"tcp proto 6", "tcp", `"tcp" cannot qualify "proto"`},
		{"ip host ::1", "ip", `"::1" is an IPv6 address, which "ip" cannot match`},
		{"ip6 host 10.0.0.1", "ip6", `"10.0.0.1" is an IPv4 address, which "ip6" cannot match`},
		{"port 10.0.0.1", "10.0.0.1", `"port" needs a number or name, not the address`},
		{"host 10.0.0.256", "10.0.0.256", "is not a valid IPv4 address"},
		{"host ::1.2.3.999", "::1.2.3.999", "is not a valid IPv6 address"},
		{"ip[0] = 1 ,", ",", `"," is not valid in a filter expression`},
		{"host (10.0.0.1 or tcp)", "tcp", `"tcp" cannot follow "or" in a list of values`},
		{"ah[0] = 1", "ah", `"ah" cannot be indexed`},
		{"not len", "not", `"not" applies to tests`},
		{"tcp\nand", "and", `"and" needs a test after it`},
		{strings.Repeat("(", 300) + "tcp" + strings.Repeat(")", 300), "(", "nests more than 200 deep"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			_, err := Compile(tc.expr)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *Error", err)
			}
			line := err.Error()
			if strings.ContainsAny(line, "\n\r") {
				t.Errorf("error is not one line: %q", line)
			}
			if !strings.HasPrefix(line, "pcap filter ") || !strings.Contains(line, tc.msg) {
				t.Errorf("error %q does not say %q", line, tc.msg)
			}
			if e.Expr != tc.expr || e.Token != tc.token || !strings.HasPrefix(tc.expr[e.Pos:], e.Token) {
				t.Errorf("error at %d %q, want the part %q of the expression", e.Pos, e.Token, tc.token)
			}
			if strings.ToLower(e.Msg[:1]) != e.Msg[:1] {
				t.Errorf("message %q starts with a capital", e.Msg)
			}
		})
	}
}

// TestTooLarge checks the limit of 4096 instructions.
func TestTooLarge(t *testing.T) {
	if _, err := Compile(manyHosts(200)); err != nil {
		t.Fatalf("200 hosts: %v", err)
	}
	_, err := Compile(manyHosts(1000))
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "classic BPF allows 4096") {
		t.Fatalf("1000 hosts: got %v, want the instruction limit", err)
	}
}

// TestVerdicts pins down how expressions read, independently of libpcap.
func TestVerdicts(t *testing.T) {
	syn := ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(40000, 443, 0x02, nil), v4Options{optionWords: 2})
	later := ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(40000, 443, 0x02, nil), v4Options{fragment: 100})
	dns6 := ipv6Packet("2001:db8::1", "::1", protoUDP, udpDatagram(53, 1000, nil))
	tcp6frag := ipv6Packet("2001:db8::1", "::1", protoFragment, fragmentHeader(protoTCP, 0, true, tcpSegment(80, 443, 0x12, nil)))
	for _, tc := range []struct {
		expr   string
		packet []byte
		want   bool
	}{
		{"", nil, true},
		{" \t\n", []byte{0}, true},
		{"tcp port 80 or 443", syn, true},      // 443 inherits "tcp port"
		{"tcp port 80 or 443", later, false},   // not a first fragment
		{"tcp[13] & 2 != 0", later, false},     // likewise
		{"ip[6:2] & 0x1fff != 0", later, true}, // ip[] reads any fragment
		{"host 10.0.0.1 and not 10.0.0.2", syn, false},
		{"not host 10.0.0.3 and 10.0.0.2", syn, true},
		{"udp or tcp and host 10.0.0.9", dns6, false}, // (udp or tcp) and host
		{"host 10.0.0.9 and tcp or udp", dns6, true},  // (host and tcp) or udp
		{"tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", syn, true},
		{"len = 48", syn, true},
		{"less 48 and greater 48", syn, true},
		{"len % 7 + 1 = 0", syn, true}, // len % (7+1), as libpcap groups it
		{"(len % 7) + 1 = 7", syn, true},
		{"udp port domain and ip6 src net 2001:db8::/32", dns6, true},
		{"tcp", tcp6frag, true},          // a fragment header before TCP is TCP
		{"tcp port 80", tcp6frag, false}, // but its ports are not read
		{"ip proto tcp", syn, true},
		{"tcp[100] = 0 or tcp", syn, false}, // a read past the end rejects the packet
		{"not tcp[100] = 0", syn, false},
		{"ip[0] = 0x47", []byte{0x47}, true},
	} {
		prog, err := Compile(tc.expr)
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("%q: %v", tc.expr, err)
		}
		n, err := vm.Run(tc.packet)
		if err != nil {
			t.Fatalf("%q: %v", tc.expr, err)
		}
		if got := n != 0; got != tc.want {
			t.Errorf("%q on % x: got %v, want %v\n%s", tc.expr, tc.packet, got, tc.want, listing(prog))
		}
	}
}

func FuzzCompile(f *testing.F) {
	for _, expr := range sameAsLibpcap {
		f.Add(expr)
	}
	for _, expr := range rejectedByLibpcap {
		f.Add(expr)
	}
	for _, expr := range []string{"host (10.0.0.1 or not (10.0.0.2))", "port (80)", "-(len) % 3 ^ 2 = 1",
		"icmp6[0xffffffff:4] = 0", "tcp[-1] = 0", `\tcp`, "net 10.1.2.3 mask 255.255.255.0", "((len)) > ((1))"} {
		f.Add(expr)
	}
	packets := [][]byte{nil, {0x45},
		ipv4Packet("10.0.0.1", "10.0.0.2", protoTCP, tcpSegment(80, 443, 0x12, []byte{1, 2, 3}), v4Options{optionWords: 1}),
		ipv6Packet("2001:db8::1", "::1", protoUDP, udpDatagram(53, 53, []byte{0, 0, 0, 0})),
		ipv6Packet("fe80::1", "ff02::1", protoICMP6, icmpMessage(128, 0, nil)),
	}
	f.Fuzz(func(t *testing.T, expr string) {
		prog, err := Compile(expr)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: error %v is not an *Error", expr, err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") || e.Pos < 0 || e.Pos > len(expr) ||
				!strings.HasPrefix(expr[e.Pos:], e.Token) {
				t.Fatalf("%q: bad error %#v", expr, e)
			}
			return
		}
		if len(prog) > maxInstructions {
			t.Fatalf("%q: %d instructions", expr, len(prog))
		}
		if _, err := bpf.Assemble(prog); err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		for _, p := range packets {
			if _, err := vm.Run(p); err != nil {
				t.Fatalf("%q: %v", expr, err)
			}
		}
	})
}
