package pcap

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/skbtrace/skbtrace/internal/capture"
)

// analyzeFile runs the analyzer over a committed capture.
func analyzeFile(t *testing.T, name string, opts Options) (*Analyzer, *Report) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	a := New(opts)
	if err := a.Run(r); err != nil {
		t.Fatal(err)
	}
	return a, a.Report(name, r.Format, nil)
}

func busiest(t *testing.T, r *Report) *FlowReport {
	t.Helper()
	if len(r.Flows) == 0 || r.Flows[0].PayloadBytes == 0 {
		t.Fatalf("no data flow: %+v", r.Flows)
	}
	return &r.Flows[0]
}

func ids(r *Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.ID)
	}
	return out
}

// The fixtures were captured on the project's lab (test/e2e/pcap_test.go)
// with tcpdump -i any, whose Linux cooked header records each frame's direction.
func TestReceiverCaptureAttributesLargeFramesToGRO(t *testing.T) {
	_, r := analyzeFile(t, "gro-receiver.pcap.gz", Options{})
	f := busiest(t, r)
	if f.Location != LocationReceiver || f.OverMTU == nil || f.OverMTU.AvgSegments < 2 || !strings.HasPrefix(f.OverMTU.MadeBy, "receiver GRO") {
		t.Fatalf("location %q, over MTU %+v", f.Location, f.OverMTU)
	}
}

func TestSenderCaptureAttributesLargeFramesToTSO(t *testing.T) {
	_, r := analyzeFile(t, "tso-sender.pcap.gz", Options{})
	f := busiest(t, r)
	if f.Location != LocationSender || f.OverMTU == nil || !strings.HasPrefix(f.OverMTU.MadeBy, "sender TSO") {
		t.Fatalf("location %q, over MTU %+v", f.Location, f.OverMTU)
	}
	if f.TCP.MSS != 1460 || !f.TCP.SACK || f.TCP.WScale < 0 || f.TCP.RTT.Samples == 0 || f.TCP.RTT.P99Us < f.TCP.RTT.P50Us {
		t.Fatalf("tcp %+v", f.TCP)
	}
}

// A capture on the receiving veth of a 2 s, 300 Mbit/s iperf3 stream
// (tcpdump -i VETH -s 128, no direction recorded; both ends on one host,
// so the handshake's timing places it nowhere): the frames are the sender's
// GSO skbs, which veth carries whole, and every ACK ends at a frame's end,
// as a receiver's GRO would draw them too. It was "offload, at an unknown
// end (too few ACKs or no handshake)" with the handshake and 870 ACKs in
// the capture.
func TestVethCaptureOfWholeGSOFramesIsPlaced(t *testing.T) {
	_, r := analyzeFile(t, "veth-receiver-gso.pcap.gz", Options{})
	f := busiest(t, r)
	if f.Location != LocationBetween || !f.TCP.Handshake || f.OverMTU == nil || f.OverMTU.AvgSegments < 40 {
		t.Fatalf("location %q, handshake %v, over MTU %+v: not the fixture this test was written for", f.Location, f.TCP.Handshake, f.OverMTU)
	}
	if !strings.HasPrefix(f.OverMTU.MadeBy, "sender TSO/GSO carried whole (both ends on one host, as over veth or loopback) or receiver GRO/LRO") || !strings.HasSuffix(f.OverMTU.MadeBy, "; 0 of 870 ACKs fell inside a captured frame") {
		t.Errorf("made by %q", f.OverMTU.MadeBy)
	}
}

func TestJumpingOuterIPIDsAreGROBlockedAndTheInnerCaptureIsNot(t *testing.T) {
	_, r := analyzeFile(t, "vxlan-outer-jumping.pcap.gz", Options{})
	if len(r.Tunnels) == 0 || r.Tunnels[0].VNI != 42 || r.Tunnels[0].IPID.Share < 0.9 {
		t.Fatalf("tunnels %+v", r.Tunnels)
	}
	top := r.Findings[0]
	if top.ID != "gro-blocked" || !strings.Contains(top.Scope, "outer header") || !strings.Contains(top.Evidence[0], "GRO cannot merge") {
		t.Fatalf("findings %+v", r.Findings)
	}
	if f := busiest(t, r); f.Encap != "vxlan" || f.Proto != "tcp" {
		t.Fatalf("inner flow %+v", f)
	}
	_, inner := analyzeFile(t, "vxlan-inner.pcap.gz", Options{})
	for _, f := range inner.Findings {
		if f.ID == "gro-blocked" {
			t.Fatalf("the inner device's capture gave %+v", f)
		}
	}
}

