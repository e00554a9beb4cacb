package pcap

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/skbtrace/skbtrace/internal/capture"
)

// accounted checks that every frame of a capture is counted exactly once:
// skipped as malformed, without TCP or UDP, filtered out, in a flow, or a
// fragment no flow took.
func accounted(t *testing.T, a *Analyzer, r *Report) {
	t.Helper()
	sum := r.Capture.Malformed + r.Capture.NonIP + r.Capture.Filtered + r.Capture.FragOrphans
	for _, f := range r.Flows {
		sum += f.Packets
	}
	if sum != a.Frames {
		t.Fatalf("%d frames, %d accounted for: %+v", a.Frames, sum, r.Capture)
	}
}

// datagramTruth reads a capture with gopacket, not the decoder under
// test, and sums what one TCP direction carried: the payload of its whole
// segments, a fragmented one's from all its fragments; it counts the
// fragments and the flow's datagrams that came fragmented, whole or not.
type datagramTruth struct {
	frames, fragments, datagrams, whole, df uint64
	payload                                 uint64
}

func fixtureTruth(t *testing.T, name string, src, dst netip.AddrPort) datagramTruth {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(zr)
	if err != nil {
		t.Fatal(err)
	}
	type frags struct {
		flow          bool // the first fragment is the flow's
		df            bool
		tcpHdr, bytes int
		end           int // the last fragment's end, 0 before it
	}
	byID := map[uint16]*frags{}
	var truth datagramTruth
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		truth.frames++
		var ip layers.IPv4
		if binary.BigEndian.Uint16(data[12:]) != 0x0800 || ip.DecodeFromBytes(data[14:], gopacket.NilDecodeFeedback) != nil || ip.Protocol != layers.IPProtocolTCP {
			continue
		}
		ipPayload := int(ip.Length) - int(ip.IHL)*4
		var tcp layers.TCP
		first := ip.FragOffset == 0 && tcp.DecodeFromBytes(ip.Payload, gopacket.NilDecodeFeedback) == nil
		ours := first && ip.SrcIP.Equal(net.IP(src.Addr().AsSlice())) && ip.DstIP.Equal(net.IP(dst.Addr().AsSlice())) &&
			uint16(tcp.SrcPort) == src.Port() && uint16(tcp.DstPort) == dst.Port()
		if ip.Flags&layers.IPv4MoreFragments == 0 && ip.FragOffset == 0 {
			if ours {
				truth.payload += uint64(ipPayload - int(tcp.DataOffset)*4)
			}
			continue
		}
		truth.fragments++
		g := byID[ip.Id]
		if g == nil {
			g = &frags{}
			byID[ip.Id] = g
		}
		g.bytes += ipPayload
		if ip.FragOffset == 0 {
			g.flow, g.df, g.tcpHdr = ours, ip.Flags&layers.IPv4DontFragment != 0, int(tcp.DataOffset)*4
		}
		if ip.Flags&layers.IPv4MoreFragments == 0 {
			g.end = int(ip.FragOffset)*8 + ipPayload
		}
	}
	for _, g := range byID {
		if !g.flow {
			continue
		}
		truth.datagrams++
		if g.df {
			truth.df++
		}
		if g.end > 0 && g.bytes == g.end {
			truth.whole++
			truth.payload += uint64(g.bytes - g.tcpHdr)
		}
	}
	return truth
}

