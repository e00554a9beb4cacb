package probe

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/net/bpf"

	"github.com/skbtrace/skbtrace/internal/testenv"
)

// libpcapProgram compiles expr with tcpdump for packets that start at their
// IP header (LINKTYPE_RAW), as the reference the translation must agree with.
func libpcapProgram(t *testing.T, expr string) []bpf.Instruction {
	t.Helper()
	tcpdump := testenv.Tool(t, "tcpdump")
	raw := filepath.Join(t.TempDir(), "raw.pcap")
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(hdr[4:], 2)
	binary.LittleEndian.PutUint16(hdr[6:], 4)
	binary.LittleEndian.PutUint32(hdr[16:], 65535)
	binary.LittleEndian.PutUint32(hdr[20:], 101) // LINKTYPE_RAW
	if err := os.WriteFile(raw, hdr, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tcpdump, "-ddd", "-r", raw, expr).Output()
	if err != nil {
		t.Fatalf("tcpdump -ddd %q: %v", expr, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var prog []bpf.Instruction
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		var v [4]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i], 10, 32); err != nil {
				t.Fatalf("tcpdump -ddd line %q: %v", l, err)
			}
		}
		prog = append(prog, bpf.RawInstruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])}.Disassemble())
	}
	return prog
}

// filterHarness loads an XDP program that hands the test packet to the
// translated filter as the kernel hooks do: a kernel address (taken from
// the packet pointer by a probe read, which makes it a plain number),
// the bytes readable there and the length. XDP's test run wants at least
// an Ethernet header's worth of data: the packet follows 14 bytes of padding.
func filterHarness(t *testing.T, body asm.Instructions) *ebpf.Program {
	t.Helper()
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // xdp_md.data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // xdp_md.data_end
		asm.Add.Imm(asm.R2, ethPadding),
		asm.Mov.Reg(asm.R6, asm.R3),
		asm.Sub.Reg(asm.R6, asm.R2),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -16),
		asm.Mov.Imm(asm.R2, 8),
		asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -8),
		asm.FnProbeReadKernel.Call(),
		asm.LoadMem(asm.R1, asm.RFP, -16, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R6),
		asm.Mov.Reg(asm.R3, asm.R6),
		asm.Call.Label(packetFilterStub),
		asm.Return(),
	}
	insns = append(insns, body[0].WithSymbol(packetFilterStub))
	insns = append(insns, body[1:]...)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("loading the filter harness: %+v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

const ethPadding = 14

func ipv4TCP(src, dst [4]byte, sport, dport uint16, flags byte, ihl int, fragOff uint16) []byte {
	p := make([]byte, ihl*4+20)
	p[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[6:], fragOff)
	p[8], p[9] = 64, 6
	copy(p[12:], src[:])
	copy(p[16:], dst[:])
	th := p[ihl*4:]
	binary.BigEndian.PutUint16(th[0:], sport)
	binary.BigEndian.PutUint16(th[2:], dport)
	th[12], th[13] = 5<<4, flags
	return p
}

func ipv6UDP(src, dst byte, sport, dport uint16, payload int) []byte {
	p := make([]byte, 40+8+payload)
	p[0] = 0x60
	binary.BigEndian.PutUint16(p[4:], uint16(8+payload))
	p[6], p[7] = 17, 64
	p[8], p[23] = 0xfd, src
	p[24], p[39] = 0xfd, dst
	binary.BigEndian.PutUint16(p[40:], sport)
	binary.BigEndian.PutUint16(p[42:], dport)
	return p
}

// The translation must give libpcap's verdicts on every packet: loads at
// constant and computed offsets, reads past the end, arithmetic, scratch
// memory and the packet length.
func TestPacketFilterTranslationAgreesWithLibpcap(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	exprs := []string{
		"tcp port 5201 and host 10.200.0.2",
		"tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn",
		"ip[6:2] & 0x1fff != 0",
		"src net 10.200.0.0/24 and dst portrange 5000-5300",
		"ip6 and udp dst port 53",
		"len > 60 or less 41",
		"tcp[(tcp[12] >> 4) * 4 - 1] = 0 and tcp",
		"ip[2:2] / 2 > 25 and ip[2:2] % 7 != 3",
		"not (tcp or udp)",
		"ip6[40:2] * 2 - 106 = 0",
	}
	a, b := [4]byte{10, 200, 0, 1}, [4]byte{10, 200, 0, 2}
	packets := [][]byte{
		ipv4TCP(a, b, 40000, 5201, 0x02, 5, 0),
		ipv4TCP(b, a, 5201, 40000, 0x12, 5, 0),
		ipv4TCP(a, b, 40000, 5201, 0x10, 8, 0),      // with options
		ipv4TCP(a, b, 40000, 5201, 0x10, 5, 0x0010), // a later fragment
		ipv4TCP(a, [4]byte{10, 9, 0, 1}, 40000, 22, 0x18, 5, 0),
		ipv6UDP(1, 2, 5353, 53, 0),
		ipv6UDP(1, 2, 53, 5353, 100),
		{0x00, 0x01, 0x08, 0x00},
	}
	full := len(packets)
	for _, p := range packets[:full-1] {
		for _, cut := range []int{1, 10, 20, 22, 33, len(p) - 1} {
			if cut < len(p) {
				packets = append(packets, p[:cut])
			}
		}
	}
	kept, left := 0, 0
	for _, expr := range exprs {
		ref := libpcapProgram(t, expr)
		vm, err := bpf.NewVM(ref)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		body, err := TranslatePacketFilter(ref)
		if err != nil {
			t.Fatalf("%q: %v", expr, err)
		}
		prog := filterHarness(t, body)
		for i, p := range packets {
			want, err := vm.Run(p)
			if err != nil {
				t.Fatalf("%q: reference VM: %v", expr, err)
			}
			got, err := prog.Run(&ebpf.RunOptions{Data: append(make([]byte, ethPadding), p...)})
			if err != nil {
				t.Fatalf("%q: running the translation: %v", expr, err)
			}
			if (want != 0) != (got != 0) {
				t.Errorf("%q on packet %d (% x): libpcap says %v, the translation %v", expr, i, p, want != 0, got != 0)
			}
			if want != 0 {
				kept++
			} else {
				left++
			}
		}
	}
	if kept < len(exprs) || left < len(exprs) {
		t.Fatalf("the packets do not exercise the filters: %d kept, %d left out", kept, left)
	}
}

func TestInjectReplacesOnlyTheStub(t *testing.T) {
	spec, err := LoadSkbtrace()
	if err != nil {
		t.Fatal(err)
	}
	body, err := TranslatePacketFilter([]bpf.Instruction{bpf.RetConstant{Val: 1}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for name, ps := range spec.Programs {
		out := injectPacketFilter(ps.Instructions, body)
		start := -1
		for i, ins := range ps.Instructions {
			if ins.Symbol() == packetFilterStub {
				start = i
			}
		}
		if start < 0 {
			if len(out) != len(ps.Instructions) {
				t.Fatalf("%s does not call the filter, yet changed", name)
			}
			continue
		}
		calls++
		if out[start].Symbol() != packetFilterStub {
			t.Fatalf("%s: the filter lost its symbol", name)
		}
		for i := range body {
			if out[start+i].OpCode != body[i].OpCode || out[start+i].Constant != body[i].Constant {
				t.Fatalf("%s: instruction %d of the filter is %v, want %v", name, i, out[start+i], body[i])
			}
		}
		for i := 0; i < start; i++ {
			if out[i].OpCode != ps.Instructions[i].OpCode {
				t.Fatalf("%s: instruction %d before the filter changed", name, i)
			}
		}
	}
	// dev_xmit, dev_recv, dev_recv_gro, qdisc_enqueue, qdisc_dequeue, qdisc_delay_enqueue, skb_drop
	if calls != 7 {
		t.Fatalf("%d programs call the packet filter, want the 7 per-packet ones", calls)
	}
}

func TestTranslateRejectsWhatTheKernelCannotRun(t *testing.T) {
	for _, prog := range [][]bpf.Instruction{
		nil,
		{bpf.ALUOpConstant{Op: bpf.ALUOpDiv, Val: 0}, bpf.RetA{}},
		{bpf.LoadExtension{Num: bpf.ExtProto}, bpf.RetA{}},
		{bpf.Jump{Skip: 5}, bpf.RetA{}},
		{bpf.LoadAbsolute{Off: 0, Size: 3}, bpf.RetA{}},
	} {
		if _, err := TranslatePacketFilter(prog); err == nil {
			t.Errorf("%v translated", prog)
		}
	}
}
