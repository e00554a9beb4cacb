package event_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
)

func TestDecodeBothByteOrders(t *testing.T) {
	local, peer := netip.MustParseAddrPort("[2001:db8::1]:443"), netip.MustParseAddrPort("[2001:db8::2]:50000")
	for _, o := range []trace.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		var buf bytes.Buffer
		w, err := tracetest.NewWriter(&buf, o)
		if err != nil {
			t.Fatal(err)
		}
		a := tracetest.Addrs(local, peer, 7)
		if err := w.Event(uint16(event.TypeTCPSendlim), tracetest.Sendlim(42, 2_000, 1_000, 1, 0xabc, a, uint8(event.SendlimNagle), 5, 6)); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r, err := trace.NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		var ev event.Event
		ok, err := event.NewDecoder(&r.Header).Decode(rec, &ev)
		if !ok || err != nil {
			t.Fatalf("decode: %v %v", ok, err)
		}
		s := ev.Sendlim
		if ev.Seq != 42 || ev.CPU != 1 || ev.Time != 1_700_000_000_000_002_000 || s.Begin != 1_700_000_000_000_001_000 ||
			s.Local != local || s.Peer != peer || s.Netns != 7 || s.Sock != 0xabc || s.Reason != event.SendlimNagle ||
			s.Cnt != 5 || s.SentPkts != 6 || s.MSS != 1448 || s.Sndbuf != 16384 {
			t.Fatalf("decoded %+v", ev)
		}
	}
}

func TestDecodeShortRecordIsAnError(t *testing.T) {
	h := tracetest.Header(binary.LittleEndian)
	var ev event.Event
	_, err := event.NewDecoder(&h).Decode(trace.Record{Type: uint16(event.TypeTCPConn), Body: make([]byte, 10)}, &ev)
	if err == nil {
		t.Fatal("short record decoded")
	}
	ok, err := event.NewDecoder(&h).Decode(trace.Record{Type: 0x7f, Body: make([]byte, 10)}, &ev)
	if ok || err != nil {
		t.Fatalf("unknown type: ok=%v err=%v, want skipped", ok, err)
	}
}

func FuzzDecode(f *testing.F) {
	for typ := uint16(event.TypeTCPConn); typ <= uint16(event.TypeSockIO); typ++ {
		f.Add(typ, make([]byte, 256), typ%2 == 0)
		f.Add(typ, make([]byte, 40), false)
	}
	f.Fuzz(func(t *testing.T, typ uint16, body []byte, big bool) {
		var o trace.ByteOrder = binary.LittleEndian
		if big {
			o = binary.BigEndian
		}
		h := tracetest.Header(o)
		// The reader hands out 8-byte-aligned bodies; keep that true here.
		buf := unsafeBytes(make([]uint64, (len(body)+7)/8))[:len(body)]
		copy(buf, body)
		var ev event.Event
		event.NewDecoder(&h).Decode(trace.Record{Type: typ, Body: buf}, &ev)
	})
}

// Traces written before the kernel's chrono totals were appended to
// tcp_sendlim still read, with those totals zero; a record shorter than
// that older layout is still an error.
func TestDecodeSendlimOfAnOlderLayout(t *testing.T) {
	for _, o := range []trace.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		h := tracetest.Header(o)
		w := tracetest.Sendlim(1, 2_000, 1_000, 0, 0xabc, tracetest.Addrs(netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("10.0.0.2:2"), 7),
			uint8(event.SendlimSwnd), 3, 4)
		w.Probes, w.BusyUs, w.RwndLimitedUs = 2, 9_000, 8_000
		full, err := binary.Append(nil, o, w)
		if err != nil {
			t.Fatal(err)
		}
		oldSize := bytes.Index(full, binary.LittleEndian.AppendUint64(nil, 9_000)) // where busy_us begins
		if o == binary.BigEndian {
			oldSize = bytes.Index(full, binary.BigEndian.AppendUint64(nil, 9_000))
		}
		var ev event.Event
		ok, err := event.NewDecoder(&h).Decode(trace.Record{Type: uint16(event.TypeTCPSendlim), Body: full[:oldSize]}, &ev)
		if !ok || err != nil {
			t.Fatalf("older layout: ok=%v err=%v", ok, err)
		}
		if s := ev.Sendlim; s.Reason != event.SendlimSwnd || s.Probes != 2 || s.Cnt != 3 || s.BusyUs != 0 || s.RwndLimitedUs != 0 {
			t.Fatalf("older layout decoded as %+v", s)
		}
		if _, err := event.NewDecoder(&h).Decode(trace.Record{Type: uint16(event.TypeTCPSendlim), Body: full[:oldSize-1]}, &ev); err == nil {
			t.Fatal("a record shorter than the older layout decoded")
		}
		ok, err = event.NewDecoder(&h).Decode(trace.Record{Type: uint16(event.TypeTCPSendlim), Body: full}, &ev)
		if !ok || err != nil || ev.Sendlim.BusyUs != 9_000 || ev.Sendlim.RwndLimitedUs != 8_000 {
			t.Fatalf("current layout: ok=%v err=%v %+v", ok, err, ev.Sendlim)
		}
	}
}