// The e1000e fixture: the first 400 frames of a receiver's capture where
// QEMU 7.2's e1000e sent each TSO packet as IP fragments (tcpdump -r
// e1000e-hub-rcv.pcap -c 400). Its last datagram is cut off by the -c.
func TestFragmentedSegmentsCountWhole(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.200.0.1:57864"), netip.MustParseAddrPort("10.200.0.2:5201")
	truth := fixtureTruth(t, "e1000e-fragments-receiver.pcap.gz", src, dst)
	t.Logf("gopacket: %d frames, %d fragments; the flow's %d fragmented datagrams, %d whole; %d bytes of payload",
		truth.frames, truth.fragments, truth.datagrams, truth.whole, truth.payload)
	a, r := analyzeFile(t, "e1000e-fragments-receiver.pcap.gz", Options{})
	accounted(t, a, r)
	c := r.Capture
	if c.Frames != truth.frames || c.Fragments != truth.fragments || c.Truncated != 0 || c.NonIP != 4 || c.FragOrphans != 0 {
		t.Fatalf("capture %+v, want %d frames, %d fragments", c, truth.frames, truth.fragments)
	}
	f := busiest(t, r)
	if f.Src != src.String() || f.PayloadBytes != truth.payload {
		t.Fatalf("%s: %d payload bytes, the segments and whole datagrams carry %d", f.Src, f.PayloadBytes, truth.payload)
	}
	fr := f.Fragments
	if fr == nil || fr.Datagrams != truth.datagrams || fr.Incomplete+fr.CutAtEnd != truth.datagrams-truth.whole || fr.CutAtEnd != 1 || fr.Incomplete != 0 || fr.DF != truth.df ||
		fr.MaxPayload <= 1460 || fr.SegmentLimit != 1460 || !fr.MSSFromSYN || f.OverMTU != nil || f.TCP.Retransmissions != 0 {
		t.Fatalf("fragments %+v (want %d datagrams, %d whole), over MTU %+v, tcp %+v", fr, truth.datagrams, truth.whole, f.OverMTU, f.TCP)
	}
	if r.Findings[0].ID != "ip-fragmented" {
		t.Fatalf("findings %v", ids(r))
	}
	ev := strings.Join(r.Findings[0].Evidence, "\n")
	for _, want := range []string{
		fmt.Sprintf("%d of %d data segments (%.0f %%) came as IP fragments, %.1f fragments per datagram", fr.Datagrams, f.DataPackets+fr.Incomplete+fr.CutAtEnd, fr.Share*100, fr.PerDatagram),
		fmt.Sprintf("DF set on all %d first fragments", fr.DF),
		fmt.Sprintf("at most %d: %.1f times the MSS of 1460 the receiver announced", fr.MaxPayload, fr.AvgPayload/1460),
		"1 datagram cut by the capture's end",
	} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if !strings.Contains(strings.Join(r.Findings[0].Remedy, "\n"), "ethtool -K DEV tso off") {
		t.Errorf("remedy %q", r.Findings[0].Remedy)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), fmt.Sprintf("%d IP fragments of %d datagrams, 4 without TCP or UDP", c.Fragments, c.FragDatagrams)) ||
		strings.Contains(text.String(), "cut by the snaplen inside a header") {
		t.Errorf("text report:\n%s", text.String())
	}
}

// The same wire with virtio-net (no fragments: the receiver's GRO merges
// the segments) reads as before fragments were analyzed.
func TestVirtioReceiverHasNoFragments(t *testing.T) {
	a, r := analyzeFile(t, "virtio-receiver.pcap.gz", Options{})
	accounted(t, a, r)
	f := busiest(t, r)
	if r.Capture.Fragments != 0 || f.Fragments != nil || len(r.Findings) != 0 || r.Capture.NonIP != 2 ||
		f.OverMTU == nil || !strings.HasPrefix(f.OverMTU.MadeBy, "receiver GRO") {
		t.Fatalf("capture %+v, findings %v, flow %+v", r.Capture, ids(r), f)
	}
}

// fragments cuts an IP packet (its IP header first) into fragments of at
// most size bytes of payload, IPv4 or IPv6, each behind an Ethernet header.
func fragments(t testing.TB, pkt []byte, size int) [][]byte {
	t.Helper()
	v6 := pkt[0]>>4 == 6
	hdr := 20
	if v6 {
		hdr = 40
	}
	et := layers.EthernetTypeIPv4
	if v6 {
		et = layers.EthernetTypeIPv6
	}
	ethHdr := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, byte(et >> 8), byte(et)}
	payload := pkt[hdr:]
	var out [][]byte
	for off := 0; off < len(payload); off += size {
		end := min(off+size, len(payload))
		more := end < len(payload)
		h := append([]byte(nil), pkt[:hdr]...)
		if v6 {
			fh := make([]byte, 8)
			fh[0], h[6] = h[6], 44
			fo := uint16(off)
			if more {
				fo |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], fo)
			binary.BigEndian.PutUint32(fh[4:], 0x1234567)
			binary.BigEndian.PutUint16(h[4:], uint16(8+end-off))
			h = append(h, fh...)
		} else {
			fo := uint16(off / 8)
			if more {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(h[6:], fo)
			binary.BigEndian.PutUint16(h[2:], uint16(hdr+end-off))
		}
		out = append(out, append(append(append([]byte(nil), ethHdr...), h...), payload[off:end]...))
	}
	return out
}

