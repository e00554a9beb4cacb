package perfetto

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"runtime"
	"testing"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// bigTrace is n tcp_sendlim runs of four connections, round robin: each
// connection's runs follow one another as the kernel stamps them (300 ns
// apart), cycling through ok, cwnd and sndbuf with a changing cwnd. Each
// connection's run is encoded once; only its times and counts are patched.
func bigTrace(b *testing.B, n int) []byte {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, tracetest.Header(trace.NativeOrder))
	if err != nil {
		b.Fatal(err)
	}
	var bodies [4][]byte
	for c := range bodies {
		a := tracetest.Addrs(netip.AddrPortFrom(netip.MustParseAddr("10.200.0.1"), uint16(40000+c)), netip.MustParseAddrPort("10.200.0.2:5201"), 1)
		if bodies[c], err = binary.Append(nil, trace.NativeOrder, tracetest.Sendlim(0, 0, 0, 0, 0xffff888100000000+uint64(c)<<12, a, 0, 30, 0)); err != nil {
			b.Fatal(err)
		}
	}
	var w0 wire.TcpSendlimEvent
	seqOff, tsOff := unsafe.Offsetof(w0.Hdr)+unsafe.Offsetof(w0.Hdr.Seq), unsafe.Offsetof(w0.Hdr)+unsafe.Offsetof(w0.Hdr.TsNs)
	reasons := [...]event.SendlimReason{event.SendlimOK, event.SendlimCwnd, event.SendlimSndbuf}
	for i := 0; i < n; i++ {
		body := bodies[i%len(bodies)]
		run := uint64(i / len(bodies))
		binary.NativeEndian.PutUint64(body[seqOff:], uint64(i))
		binary.NativeEndian.PutUint64(body[unsafe.Offsetof(w0.BeginNs):], 1_000_000+run*10_000)
		binary.NativeEndian.PutUint64(body[tsOff:], 1_000_000+(run+1)*10_000+300)
		binary.NativeEndian.PutUint32(body[unsafe.Offsetof(w0.Sentpkts):], uint32(run%40))
		binary.NativeEndian.PutUint32(body[unsafe.Offsetof(w0.Cwnd):], uint32(10+run%50))
		body[unsafe.Offsetof(w0.Reason)] = uint8(reasons[run%uint64(len(reasons))])
		if err := w.Append(uint16(event.TypeTCPSendlim), body); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// BenchmarkExport exports a million tcp_sendlim runs as the CLI does
// (replay included; "replay" alone is the baseline). MB/s is of the trace
// read.
func BenchmarkExport(b *testing.B) {
	const n = 1 << 20
	data := bigTrace(b, n)
	for _, exporting := range []bool{false, true} {
		name := "replay"
		if exporting {
			name = "export"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var out countingWriter
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < b.N; i++ {
				r, err := trace.NewReader(bytes.NewReader(data))
				if err != nil {
					b.Fatal(err)
				}
				sum := analyze.NewSummary()
				emit := func(*event.Event) error { return nil }
				var x *Exporter
				if exporting {
					x = New(&out, sum)
					emit = x.Add
				}
				if err := analyze.Replay(r, &event.Filter{}, sum, emit); err != nil {
					b.Fatal(err)
				}
				if exporting {
					if err := x.Close(); err != nil {
						b.Fatal(err)
					}
				}
			}
			runtime.ReadMemStats(&after)
			events := float64(b.N) * n
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/events, "allocs/event")
			if exporting {
				b.ReportMetric(float64(out.n)/events, "out-B/event")
			}
		})
	}
}