func TestRetransmissionsMatchTheKernelCounterOfThatRun(t *testing.T) {
	b, err := os.ReadFile("testdata/loss-sender.kernel.json")
	if err != nil {
		t.Fatal(err)
	}
	var kernel struct {
		Delta float64 `json:"tcp_retrans_segs_delta"`
	}
	if err := json.Unmarshal(b, &kernel); err != nil {
		t.Fatal(err)
	}
	_, r := analyzeFile(t, "loss-sender.pcap.gz", Options{})
	f := busiest(t, r)
	if got := float64(f.TCP.RetransmittedSegs); math.Abs(got-kernel.Delta) > 0.05*kernel.Delta {
		t.Fatalf("%v retransmitted segments, the kernel counted %v", got, kernel.Delta)
	}
	if ids(r)[0] != "packet-loss" {
		t.Fatalf("findings %v", ids(r))
	}
}

func TestFilterKeepsMatchingFlows(t *testing.T) {
	flt, err := ParseFilter(":5301")
	if err != nil {
		t.Fatal(err)
	}
	a, r := analyzeFile(t, "tso-sender.pcap.gz", Options{Flow: flt})
	if len(r.Flows) != 2 || a.Filtered != 0 {
		t.Fatalf("%d flows, %d filtered", len(r.Flows), a.Filtered)
	}
	if flt, err = ParseFilter("10.9.9.9"); err != nil {
		t.Fatal(err)
	}
	a, r = analyzeFile(t, "tso-sender.pcap.gz", Options{Flow: flt})
	if len(r.Flows) != 0 || a.Filtered != a.Frames {
		t.Fatalf("%d flows, %d of %d filtered", len(r.Flows), a.Filtered, a.Frames)
	}
	for _, bad := range []string{"5301", ":x", "host", ":0", "10.0.0.1:0", ":70000", "[::1]:0"} {
		if _, err := ParseFilter(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// IPv6 loopback is written as users write it: ::1, [::1] and [::1]:5201.
func TestFilterTakesIPv6AsWritten(t *testing.T) {
	loop := netip.MustParseAddrPort("[::1]:5201")
	other := netip.MustParseAddrPort("[::1]:40000")
	mapped := netip.MustParseAddrPort("[::ffff:10.0.0.1]:5201")
	cases := []struct {
		filter string
		key    FlowKey
		match  bool
	}{
		{"::1", FlowKey{Src: other, Dst: loop}, true},
		{"[::1]", FlowKey{Src: other, Dst: loop}, true},
		{"[::1]:5201", FlowKey{Src: other, Dst: loop}, true},
		{"[::1]:5202", FlowKey{Src: other, Dst: loop}, false},
		{"0:0:0:0:0:0:0:1", FlowKey{Src: other, Dst: loop}, true},
		{"10.0.0.1:5201", FlowKey{Src: other, Dst: mapped}, true},
		{":5201", FlowKey{Src: other, Dst: mapped}, true},
		{"::2", FlowKey{Src: other, Dst: loop}, false},
	}
	for _, c := range cases {
		f, err := ParseFilter(c.filter)
		if err != nil {
			t.Errorf("%q: %v", c.filter, err)
			continue
		}
		if got := f.Match(c.key); got != c.match {
			t.Errorf("%q matches %v -> %v: %v, want %v", c.filter, c.key.Src, c.key.Dst, got, c.match)
		}
	}
}

func TestGraphsStayBoundedWhateverTheFlowLength(t *testing.T) {
	a := New(Options{Graphs: true})
	base := int64(1e18)
	var seq uint32 = 1000
	for i := 0; i < 300000; i++ {
		addTCP(t, a, base+int64(i)*int64(10*time.Microsecond), "10.0.0.1", "10.0.0.2", 1, 2, seq, 0, 1448, false, uint64(i+1))
		addTCP(t, a, base+int64(i)*int64(10*time.Microsecond)+500, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq+1448, 0, true, uint64(i+1))
		seq += 1448
	}
	g := a.Graphs(8)
	if len(g) != 1 || len(g[0].Points) > maxBins || len(g[0].Points) < maxBins/2 {
		t.Fatalf("%d graphs, %d points", len(g), len(g[0].Points))
	}
	if f := busiest(t, a.Report("synthetic", "pcap", nil)); f.TCP.Retransmissions != 0 || f.TCP.RTT.Samples == 0 {
		t.Fatalf("%+v", f.TCP)
	}
}

// addTCP feeds a synthetic Ethernet/IPv4/TCP frame.
func addTCP(t *testing.T, a *Analyzer, ts int64, src, dst string, sport, dport uint16, seq, ack, payload uint32, isAck bool, n uint64) {
	t.Helper()
	data := tcpFrame(t, src, dst, sport, dport, seq, ack, payload, isAck)
	a.Add(capture.Frame{Number: n, TimeNs: ts, LinkType: 1, WireLen: len(data), Data: data})
	if a.Malformed != nil {
		t.Fatalf("frame %d malformed: %v", n, a.MalformedFirst)
	}
}

func tcpFrame(t testing.TB, src, dst string, sport, dport uint16, seq, ack, payload uint32, isAck bool) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: seq, Ack: ack, ACK: isAck || ack != 0, Window: 65535}
	buf := gopacket.NewSerializeBuffer()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, tcp, gopacket.Payload(make([]byte, payload))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func udpFrame(t testing.TB, payload int) []byte {
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
		SrcIP: net.ParseIP("10.0.0.1").To4(), DstIP: net.ParseIP("10.0.0.2").To4()}
	buf := gopacket.NewSerializeBuffer()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, &layers.UDP{SrcPort: 9, DstPort: 5201}, gopacket.Payload(make([]byte, payload))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func findingIDs(a *Analyzer) []string { return ids(a.Report("synthetic", "pcap", nil)) }

func TestSmallDatagramsAreSmallPacketBound(t *testing.T) {
	for _, c := range []struct {
		size int
		want bool
	}{{64, true}, {1400, false}} {
		a := New(Options{})
		for i := 0; i < 50000; i++ {
			d := udpFrame(t, c.size)
			a.Add(capture.Frame{Number: uint64(i + 1), TimeNs: 1e18 + int64(i)*20000, LinkType: 1, Data: d})
		}
		got := strings.Join(findingIDs(a), ",")
		if strings.Contains(got, "small-packet-bound") != c.want {
			t.Errorf("%d-byte datagrams: findings %q", c.size, got)
		}
	}
}

// windowFlow is a sender that keeps filling a window of 10 segments; the
// receiver advertises zero for part of the time when zero is set.
func windowFlow(t *testing.T, zero bool) *Analyzer {
	a := New(Options{})
	var seq, n uint32 = 1000, 0
	ts := int64(1e18)
	for i := 0; i < 2000; i++ {
		for j := 0; j < 10; j++ {
			n++
			addTCP(t, a, ts, "10.0.0.1", "10.0.0.2", 1, 2, seq, 1, 1000, true, uint64(n))
			seq += 1000
			ts += 1000
		}
		n++
		win := uint16(10000)
		if zero && i%2 == 0 {
			win = 0
		}
		d := tcpFrame(t, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq, 0, true)
		binary.BigEndian.PutUint16(d[14+20+14:], win)
		a.Add(capture.Frame{Number: uint64(n), TimeNs: ts + 50000, LinkType: 1, Data: d})
		ts += 100000
	}
	return a
}

func TestAFullWindowIsRwndLimited(t *testing.T) {
	if got := strings.Join(findingIDs(windowFlow(t, true)), ","); !strings.Contains(got, "rwnd-limited") {
		t.Fatalf("findings %q", got)
	}
	a := New(Options{})
	var seq uint32 = 1000
	for i := 0; i < 2000; i++ { // one segment in flight at a time: far below the window
		addTCP(t, a, 1e18+int64(i)*100000, "10.0.0.1", "10.0.0.2", 1, 2, seq, 1, 1000, true, uint64(2*i+1))
		seq += 1000
		addTCP(t, a, 1e18+int64(i)*100000+50000, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq, 0, true, uint64(2*i+2))
	}
	if got := strings.Join(findingIDs(a), ","); strings.Contains(got, "rwnd-limited") {
		t.Fatalf("findings %q", got)
	}
}

func TestMTUMismatchFromTheHandshakeOrICMP(t *testing.T) {
	syn := func(a *Analyzer) {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.ParseIP("10.0.0.1").To4(), DstIP: net.ParseIP("10.0.0.2").To4()}
		tcp := &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 5, SYN: true, Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x22, 0xd8}}}}
		buf := gopacket.NewSerializeBuffer()
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, tcp); err != nil {
			t.Fatal(err)
		}
		a.Add(capture.Frame{Number: 1, TimeNs: 1e18, LinkType: 1, Data: buf.Bytes()})
	}
	a := New(Options{MTU: 1500})
	syn(a) // MSS 8920
	if got := findingIDs(a); len(got) == 0 || got[0] != "mtu-mismatch" {
		t.Fatalf("findings %v", got)
	}
	a = New(Options{})
	syn(a)
	if got := findingIDs(a); len(got) != 0 {
		t.Fatalf("without --mtu: findings %v", got)
	}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4), Seq: 1400}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: net.ParseIP("10.0.0.9").To4(), DstIP: net.ParseIP("10.0.0.1").To4()}
	buf := gopacket.NewSerializeBuffer()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, icmp, gopacket.Payload(make([]byte, 28))); err != nil {
		t.Fatal(err)
	}
	a.Add(capture.Frame{Number: 2, TimeNs: 1e18 + 1, LinkType: 1, Data: buf.Bytes()})
	rep := a.Report("icmp", "pcap", nil)
	if len(rep.Findings) != 1 || rep.Findings[0].ID != "mtu-mismatch" || !strings.Contains(rep.Findings[0].Title, "1400") {
		t.Fatalf("findings %+v", rep.Findings)
	}
}