// ipPacket serializes an IP packet with a TCP or UDP header and payload.
func ipPacket(t testing.TB, v6, udp bool, payload int) []byte {
	t.Helper()
	var ip gopacket.NetworkLayer
	proto := layers.IPProtocolTCP
	if udp {
		proto = layers.IPProtocolUDP
	}
	if v6 {
		ip = &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
	} else {
		ip = &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 4321, Protocol: proto, SrcIP: net.ParseIP("10.0.0.1").To4(), DstIP: net.ParseIP("10.0.0.2").To4()}
	}
	var l4 gopacket.SerializableLayer = &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 1000, ACK: true, Window: 100}
	if udp {
		l4 = &layers.UDP{SrcPort: 1, DstPort: 2}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, ip.(gopacket.SerializableLayer), l4, gopacket.Payload(make([]byte, payload))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Fragments arriving before their first one are counted into its flow
// when it comes; those whose first never comes are in no flow; a filtered
// flow's fragments are filtered out.
func TestFragmentsInAnyOrder(t *testing.T) {
	for _, c := range []struct {
		name    string
		v6, udp bool
		order   []int
	}{
		{"IPv4 TCP, in order", false, false, []int{0, 1, 2, 3}},
		{"IPv4 TCP, last first", false, false, []int{3, 2, 1, 0}},
		{"IPv6 TCP, first last", true, false, []int{1, 3, 2, 0}},
		{"IPv4 UDP, first in the middle", false, true, []int{2, 0, 3, 1}},
	} {
		a := New(Options{})
		pkt := ipPacket(t, c.v6, c.udp, 4000)
		fr := fragments(t, pkt, 1232)
		orphan := fragments(t, ipPacket(t, c.v6, c.udp, 3000), 1232)
		for _, d := range orphan[1:] { // another datagram, without its first fragment
			if c.v6 {
				binary.BigEndian.PutUint32(d[14+40+4:], 999)
			} else {
				binary.BigEndian.PutUint16(d[14+4:], 999)
			}
		}
		var n uint64
		for _, i := range c.order {
			n++
			a.Add(capture.Frame{Number: n, TimeNs: 1e18 + int64(n)*1000, LinkType: 1, WireLen: len(fr[i]), Data: fr[i]})
		}
		for _, d := range orphan[1:] {
			n++
			a.Add(capture.Frame{Number: n, TimeNs: 1e18 + int64(n)*1000, LinkType: 1, WireLen: len(d), Data: d})
		}
		r := a.Report("synthetic", "pcap", nil)
		accounted(t, a, r)
		f := busiest(t, r)
		if f.Packets != 4 || f.DataPackets != 1 || f.PayloadBytes != 4000 || f.Fragments == nil || f.Fragments.PerDatagram != 4 ||
			f.Fragments.Incomplete != 0 || r.Capture.FragOrphans != uint64(len(orphan)-1) || r.Capture.FragOrphanDatagrams != 1 ||
			r.Capture.NonIP != 0 || r.Capture.Truncated != 0 || math.Abs(f.Seconds-3e-6) > 1e-9 {
			t.Errorf("%s: flow %+v fragments %+v, capture %+v", c.name, f, f.Fragments, r.Capture)
		}
		flt, err := ParseFilter(":9")
		if err != nil {
			t.Fatal(err)
		}
		a = New(Options{Flow: flt})
		for _, i := range c.order {
			a.Add(capture.Frame{Number: 1, TimeNs: 1e18, LinkType: 1, WireLen: len(fr[i]), Data: fr[i]})
		}
		if r := a.Report("synthetic", "pcap", nil); a.Filtered != 4 || len(r.Flows) != 0 || r.Capture.FragOrphans != 0 {
			t.Errorf("%s, filtered: %d filtered, capture %+v", c.name, a.Filtered, r.Capture)
		}
	}
}

// Datagrams that never complete give way to new ones: the table of open
// datagrams stays bounded, and their fragments are all counted.
func TestOpenDatagramsStayBounded(t *testing.T) {
	a := New(Options{})
	pkt := ipPacket(t, false, false, 3000)
	for id := range 1000 {
		// A first fragment, or a later one that no first will claim.
		d := fragments(t, pkt, 1480)[id%2]
		binary.BigEndian.PutUint16(d[14+4:], uint16(id))
		a.Add(capture.Frame{Number: uint64(id + 1), TimeNs: 1e18 + int64(id), LinkType: 1, WireLen: len(d), Data: d})
		if len(a.frags) > maxOpenDatagrams {
			t.Fatalf("%d datagrams open", len(a.frags))
		}
	}
	r := a.Report("synthetic", "pcap", nil)
	accounted(t, a, r)
	f := r.Flows[0]
	if f.Fragments.Datagrams != 500 || f.Fragments.Incomplete+f.Fragments.Unterminated != 500 || f.DataPackets != 0 || f.Packets != 500 ||
		r.Capture.FragOrphans != 500 || r.Capture.FragOrphanDatagrams != 500 || r.Capture.FragDatagrams != 1000 {
		t.Fatalf("fragments %+v, capture %+v", f.Fragments, r.Capture)
	}
}

// Fragments cost no allocation per frame either.
func TestRunDoesNotAllocatePerFragment(t *testing.T) {
	var frames [][]byte
	pkt := ipPacket(t, false, false, 64000)
	for id := range 500 {
		for _, fr := range fragments(t, pkt, 1448) {
			binary.BigEndian.PutUint16(fr[14+4:], uint16(id))
			frames = append(frames, fr[:min(128, len(fr))])
		}
	}
	if allocs := analyzeAllocs(t, frames); allocs > 200 {
		t.Fatalf("%.0f allocations to analyze %d fragments", allocs, len(frames))
	}
}

// A tunnel whose outer packets were fragmented (VXLAN over a smaller
// underlay MTU): the datagram is the outer one, the flow the inner one,
// whose length the inner header gives whole.
func TestFragmentedTunnelPacketsGoToTheInnerFlow(t *testing.T) {
	a := New(Options{})
	for i := range 20 {
		inner := ipPacket(t, false, false, 1400)
		binary.BigEndian.PutUint32(inner[20+4:], uint32(1000+i*1400)) // TCP sequence
		outer := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: uint16(100 + i), Protocol: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("10.200.0.1").To4(), DstIP: net.ParseIP("10.200.0.2").To4()}
		innerEth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 3}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 4}, EthernetType: layers.EthernetTypeIPv4}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, outer, &layers.UDP{SrcPort: 33333, DstPort: 4789},
			&layers.VXLAN{ValidIDFlag: true, VNI: 42}, innerEth, gopacket.Payload(inner)); err != nil {
			t.Fatal(err)
		}
		for j, d := range fragments(t, buf.Bytes(), 1232) {
			n := uint64(2*i + j + 1)
			a.Add(capture.Frame{Number: n, TimeNs: 1e18 + int64(n)*1000, LinkType: 1, WireLen: len(d), Data: d})
		}
	}
	r := a.Report("synthetic", "pcap", nil)
	accounted(t, a, r)
	f := busiest(t, r)
	if f.Encap != "vxlan" || f.Src != "10.0.0.1:1" || f.Packets != 40 || f.DataPackets != 20 || f.PayloadBytes != 20*1400 ||
		f.Fragments == nil || f.Fragments.Datagrams != 20 || f.Fragments.PerDatagram != 2 || len(r.Tunnels) != 0 {
		t.Fatalf("flow %+v, fragments %+v, tunnels %+v", f, f.Fragments, r.Tunnels)
	}
	if got := ids(r); len(got) != 1 || got[0] != "ip-fragmented" || !strings.Contains(strings.Join(r.Findings[0].Remedy, " "), "tunnel") {
		t.Fatalf("findings %v %+v", got, r.Findings)
	}
}

