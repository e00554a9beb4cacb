package pktfilter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// sameAsLibpcap are expressions whose verdicts must match libpcap's on every
// packet of the corpus.
var sameAsLibpcap = []string{
	// Protocols.
	"ip", "ip6", "tcp", "udp", "sctp", "icmp", "icmp6", "igmp", "igrp", "pim", "vrrp", "carp", "ah", "esp",
	"ip proto 6", "ip6 proto 6", "proto 17", `ip proto \udp`, `ip6 proto \tcp`, `proto \gre`, `proto \IPv6-ICMP`,
	"ip6 proto 44", "ip6 proto 0", "ip proto 1 or 17", "icmp and udp",

	// Hosts and nets.
	"host 10.0.0.1", "host 10.0.0.1 or 10.0.0.2", "src host 10.0.0.1", "dst host 10.0.0.2",
	"ip src host 10.0.0.1", "src or dst host 10.0.0.1", "dst and src host 10.0.0.1", "src and dst net 10.0.0.0/8",
	"ip host 10.200.0.2", "host ::1", "ip6 host ::1", "host 2001:db8::1", "src host ::ffff:10.0.0.1",
	"net 2001:db8::/32", "dst net 2001:db8:1::/48", "ip6 src net 2001:db8:1:ff00::/56", "net ::/0", "net 0.0.0.0/0",
	"net 10.1.0.0/16", "net 10.1", "net 10", "net 10.1.2", "host 10.1", "net 10.1.2.3", "net 10.0.0.0 mask 255.0.0.0",
	"net 10.0.0.0 mask 255.0.255.0", "net 192.168.1.0/24", "dst net 10.200", "src 10.0.0.1", "dst ::1",
	"host 167772161", "net 0xa000001", "src 10", "host (10.0.0.1 or 10.0.0.2)", "host (10.0.0.1 and not 10.0.0.2)",
	"not host 10.0.0.1 and 10.0.0.2", "host 10.0.0.1 and not 10.0.0.2", "src host 10.0.0.1 or dst 10.1",

	// Ports.
	"port 80", "tcp port 80", "tcp port 80 or 443", "udp port 53", "udp src port 53", "tcp dst port 443",
	"sctp port 5201", "port http", "port domain", "tcp port https", "port ssh", "sctp port domain", "udp port domain",
	"portrange 1000-2000", "tcp portrange 1000-2000", "udp dst portrange 2000-1000", "src portrange 1-1023",
	"portrange 80", "portrange ssh-http", "port (80 or 443)", "tcp src or dst port 80", "tcp src and dst port 5201",
	"tcp port 80 or (443)", "not port 22", "port 80 and not 443", "src net 10.1.0.0/16 and dst portrange 1000-2000",
	"tcp port 5201 and host 10.200.0.2", "ip6 and tcp port 443", "udp port 53 or 1500 and host 10.1.2.3",

	// Precedence, negation and inheritance.
	"tcp or udp and host 10.0.0.1", "not tcp and host 10.0.0.1", "not (tcp or udp)", "tcp and (port 80 or port 443)",
	"host 10.0.0.1 or not 10.0.0.2 and tcp", "!tcp && !udp", "icmp || icmp6", "not not tcp",
	"host 10.0.0.1 and (tcp) or 10.0.0.2", "tcp port 80 and not (udp or icmp) or ip6",

	// Lengths.
	"len > 100", "less 60", "greater 1000", "len <= 64", "len >= 40 and len < 100", "len = 52", "len != 40",
	"length > 1400",

	// Accessors.
	"tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn", "tcp[13] & 2 != 0", "tcp[tcpflags] & tcp-rst != 0",
	"tcp[tcpflags] & (tcp-fin|tcp-push|tcp-urg|tcp-ece|tcp-cwr) != 0", "tcp[tcpflags] = tcp-ack",
	"ip[6:2] & 0x1fff != 0", "ip[0] & 0xf > 5", "ip[8] < 64", "ip[2:2] > 100", "ip[12:4] = 0x0a000001",
	"ip6[6] = 17", "ip6[4:2] > 20", "ip6[41] = 0x50", "ip6[7] < 64",
	"icmp[icmptype] == icmp-echo", "icmp[icmptype] = icmp-echoreply or icmp[icmptype] = icmp-unreach",
	"icmp[icmpcode] != 0", "icmp6[icmp6type] == icmp6-echo", "icmp6[0] = icmp6-neighborsolicit", "icmp6[1:2] = 0",
	"udp[0:2] = 53", "udp[4:2] > 20", "sctp[2:2] = 5201", "igmp[0] = 0x11", "pim[0] < 0x80", "vrrp[0:4] > 0",
	"tcp[tcp[12]>>4<<2] = 0", "tcp[(tcp[12] >> 4) * 4] > 0", "ip[ip[0] & 0xf] = 0", "ip[len - 1] > 0x80",
	"tcp[2:2] >= 1000 and tcp[2:2] <= 2000", "tcp[0:4] = 0x01bb0050", "udp[8 + udp[0]] < 0x40", "icmp6[len - 41] < 0x80",
	"tcp[0:2] = tcp[2:2]", "ip[12:4] = ip[16:4]", "ip6[8:4] > ip6[24:4]",

	// Arithmetic.
	"len - 40 > 10", "len * 2 > 200", "len / 4 = 13", "len % 7 = 3", "len & 0xf = 4", "len | 1 = 61",
	"len ^ 0xff > 150", "len << 1 > 100", "len >> 2 = 13", "-len < -50", "- len + 100 > 50",
	"ip[2:2] - ((ip[0] & 0xf) << 2) > 20", "len % 7 + 1 = 3", "len + 7 % 3 = 61", "len * 2 ^ 3 = 100",
	"len ^ 2 * 3 = 60", "len - 1 - 2 = 57", "len | 1 & 2 = 61", "(len) > 60", "(len + 1) * 2 > 120",
	"010 < len", "0x40 < len", "5 = 5", "5 > 6 or tcp", "1 + 2 * 3 = 7", "ip and 2 = 2",
	"len * len > 3000", "(ip[0] & 0xf) * 4 < len / 2",

	// Multicast.
	"ip multicast", "ip6 multicast", "not ip multicast and udp",

	"",

	// Long enough that conditional jumps need trampolines.
	manyHosts(60) + " and tcp port 80 or udp", "not (" + manyHosts(60) + ") and tcp[13] & 2 != 0",
}

