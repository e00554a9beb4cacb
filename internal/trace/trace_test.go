package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

func testHeader(o ByteOrder) Header {
	return Header{
		ByteOrder: o, BootAnchorNs: 1_000_000_000, WallAnchorNs: 1_700_000_000_000_000_000,
		CPUs: 2, Hostname: "host", Kernel: "6.18.0", Machine: "x86_64", Tool: "test", Command: "skbtrace record",
	}
}

// writeTrace writes n records of varied sizes in blocks of perBlock records.
func writeTrace(t testing.TB, o ByteOrder, n, perBlock int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(o))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		body := bytes.Repeat([]byte{byte(i)}, 1+i%37)
		if err := w.Append(uint16(1+i%3), body); err != nil {
			t.Fatal(err)
		}
		if (i+1)%perBlock == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAll reads a trace written by writeTrace and says how many records
// it read.
func readAll(t testing.TB, data []byte) (int, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	n, skipped := 0, 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n - skipped, nil
		}
		if err != nil {
			return n - skipped, err
		}
		// Past a damaged block the reader resumes at a later record: the
		// next that fits is taken, in order, as writeTrace numbered them.
		i := n
		for ; i < n+maxSkipped; i++ {
			if rec.Type == uint16(1+i%3) && bytes.Equal(rec.Body, bytes.Repeat([]byte{byte(i)}, 1+i%37)) {
				break
			}
		}
		if i == n+maxSkipped {
			t.Fatalf("record after %d: type %d body %x is none writeTrace wrote next", n, rec.Type, rec.Body)
		}
		skipped += i - n
		n = i + 1
	}
}

// maxSkipped bounds the records a damaged block may take with it in these tests.
const maxSkipped = 300

func TestRoundTripBothByteOrders(t *testing.T) {
	for _, o := range []ByteOrder{binary.LittleEndian, binary.BigEndian} {
		data := writeTrace(t, o, 1000, 100)
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := r.Header, testHeader(o); got.Hostname != want.Hostname || got.Kernel != want.Kernel ||
			got.Command != want.Command || got.WallAnchorNs != want.WallAnchorNs || got.CPUs != 2 ||
			isBigEndian(got.ByteOrder) != isBigEndian(o) {
			t.Fatalf("header %+v, want %+v", got, want)
		}
		n, err := readAll(t, data)
		if err != nil || n != 1000 {
			t.Fatalf("read %d records, err %v; want 1000", n, err)
		}
	}
}

func TestWallTime(t *testing.T) {
	h := testHeader(binary.LittleEndian)
	if got := h.WallTime(h.BootAnchorNs + 1500); got != h.WallAnchorNs+1500 {
		t.Fatalf("WallTime = %d", got)
	}
}

func TestTornTailReportsLostBytes(t *testing.T) {
	data := writeTrace(t, binary.LittleEndian, 300, 100) // three blocks
	for cut := 1; cut < 200; cut += 17 {
		n, err := readAll(t, data[:len(data)-cut])
		var te *TruncatedError
		if !errors.As(err, &te) {
			t.Fatalf("cut %d: err %v, want TruncatedError", cut, err)
		}
		if n != 200 {
			t.Fatalf("cut %d: %d records before the torn block, want 200", cut, n)
		}
		if te.TornBytes <= 0 || te.Offset+te.TornBytes != int64(len(data)-cut) {
			t.Fatalf("cut %d: torn %d bytes at %d, file ends at %d", cut, te.TornBytes, te.Offset, len(data)-cut)
		}
	}
}

func TestCleanEndAtBlockBoundary(t *testing.T) {
	data := writeTrace(t, binary.LittleEndian, 200, 100)
	n, err := readAll(t, data)
	if err != nil || n != 200 {
		t.Fatalf("n=%d err=%v", n, err)
	}
}

func TestEveryByteFlipIsDetected(t *testing.T) {
	data := writeTrace(t, binary.BigEndian, 50, 10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= byte(1 + rng.IntN(255))
		n, err := readAll(t, bad)
		if err == nil {
			t.Fatalf("flip at offset %d of %d went unnoticed (%d records read)", i, len(data), n)
		}
		var fe *FormatError
		var te *TruncatedError
		if !errors.As(err, &fe) && !errors.As(err, &te) {
			t.Fatalf("flip at %d: error %v is neither a FormatError nor a TruncatedError", i, err)
		}
	}
}

