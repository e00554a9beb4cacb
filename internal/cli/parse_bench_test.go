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

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/compare"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// writeBigTrace writes n events, nine send-limit runs to one state change,
// as a busy host produces them. Each event is encoded once and only its
// sequence number and time are patched, so writing is quick.
func writeBigTrace(b *testing.B, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := trace.NewWriter(bw, tracetest.Header(trace.NativeOrder))
	if err != nil {
		b.Fatal(err)
	}
	a := tracetest.Addrs(netip.MustParseAddrPort("10.200.0.1:40000"), netip.MustParseAddrPort("10.200.0.2:5201"), 1)
	conn, err := binary.Append(nil, trace.NativeOrder, tracetest.Conn(0, 0, 0, 0xffff888100000000, a, 2, 1, 0, ""))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := binary.Append(nil, trace.NativeOrder, tracetest.Sendlim(0, 0, 0, 1, 0xffff888100000000, a, uint8(event.SendlimCwnd), 300, 450))
	if err != nil {
		b.Fatal(err)
	}
	var hdr wire.EventHeader
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
	if err := f.Close(); err != nil {
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

// BenchmarkCompareTraces compares two 10-million-event traces (about 1 GB
// together) against merely reading them in sequence order: the target is
// that compare runs at trace-reading speed.
func BenchmarkCompareTraces(b *testing.B) {
	const n = 10_000_000
	dir := b.TempDir()
	a, c := filepath.Join(dir, "a.trace"), filepath.Join(dir, "b.trace")
	writeBigTrace(b, a, n)
	writeBigTrace(b, c, n)
	var size int64
	for _, p := range []string{a, c} {
		st, err := os.Stat(p)
		if err != nil {
			b.Fatal(err)
		}
		size += st.Size()
	}
	read := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := replay(bufio.NewReaderSize(f, 1<<20), &event.Filter{}, analyze.NewSummary(), func(*event.Event) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	var readTime, compareTime time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		read(a)
		read(c)
		readTime += time.Since(start)
		start = time.Now()
		ra, err := loadRun(a, nil)
		if err != nil {
			b.Fatal(err)
		}
		rb, err := loadRun(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := compare.Compare(ra, rb); err != nil {
			b.Fatal(err)
		}
		compareTime += time.Since(start)
	}
	b.ReportMetric(float64(size)*float64(b.N)/compareTime.Seconds()/1e6, "compare-MB/s")
	b.ReportMetric(float64(size)*float64(b.N)/readTime.Seconds()/1e6, "read-MB/s")
	b.ReportMetric(compareTime.Seconds()/readTime.Seconds(), "compare/read")
}
