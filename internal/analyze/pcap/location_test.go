package pcap

import (
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/skbtrace/skbtrace/internal/capture"
)

// handshakeFrame is a SYN, SYN-ACK or ACK between 10.0.0.1:40000 (the
// client, which sends the data) and 10.0.0.2:5201.
func handshakeFrame(t *testing.T, fromClient, syn, ack bool, seq, ackNo uint32) []byte {
	t.Helper()
	src, dst, sport, dport := "10.0.0.1", "10.0.0.2", layers.TCPPort(40000), layers.TCPPort(5201)
	if !fromClient {
		src, dst, sport, dport = dst, src, dport, sport
	}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolTCP,
		SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4()}
	tcp := &layers.TCP{SrcPort: sport, DstPort: dport, Seq: seq, Ack: ackNo, SYN: syn, ACK: ack, Window: 65535}
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, tcp); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// captureNearSender is a capture at the sender: the handshake's ACK leaves
// clientAckUs after the SYN-ACK came (a moment, unless the host was busy),
// then data rounds whose ACKs take 5 ms and whose next data leaves 0.3 ms
// after each ACK.
func captureNearSender(t *testing.T, clientAckUs int64, rounds int) string {
	a := New(Options{})
	ts, n := int64(1e18), uint64(0)
	add := func(d []byte) {
		n++
		a.Add(capture.Frame{Number: n, TimeNs: ts, LinkType: 1, WireLen: len(d), Data: d})
	}
	add(handshakeFrame(t, true, true, false, 999, 0))
	ts += 1_000_000
	add(handshakeFrame(t, false, true, true, 4999, 1000))
	ts += clientAckUs * 1000
	add(handshakeFrame(t, true, false, true, 1000, 5000))
	seq := uint32(1000)
	for i := 0; i < rounds; i++ {
		ts += 300_000
		for j := 0; j < 4; j++ {
			addTCP(t, a, ts, "10.0.0.1", "10.0.0.2", 40000, 5201, seq, 5000, 1000, true, n+1)
			n++
			seq += 1000
		}
		ts += 5_000_000
		addTCP(t, a, ts, "10.0.0.2", "10.0.0.1", 5201, 40000, 5000, seq, 0, true, n+1)
		n++
	}
	r := a.Report("synthetic", "pcap", nil)
	for _, f := range r.Flows {
		if f.Dst == "10.0.0.2:5201" {
			return f.Location
		}
	}
	t.Fatalf("no flow to 10.0.0.2:5201 in %+v", r.Flows)
	return ""
}

// One slow handshake ACK (a guest descheduled under a CI host's load) must
// not outvote hundreds of data rounds: the capture is then placed nowhere.
func TestOneSlowHandshakeDoesNotOutvoteTheData(t *testing.T) {
	for _, c := range []struct {
		name        string
		clientAckUs int64
		rounds      int
		want        string
	}{
		{"prompt handshake, data agrees", 20, 200, LocationSender},
		{"slow handshake ACK, data says sender", 8000, 200, LocationBetween},
		{"prompt handshake, too few data rounds", 20, 3, LocationSender},
		{"slow handshake ACK alone", 8000, 3, LocationReceiver},
	} {
		if got := captureNearSender(t, c.clientAckUs, c.rounds); got != c.want {
			t.Errorf("%s: placed %q, want %q", c.name, got, c.want)
		}
	}
}