func TestHeaderErrors(t *testing.T) {
	good := writeTrace(t, binary.LittleEndian, 1, 1)
	cases := map[string]struct {
		data []byte
		want string
	}{
		"empty":       {nil, "the input is empty, not a skbtrace trace"},
		"magic":       {append([]byte("NOTATRCE"), good[8:]...), "the input is data of another kind (it starts 4e 4f 54 41 54 52 43 45), not a skbtrace trace"},
		"flipped":     {append([]byte("SKBTRACF"), good[8:]...), "bad magic"},
		"short":       {good[:10], "inside the file header"},
		"order":       {func() []byte { b := bytes.Clone(good); b[8] = 'X'; return b }(), "byte-order mark"},
		"version":     {func() []byte { b := bytes.Clone(good); b[10] = 99; return b }(), "unsupported trace format version 99"},
		"header body": {func() []byte { b := bytes.Clone(good); b[30] ^= 1; return b }(), "file header fails its checksum"},
	}
	for name, c := range cases {
		_, err := NewReader(bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", name, err, c.want)
		}
	}
}

func TestBlockChecksumErrorNamesOffset(t *testing.T) {
	data := writeTrace(t, binary.LittleEndian, 20, 10)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	hdrLen := r.Offset()
	bad := bytes.Clone(data)
	bad[len(bad)-3] ^= 0xff // inside the second block's payload
	_, err = readAll(t, bad)
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(fe.Msg, "checksum") || fe.Offset <= hdrLen {
		t.Fatalf("err %v, want a checksum error past the header", err)
	}
}

func TestMetaRecordsRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(binary.BigEndian))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		w.AppendNetns(Netns{Inode: 4026531840, Name: "lab-a"}),
		w.AppendLoss(Loss{Family: 1, CPU: 3, Count: 42, BootNs: 99}),
		w.AppendEnd(End{NextSeq: 1234, BootNs: 100}),
		w.Flush(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	o := r.ByteOrder()
	next := func() Record {
		t.Helper()
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if n, err := DecodeNetns(o, next().Body); err != nil || n != (Netns{4026531840, "lab-a"}) {
		t.Fatalf("netns %+v %v", n, err)
	}
	if l, err := DecodeLoss(o, next().Body); err != nil || l != (Loss{1, 3, 42, 99}) {
		t.Fatalf("loss %+v %v", l, err)
	}
	if e, err := DecodeEnd(o, next().Body); err != nil || e != (End{1234, 100}) {
		t.Fatalf("end %+v %v", e, err)
	}
	if _, err := DecodeLoss(o, []byte{1, 2}); err == nil {
		t.Fatal("short loss record decoded")
	}
}

func FuzzReader(f *testing.F) {
	f.Add(writeTrace(f, binary.LittleEndian, 30, 10))
	f.Add(writeTrace(f, binary.BigEndian, 5, 2))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i := 0; i < 1<<16; i++ {
			rec, err := r.Next()
			if err != nil {
				return
			}
			if rec.Offset < 0 || rec.Offset >= int64(len(data)) {
				t.Fatalf("record offset %d outside the input", rec.Offset)
			}
		}
	})
}

func FuzzMetaRecords(f *testing.F) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(binary.LittleEndian))
	if err != nil {
		f.Fatal(err)
	}
	for _, err := range []error{
		w.AppendEnum(Enum{Kind: EnumDropReason, Names: map[uint32]string{2: "NOT_SPECIFIED", 5: "TCP_CSUM"}}),
		w.AppendSymbol(Symbol{Addr: 0xffffffff81000000, Name: "tcp_v4_rcv+0x10"}),
		w.AppendLoss(Loss{Family: 1, CPU: 1, Count: 2, BootNs: 3}),
		w.AppendSample(Sample{Share: 0.2, Interval: 1e9, Families: []string{"dev_xmit", "softirq"}}),
		w.AppendResume(Resume{FirstSeq: 9, Cause: ResumeWindow}),
		w.AppendTrigger(Trigger{Seq: 9, TimeNs: 10, Suppressed: 1, Expr: "rto", What: "tcp_cong Loss"}),
		w.Flush(),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}
	r, err := NewReader(&buf)
	if err != nil {
		f.Fatal(err)
	}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		f.Add(rec.Type, bytes.Clone(rec.Body))
	}
	f.Fuzz(func(t *testing.T, typ uint16, body []byte) {
		o := binary.LittleEndian
		switch typ % 8 {
		case 6:
			DecodeResume(o, body)
		case 7:
			if tr, err := DecodeTrigger(o, body); err == nil && len(tr.Expr)+len(tr.What)+28 > len(body) {
				t.Fatalf("trigger %+v decoded from %d bytes", tr, len(body))
			}
		case 0:
			DecodeEnum(o, body)
		case 1:
			DecodeSymbol(o, body)
		case 2:
			DecodeLoss(o, body)
		case 3:
			DecodeNetns(o, body)
		case 5:
			if s, err := DecodeSample(o, body); err == nil && (s.Share <= 0 || s.Share >= 1) {
				t.Fatalf("share %v accepted", s.Share)
			}
		default:
			DecodeEnd(o, body)
		}
	})
}

