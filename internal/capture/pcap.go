package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Classic pcap is a 24-byte header and 16-byte record headers: simple
// enough to slice in place. pcapgo copies each record header and frame out
// of a buffered reader and builds a time.Time per packet, which cost 40 %
// of the analysis (BenchmarkAnalyze); this reader hands out slices of large
// reads instead. pcapng stays with pcapgo.

const (
	pcapHeaderLen = 24
	pcapRecordLen = 16
	// maxPcapFrame bounds a record against a corrupt length: libpcap's
	// largest snapshot length (as pcapgo allows for records).
	maxPcapFrame = 262144
	pcapReadSize = 4 << 20
)

type pcapRecords struct {
	r          io.Reader
	buf        []byte
	start, end int
	bigEndian  bool  // a branch per field costs less than binary.ByteOrder's interface calls
	fracNs     int64 // nanoseconds per unit of the timestamp's fraction
	snaplen    int
	link       int
	eof        bool
}

// openPcap reads a classic pcap header.
func openPcap(r io.Reader) (*pcapRecords, error) {
	p := &pcapRecords{r: r, buf: make([]byte, pcapReadSize)}
	if err := p.fill(pcapHeaderLen); err != nil {
		return nil, err
	}
	h := p.buf[p.start : p.start+pcapHeaderLen]
	switch {
	case binary.LittleEndian.Uint32(h) == 0xa1b2c3d4:
		p.fracNs = 1000
	case binary.BigEndian.Uint32(h) == 0xa1b2c3d4:
		p.bigEndian, p.fracNs = true, 1000
	case binary.LittleEndian.Uint32(h) == 0xa1b23c4d:
		p.fracNs = 1
	case binary.BigEndian.Uint32(h) == 0xa1b23c4d:
		p.bigEndian, p.fracNs = true, 1
	default:
		return nil, fmt.Errorf("unknown magic %#08x", binary.BigEndian.Uint32(h))
	}
	major := binary.LittleEndian.Uint16(h[4:])
	if p.bigEndian {
		major = binary.BigEndian.Uint16(h[4:])
	}
	if major != 2 {
		return nil, fmt.Errorf("unknown major version %d", major)
	}
	p.snaplen = int(p.u32(h[16:]))
	p.link = int(p.u32(h[20:]) & 0x0fffffff) // the top bits carry the FCS length
	p.start += pcapHeaderLen
	return p, nil
}

// fill makes at least n bytes available from p.start, reading in large
// chunks; what it already holds moves to the front, so earlier frames'
// slices go stale (a frame is valid until the next call). The check is
// apart from the reading so that it inlines.
func (p *pcapRecords) fill(n int) error {
	if p.end-p.start >= n {
		return nil
	}
	return p.read(n)
}

func (p *pcapRecords) read(n int) error {
	if n > len(p.buf) {
		grown := make([]byte, n+pcapReadSize)
		p.end = copy(grown, p.buf[p.start:p.end])
		p.buf, p.start = grown, 0
	} else if p.start > 0 {
		p.end = copy(p.buf, p.buf[p.start:p.end])
		p.start = 0
	}
	for p.end-p.start < n {
		if p.eof {
			if p.end == p.start {
				return io.EOF
			}
			return io.ErrUnexpectedEOF
		}
		m, err := p.r.Read(p.buf[p.end:])
		p.end += m
		if errors.Is(err, io.EOF) {
			p.eof = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// u32 reads a field in the file's byte order.
func (p *pcapRecords) u32(b []byte) uint32 {
	if p.bigEndian {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

// next slices the next record into f: its frame, link type, time and
// original length.
func (p *pcapRecords) next(f *Frame) error {
	if err := p.fill(pcapRecordLen); err != nil {
		return err
	}
	h := p.buf[p.start : p.start+pcapRecordLen]
	captured, wire := int(p.u32(h[8:])), int(p.u32(h[12:]))
	if captured > max(p.snaplen, maxPcapFrame) {
		return fmt.Errorf("capture length exceeds snap length: %d > %d", captured, p.snaplen)
	}
	if captured > wire {
		return fmt.Errorf("capture length exceeds original packet length: %d > %d", captured, wire)
	}
	f.TimeNs = int64(p.u32(h[0:]))*1e9 + int64(p.u32(h[4:]))*p.fracNs
	if err := p.fill(pcapRecordLen + captured); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	start := p.start + pcapRecordLen
	f.Data = p.buf[start : start+captured : start+captured]
	f.LinkType, f.WireLen, f.Dir = p.link, wire, 0
	p.start = start + captured
	return nil
}