// manyHosts is "host 10.0.0.1 or host 10.0.0.2 or ..." with n hosts.
func manyHosts(n int) string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("host 10.0.%d.%d", (i+1)/256, (i+1)%256)
	}
	return strings.Join(hosts, " or ")
}

// libpcapEquivalents are expressions that libpcap 1.10 reads differently
// (or not at all) next to a libpcap expression with the same meaning.
var libpcapEquivalents = []struct{ ours, libpcap string }{
	// libpcap wants a backslash before a protocol keyword after "proto".
	{"ip proto tcp", `ip proto \tcp`},
	{"proto udp", `proto \udp`},
	{"ip6 proto icmp6", "ip6 proto 58"},
	// libpcap drops the protocol checks of the right operand of an
	// arithmetic operator; Compile keeps them.
	{"1 + tcp[1] = 81", "tcp[1] + 1 = 81"},
	{"len - tcp[12] > 0", "ip[9] = 6 and ip[6:2] & 0x1fff = 0 and len - tcp[12] > 0"},
}

// rejectedByLibpcap are expressions libpcap refuses on LINKTYPE_RAW, some
// ("arp") only because they match no packet there.
var rejectedByLibpcap = []string{
	"ether host 1:2:3:4:5:6", "arp", "rarp", "vlan", "mpls", "pppoes", "multicast", "llc",
	"tcp port", "host", "(tcp", "tcp)", "port 99999", "net 10.0.0.0/33", "tcp[0:3] = 1", "and", "not",
	"udp port ssh", "sctp port http", "ip port 80", "tcp host 1.2.3.4", "ip host ::1", "ip6 net 10.0.0.0/8",
	"net 10.0.0.1/8", "host 10.0.0.0/8", "10.0.0.1", "len > 100 and", "ip[08] = 1", "ip[0] = 4294967296",
	"tcp[0] / 0 = 1", "len % 0 = 1", "tcp[0] << 40 = 0", "port 1000-2000", `proto \foo`, "net 10/8",
	"host 10.0.0.256", "(host 10.0.0.1) or 10.0.0.2", "tcp and 10.0.0.1", "tcp[0] = 1 and not (2)",
	"len-1 > 5", "ip[0:2:3]", "net 10 mask 255.0.0.0", "ip[0] = 1 ,", "tcp proto 6", "inbound", "ifname eth0",
	"net 2001:db8::1/32", "host 2001:db8::/32", "host (1.1.1.1 or tcp)", "()", "ip6 multicast 1",
}

