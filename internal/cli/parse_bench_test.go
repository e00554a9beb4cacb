package cli

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

// writeBigTrace writes n events, nine send-limit runs to one state change,
// as a busy host produces them. Each event is encoded once and only its
// sequence number and time are patched, so writing is quick.
func writeBigTrace(b *testing.B, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := trace.NewWriter(bw, tracetest.Header(trace.NativeOrder))
	if err != nil {
		b.Fatal(err)
	}
	a := tracetest.Addrs(netip.MustParseAddrPort("10.200.0.1:40000"), netip.MustParseAddrPort("10.200.0.2:5201"), 1)
	conn, _ := binary.Append(nil, trace.NativeOrder, tracetest.Conn(0, 0, 0, 0xffff888100000000, a, 2, 1, 0, ""))
	lim, _ := binary.Append(nil, trace.NativeOrder, tracetest.Sendlim(0, 0, 0, 1, 0xffff888100000000, a, uint8(event.SendlimCwnd), 300, 450))
	var hdr probe.SkbtraceEventHeader
	seqOff, tsOff := unsafe.Offsetof(hdr.Seq), unsafe.Offsetof(hdr.TsNs)
	for i := 0; i < n; i++ {
		body, typ := lim, event.TypeTCPSendlim
		if i%10 == 0 {
			body, typ = conn, event.TypeTCPConn
		}
		binary.NativeEndian.PutUint64(body[seqOff:], uint64(i))
		binary.NativeEndian.PutUint64(body[tsOff:], uint64(i)*1000)
		if err := w.Append(uint16(typ), body); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkParse10M measures `skbtrace parse` to text on a 10-million-event
// file; the target is 3 million events a second.
func BenchmarkParse10M(b *testing.B) {
	const n = 10_000_000
	path := filepath.Join(b.TempDir(), "big.trace")
	writeBigTrace(b, path, n)
	for _, asJSON := range []bool{false, true} {
		name := "text"
		if asJSON {
			name = "json"
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if err := parseTrace(f, io.Discard, io.Discard, &event.Filter{}, asJSON); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				f.Close()
			}
			b.ReportMetric(float64(n)*float64(b.N)/total.Seconds()/1e6, "Mevents/s")
		})
	}
}