func TestResumeAndTriggerRecordsRoundTrip(t *testing.T) {
	for _, o := range []ByteOrder{binary.LittleEndian, binary.BigEndian} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, testHeader(o))
		if err != nil {
			t.Fatal(err)
		}
		res := Resume{FirstSeq: 1 << 40, Cause: ResumeRotation}
		trg := Trigger{Seq: 77, TimeNs: 1_700_000_000_123_456_789, Suppressed: 3, Expr: "drop:NETFILTER_DROP@veth0", What: "skb_drop NETFILTER_DROP on veth0"}
		if err := w.AppendResume(res); err != nil {
			t.Fatal(err)
		}
		if err := w.AppendTrigger(trg); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeResume(r.ByteOrder(), rec.Body); err != nil || got != res {
			t.Errorf("resume: %+v, %v; want %+v", got, err, res)
		}
		if rec, err = r.Next(); err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeTrigger(r.ByteOrder(), rec.Body); err != nil || got != trg {
			t.Errorf("trigger: %+v, %v; want %+v", got, err, trg)
		}
	}
}

func TestSampleRecordRoundTrips(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(binary.BigEndian))
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{Share: 0.2, Interval: 1e9, Families: []string{"dev_xmit", "sock_io"}}
	if err := w.AppendSample(want); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Next()
	if err != nil || rec.Type != RecordSample {
		t.Fatalf("%v %v", rec.Type, err)
	}
	got, err := DecodeSample(r.ByteOrder(), rec.Body)
	if err != nil || got.Share != want.Share || got.Interval != want.Interval || strings.Join(got.Families, ",") != "dev_xmit,sock_io" {
		t.Fatalf("%+v %v", got, err)
	}
}

// A flipped byte costs its block only: the reader reads on from the next
// intact block and reports the damage, and where it resumed, at the end.
func TestDamagedBlockCostsOnlyItself(t *testing.T) {
	data := writeTrace(t, binary.LittleEndian, 300, 100) // three blocks
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []int64
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		if len(blocks) == 0 || blocks[len(blocks)-1] != r.blockOff {
			blocks = append(blocks, r.blockOff)
		}
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3", len(blocks))
	}
	for name, at := range map[string]int64{"payload": blocks[1] + blockHeaderLen + 40, "magic": blocks[1], "length": blocks[1] + 4} {
		bad := bytes.Clone(data)
		bad[at] ^= 0x5a
		n, err := readAll(t, bad)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Offset != blocks[1] || fe.Resumed != blocks[2] || fe.Skipped != blocks[2]-blocks[1] {
			t.Errorf("%s: err %v, want damage at %d, resumed at %d", name, err, blocks[1], blocks[2])
		}
		if n != 200 {
			t.Errorf("%s: read %d records, want the 200 of the intact blocks", name, n)
		}
	}
}

// An input that is not a trace is named for what it is, whatever its
// length: a note shorter than the header was "damaged at offset 12".
func TestNotATraceSaysWhatItIs(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("\xd4\xc3\xb2\xa1\x02\x00\x04\x00 the rest of a capture"))
	zw.Close()
	var gzTrace bytes.Buffer
	zw = gzip.NewWriter(&gzTrace)
	zw.Write(writeTrace(t, binary.LittleEndian, 1, 1))
	zw.Close()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "the input is empty, not a skbtrace trace"},
		{"short note", []byte("buy milk\n"), `the input is text (it starts "buy milk"), not a skbtrace trace`},
		{"note", []byte("Notes on the run of 3 May: the stream reached 9.41 Gbit/s\nthen fell"), `text (it starts "Notes on the run of 3 Ma..."), not`},
		{"pcap", []byte("\xd4\xc3\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\x01\x00\x00\x00"), "the input is a pcap capture, not a skbtrace trace: use skbtrace pcap"},
		{"pcap big-endian ns", []byte("\xa1\xb2\x3c\x4d\x00\x02\x00\x04"), "a pcap capture, not a skbtrace trace: use skbtrace pcap"},
		{"pcapng", []byte("\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x4d\x3c\x2b\x1a"), "a pcapng capture, not a skbtrace trace: use skbtrace pcap"},
		{"gzip pcap", gz.Bytes(), "a gzip-compressed pcap capture, not a skbtrace trace: use skbtrace pcap"},
		{"gzip trace", gzTrace.Bytes(), "a gzip-compressed skbtrace trace, not a skbtrace trace: decompress it first (gunzip)"},
		{"gzip other", []byte("\x1f\x8b\x08\x00garbage"), "gzip-compressed data, not"},
		{"elf", []byte("\x7fELF\x02\x01\x01\x00\x00\x00"), "data of another kind (it starts 7f 45 4c 46 02 01 01 00)"},
	} {
		_, err := NewReader(bytes.NewReader(c.data))
		var nt *NotTraceError
		if !errors.As(err, &nt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A trace cut inside its magic is a trace cut short, not another kind.
	_, err := NewReader(bytes.NewReader([]byte("SKBTR")))
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "inside the file header") {
		t.Errorf("a trace cut at 5 bytes: %v", err)
	}
}