// A datagram missing a fragment mid-capture is incomplete; one whose
// fragments run on from its start without an end never ended; one still
// coming in when the capture ends, after the last whole one, was cut by the end.
func TestDatagramsCutByTheCapturesEndAreNotIncomplete(t *testing.T) {
	a := New(Options{})
	pkt := ipPacket(t, false, false, 3000)
	n := uint64(0)
	add := func(id uint16, parts ...int) {
		for _, k := range parts {
			d := fragments(t, pkt, 1480)[k]
			binary.BigEndian.PutUint16(d[14+4:], id)
			n++
			a.Add(capture.Frame{Number: n, TimeNs: 1e18 + int64(n)*1000, LinkType: 1, WireLen: len(d), Data: d})
		}
	}
	parts := len(fragments(t, pkt, 1480))
	if parts < 3 {
		t.Fatalf("%d fragments: the test wants a middle one", parts)
	}
	add(1, 0, parts-1) // a middle fragment lost
	add(4, 0, 1)       // its last fragments lost, or never sent
	for k := range parts {
		add(2, k) // whole
	}
	add(3, 0) // the capture ends before its second
	r := a.Report("synthetic", "pcap", nil)
	accounted(t, a, r)
	fr := r.Flows[0].Fragments
	if fr == nil || fr.Datagrams != 4 || fr.Incomplete != 1 || fr.Unterminated != 1 || fr.CutAtEnd != 1 {
		t.Fatalf("fragments %+v: want 4 datagrams, 1 incomplete, 1 never ended, 1 cut by the end", fr)
	}
}