// TestMatchesLibpcap compiles each expression with libpcap (through
// tcpdump) and with Compile and runs both programs over the corpus.
//
// The reference is libpcap's program as generated, before its optimizer:
// tests run in the order written and a read past the end of the packet
// rejects it. The optimizer keeps the verdicts of whole packets but not of
// all cut-short ones: in "host a or b" it compares the source with both a
// and b before it reads the destination, so a packet cut inside the
// destination can match. Where the optimized program disagrees with
// libpcap's own unoptimized one, only the unoptimized verdict is required.
func TestMatchesLibpcap(t *testing.T) {
	tcpdump := testenv.Tool(t, "tcpdump")
	pcap := rawPcap(t)
	packets := corpus()
	compared, optimizerChanged := 0, 0
	check := func(t *testing.T, ours, reference string) {
		want, err := libpcapVerdicts(tcpdump, pcap, reference, false, packets)
		if err != nil {
			t.Fatalf("libpcap: %v", err)
		}
		optimized, err := libpcapVerdicts(tcpdump, pcap, reference, true, packets)
		if err != nil {
			t.Fatalf("libpcap: %v", err)
		}
		prog, err := Compile(ours)
		if err != nil {
			t.Fatalf("Compile: %v", err)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			t.Fatalf("NewVM: %v", err)
		}
		wrong := 0
		for i, p := range packets {
			n, err := vm.Run(p)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if optimized[i] != want[i] {
				optimizerChanged++
			}
			if (n != 0) != want[i] {
				if wrong++; wrong <= 5 {
					t.Errorf("packet %d (% x): libpcap %v, Compile %v", i, p[:min(len(p), 64)], want[i], n != 0)
				}
			}
		}
		if wrong > 0 {
			t.Errorf("%d of %d packets differ; program:\n%s", wrong, len(packets), listing(prog))
		}
		compared += len(packets)
	}
	for _, expr := range sameAsLibpcap {
		t.Run(expr, func(t *testing.T) { check(t, expr, expr) })
	}
	for _, eq := range libpcapEquivalents {
		t.Run(eq.ours, func(t *testing.T) { check(t, eq.ours, eq.libpcap) })
	}
	for _, expr := range rejectedByLibpcap {
		t.Run(expr, func(t *testing.T) {
			if exec.Command(tcpdump, "-ddd", "-r", pcap, "--", expr).Run() == nil {
				t.Fatal("libpcap accepts it")
			}
			if _, err := Compile(expr); err == nil {
				t.Fatal("Compile accepts it")
			}
		})
	}
	t.Logf("%d expressions × %d packets: %d verdicts compared; libpcap's optimizer changed %d of its own",
		len(sameAsLibpcap)+len(libpcapEquivalents), len(packets), compared, optimizerChanged)
	t.Logf("%d expressions rejected by both", len(rejectedByLibpcap))
}

// rawPcap writes a pcap file with no packets whose link type is
// LINKTYPE_RAW, for tcpdump to compile filters against.
func rawPcap(t *testing.T) string {
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 101)
	path := filepath.Join(t.TempDir(), "raw.pcap")
	if err := os.WriteFile(path, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// errRejectsAll is libpcap's refusal of a filter that matches nothing,
// which is a verdict, not an error.
const errRejectsAll = "expression rejects all packets"

// libpcapVerdicts compiles expr with tcpdump, optimized or not, and runs
// it over packets.
func libpcapVerdicts(tcpdump, pcap, expr string, optimize bool, packets [][]byte) ([]bool, error) {
	args := []string{"-ddd", "-r", pcap}
	if !optimize {
		args = append(args, "-O")
	}
	cmd := exec.Command(tcpdump, append(args, "--", expr)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), errRejectsAll) {
			return make([]bool, len(packets)), nil
		}
		return nil, errors.New(strings.TrimSpace(stderr.String()))
	}
	var prog []bpf.Instruction
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		var v [4]uint64
		for i, f := range strings.Fields(line) {
			if v[i], err = strconv.ParseUint(f, 10, 32); err != nil {
				return nil, err
			}
		}
		ins := bpf.RawInstruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])}.Disassemble()
		if _, ok := ins.(bpf.NegateA); ok { // the VM lacks it
			ins = bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: 0xffffffff}
		}
		prog = append(prog, ins)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		return nil, err
	}
	verdicts := make([]bool, len(packets))
	for i, p := range packets {
		n, err := vm.Run(p)
		if err != nil {
			return nil, err
		}
		verdicts[i] = n != 0
	}
	return verdicts, nil
}

func listing(prog []bpf.Instruction) string {
	var b strings.Builder
	for i, ins := range prog {
		fmt.Fprintf(&b, "%d\t%v\n", i, ins)
	}
	return b.String()
}