// Run allocates per capture (the read buffer, the batches handed between
// its goroutines, the flows), never per frame.
func TestRunDoesNotAllocatePerFrame(t *testing.T) {
	var frames [][]byte
	var seq uint32 = 1000
	for range 20000 {
		frames = append(frames, tcpFrame(t, "10.0.0.1", "10.0.0.2", 1, 2, seq, 1, 1448, true)[:128])
		seq += 1448
	}
	if allocs := analyzeAllocs(t, frames); allocs > 200 {
		t.Fatalf("%.0f allocations to analyze %d frames", allocs, len(frames))
	}
}

// analyzeAllocs is the allocations of one analysis of a capture of frames.
func analyzeAllocs(t *testing.T, frames [][]byte) float64 {
	t.Helper()
	data := pcapOf(binary.LittleEndian, false, 1, frames...)
	return testing.AllocsPerRun(3, func() {
		r, err := capture.Open(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := New(Options{}).Run(r); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkAnalyze reads and analyzes an in-memory capture of bulk TCP
// frames cut at 128 bytes, as tcpdump -s 128 writes them.
func BenchmarkAnalyze(b *testing.B) {
	var frames [][]byte
	var seq uint32 = 1000
	for i := 0; i < 100000; i++ {
		frames = append(frames, tcpFrame(b, "10.0.0.1", "10.0.0.2", 1, 2, seq, 1, 1448, true)[:128])
		seq += 1448
		if i%2 == 1 {
			frames = append(frames, tcpFrame(b, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq, 0, true))
		}
	}
	data := pcapOf(binary.LittleEndian, false, 1, frames...)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := capture.Open(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		a := New(Options{})
		if err := a.Run(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(frames))/b.Elapsed().Seconds(), "packets/s")
}

// A BIG TCP sender's capture (bigtcp-ipv4, made by the e2e test): frames
// above 64 KB with an IPv4 total length of 0, sized from the frame and
// attributed to the sender's GSO, with nothing malformed.
func TestBigTCPFramesAreSizedFromTheFrame(t *testing.T) {
	a, r := analyzeFile(t, "bigtcp-ipv4.pcap.gz", Options{})
	f := busiest(t, r)
	var above uint64
	for _, s := range f.Sizes {
		if s.UpTo > 65535 {
			above += s.Packets
		}
	}
	if a.Malformed != nil || above < 100 || f.OverMTU == nil || !strings.HasPrefix(f.OverMTU.MadeBy, "sender TSO") || f.OverMTU.AvgSegments < 45 {
		t.Fatalf("malformed %v, %d frames above 64 KB, above the MTU %+v", a.Malformed, above, f.OverMTU)
	}
}

// Every capture finding says how sure it is and what confirms it, as the
// doctor's do (docs/findings.md).
func TestEveryCaptureFindingHasConfidenceAndConfirm(t *testing.T) {
	ids := &IPIDReport{Pairs: 200, Unmergeable: 180, Share: 0.9}
	r := &Report{
		Tunnels: []TunnelReport{{Src: "192.168.0.1", Dst: "192.168.0.2", VNI: 42, IPID: *ids}},
		Flows: []FlowReport{{Proto: "tcp", Src: "10.0.0.1:40000", Dst: "10.0.0.2:5201",
			DataPackets: 1000, PayloadBytes: 100 * 1000, Seconds: 0.01, IPID: ids,
			TCP:       &TCPReport{Retransmissions: 50, RetransmittedSegs: 50, WindowLimitedShare: 0.5, MSS: 8960},
			Fragments: &FragReport{Datagrams: 100, Share: 0.5, PerDatagram: 2, MaxPerDatagram: 2}}},
	}
	a := New(Options{MTU: 1500})
	a.ICMPTooBig, a.ICMPMTU = 1, 1400
	seen := map[string]bool{}
	for _, f := range a.findings(r) {
		seen[f.ID] = true
		if f.Confidence == "" || len(f.Confirm) == 0 || f.Confirm[0] == "" {
			t.Errorf("%s (%s): confidence %q, confirm %q", f.ID, f.Title, f.Confidence, f.Confirm)
		}
	}
	for _, id := range []string{"gro-blocked", "packet-loss", "rwnd-limited", "ip-fragmented", "small-packet-bound", "mtu-mismatch"} {
		if !seen[id] {
			t.Errorf("the report made no %s finding: the test covers less than it says", id)
		}
	}
}

// A short flow is drawn, from its first packet: slow start is in the graph.
func TestGraphsDrawShortFlowsFromTheirFirstPacket(t *testing.T) {
	a := New(Options{Graphs: true})
	base := int64(1e18)
	// Another flow first, so the short one starts later in the capture.
	addTCP(t, a, base, "10.0.0.9", "10.0.0.2", 9, 2, 1, 0, 100, false, 1)
	var seq uint32 = 1000
	for i := range 10 {
		ts := base + int64(time.Second) + int64(i)*int64(time.Millisecond)
		addTCP(t, a, ts, "10.0.0.1", "10.0.0.2", 1, 2, seq, 0, 1448, false, uint64(2*i+2))
		addTCP(t, a, ts+500, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq+1448, 0, true, uint64(2*i+3))
		seq += 1448
	}
	var short *FlowGraph
	graphs := a.Graphs(8)
	for i := range graphs {
		if strings.HasPrefix(graphs[i].Title, "10.0.0.1:1 -> ") {
			short = &graphs[i]
		}
	}
	if short == nil {
		t.Fatalf("the 14 KB flow is not drawn: %d graphs", len(graphs))
	}
	if p := short.Points[0]; !p.HasData || p.T < 0.999 || p.T > 1.001 || p.SeqMin != 0 {
		t.Errorf("the graph does not start at the flow's first packet (1 s, sequence 0): %+v", p)
	}
}

// Past maxSeries, a flow that outgrows the smallest graphed one takes its
// place and says from when it is drawn.
func TestGraphsKeepTheBusiestFlowsWithinTheirBound(t *testing.T) {
	a := New(Options{Graphs: true})
	base := int64(1e18)
	n := uint64(1)
	for i := range maxSeries {
		addTCP(t, a, base+int64(i), "10.0.1.1", "10.0.0.2", uint16(1000+i), 2, 1, 0, 100, false, n)
		n++
	}
	// Three small packets stay below twice the smallest (100 bytes); the
	// fourth passes it.
	var seq uint32 = 1
	for i := range 20 {
		size := uint32(1448)
		if i < 3 {
			size = 50
		}
		addTCP(t, a, base+int64(time.Second)+int64(i)*int64(time.Millisecond), "10.0.0.1", "10.0.0.2", 1, 2, seq, 0, size, false, n)
		n++
		seq += size
	}
	graphs := a.Graphs(1)
	if len(graphs) != 1 || !strings.HasPrefix(graphs[0].Title, "10.0.0.1:1 -> ") || !strings.Contains(graphs[0].Title, "drawn from 1.003 s") {
		t.Fatalf("the busiest flow, 65th to start, is not drawn from when it took a place: %+v", graphs)
	}
	if len(a.graphed) != maxSeries {
		t.Errorf("%d series, want at most %d", len(a.graphed), maxSeries)
	}
}

// Data the receiver acknowledged that the capture never held is missed
// data, as tcptrace reports it: a segment inside the flow and its last one,
// dropped by the capture; the FIN's sequence number is no data.
func TestMissedDataIsWhatWasAcknowledgedButNeverCaptured(t *testing.T) {
	a := New(Options{})
	base := int64(1e18)
	frame := func(n uint64, src, dst string, sport, dport uint16, seq, ack, payload uint32, fin bool) {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
			SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
		tcp := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: seq, Ack: ack, ACK: true, FIN: fin, Window: 65535}
		buf := gopacket.NewSerializeBuffer()
		eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, tcp, gopacket.Payload(make([]byte, payload))); err != nil {
			t.Fatal(err)
		}
		a.Add(capture.Frame{Number: n, TimeNs: base + int64(n)*int64(time.Millisecond), LinkType: 1, WireLen: len(buf.Bytes()), Data: buf.Bytes()})
	}
	n := uint64(1)
	for i := range uint32(10) {
		seq := 1000 + i*1000
		if i != 3 && i != 9 { // what the capture dropped
			frame(n, "10.0.0.1", "10.0.0.2", 1, 2, seq, 1, 1000, false)
		}
		frame(n+1, "10.0.0.2", "10.0.0.1", 2, 1, 1, seq+1000, 0, false)
		n += 2
	}
	frame(n, "10.0.0.1", "10.0.0.2", 1, 2, 11000, 1, 0, true)
	frame(n+1, "10.0.0.2", "10.0.0.1", 2, 1, 1, 11001, 0, false)
	r := a.Report("drops", "pcap", nil)
	f := busiest(t, r)
	if f.TCP.MissedBytes != 2000 || f.PayloadBytes != 8000 || f.TCP.Retransmissions != 0 {
		t.Errorf("missed %d bytes of %d captured, %d retransmissions; want 2000 missed of 8000, none resent", f.TCP.MissedBytes, f.PayloadBytes, f.TCP.Retransmissions)
	}
	if len(r.Notes) == 0 || !strings.Contains(strings.Join(r.Notes, " "), "missed data") {
		t.Errorf("the report does not say the capture missed data: %q", r.Notes)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "missed 2.0 KiB (acknowledged, never captured)") {
		t.Errorf("the flow's line does not say what it missed:\n%s", text.String())
	}
	if !strings.Contains(text.String(), "2.0 KiB that 1 TCP flow direction had acknowledged") {
		t.Errorf("the note does not count the one flow direction in the singular:\n%s", text.String())
	}
}
