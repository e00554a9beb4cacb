package parquet

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// bigTrace is n events of a busy host: 64 senders' send-limit runs and RTT
// samples, state changes, retransmits, drops and device counters every
// 100 µs. Each event is encoded once; only its sequence number and times
// are patched.
func bigTrace(b testing.TB, n int) []byte {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, tracetest.Header(trace.NativeOrder))
	if err != nil {
		b.Fatal(err)
	}
	type template struct {
		typ  event.Type
		body []byte
	}
	enc := func(typ event.Type, v any) template {
		body, err := binary.Append(nil, trace.NativeOrder, v)
		if err != nil {
			b.Fatal(err)
		}
		return template{typ, body}
	}
	var mix []template
	for i := range 64 {
		local := netip.AddrPortFrom(netip.MustParseAddr("10.200.0.1"), uint16(40000+i))
		a := tracetest.Addrs(local, netip.MustParseAddrPort("10.200.0.2:5201"), 4026532000)
		sock := 0xffff888100000000 + uint64(i)*0x1000
		mix = append(mix,
			enc(event.TypeTCPSendlim, tracetest.Sendlim(0, 0, 0, 1, sock, a, uint8(i%event.SendlimCount), 300, 450)),
			enc(event.TypeTCPSendlim, tracetest.Sendlim(0, 0, 0, 1, sock, a, uint8(event.SendlimCwnd), 30, 45)),
			enc(event.TypeTCPRTT, &wire.TcpRttEvent{Hdr: hdr(0, 0, 0, event.TypeTCPRTT), Sock: sock, Addrs: a,
				SrttUs: 120, MinRttUs: 80, Cwnd: 20, InFlight: 18, BytesAcked: uint64(i) << 20}),
			enc(event.TypeTCPSendlim, tracetest.Sendlim(0, 0, 0, 1, sock, a, uint8(event.SendlimSndbuf), 3, 4)),
			enc(event.TypeTCPRetrans, &wire.TcpRetransEvent{Hdr: hdr(0, 0, 0, event.TypeTCPRetrans), Sock: sock, Addrs: a, Cnt: 2, Skbs: 1}),
		)
		if i%8 == 0 {
			mix = append(mix,
				enc(event.TypeTCPConn, tracetest.Conn(0, 0, 0, sock, a, 1, 4, 0, "")),
				enc(event.TypeDevXmit, &wire.DevEvent{Hdr: hdr(0, 0, 0, event.TypeDevXmit), Name: name16(fmt.Sprintf("veth%d", i)),
					Netns: 4026532000, Skbs: 100, Bytes: 4_000_000, Segs: 3000, Hist: [8]uint64{10, 0, 0, 0, 0, 90}}),
				enc(event.TypeSkbDrop, &wire.SkbDropEvent{Hdr: hdr(0, 0, 0, event.TypeSkbDrop), Location: 0xffffffff81a00010,
					Dev: name16("eth0"), Reason: 2, Protocol: 0x0800, L4proto: 6, Cnt: 1, Addrs: a}))
		}
	}
	var h wire.EventHeader
	seqOff, tsOff := unsafe.Offsetof(h.Seq), unsafe.Offsetof(h.TsNs)
	for i := range n {
		t := mix[i%len(mix)]
		ts := uint64(i) * 100_000
		binary.NativeEndian.PutUint64(t.body[seqOff:], uint64(i))
		binary.NativeEndian.PutUint64(t.body[tsOff:], ts)
		// Every template with a begin time has it as its first field after the header.
		switch t.typ {
		case event.TypeTCPSendlim, event.TypeTCPRetrans:
			binary.NativeEndian.PutUint64(t.body[unsafe.Sizeof(h)+8:], ts-min(ts, 300_000))
		case event.TypeDevXmit, event.TypeSkbDrop:
			binary.NativeEndian.PutUint64(t.body[unsafe.Sizeof(h):], ts-min(ts, 1_000_000_000))
		}
		if err := w.Append(uint16(t.typ), t.body); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkExport exports a million-event trace; MB/s is of the trace read.
func BenchmarkExport(b *testing.B) {
	const n = 1_000_000
	data := bigTrace(b, n)
	dir := b.TempDir()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		sum, rerr, cerr := export(b, data, dir)
		if rerr != nil || cerr != nil {
			b.Fatalf("replay: %v, close: %v", rerr, cerr)
		}
		if sum.Matched != n {
			b.Fatalf("%d events exported, want %d", sum.Matched, n)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mevents/s")
}
