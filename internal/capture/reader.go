// Package capture reads packet captures: pcap (both byte orders,
// microsecond and nanosecond timestamps) and pcapng (several interfaces,
// each with its link type, snaplen and timestamp resolution), gzip-compressed
// or not, streaming from any reader. pcapng is read with gopacket's pcapgo,
// classic pcap by slicing large reads (pcap.go); frames are handed out
// without per-packet allocation or copy.
package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/skbtrace/skbtrace/internal/packet"
)

// Frame is one captured frame. Data is only valid until the next call to Next.
type Frame struct {
	Number   uint64 // 1-based, as Wireshark counts
	TimeNs   int64  // Unix time in nanoseconds
	LinkType int
	WireLen  int   // the frame's length on the wire; len(Data) may be shorter (snaplen)
	Dir      uint8 // packet.DirIn or DirOut when pcapng's epb_flags say, else 0
	Data     []byte
}

// Reader streams frames from a capture.
type Reader struct {
	next   func() ([]byte, int, int64, int, uint8, error)
	number uint64
	Format string // "pcap" or "pcapng", with " (gzip)" when compressed
}

const pcapngMagic = 0x0A0D0D0A

// Open detects the format and reads the capture's header.
func Open(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	format := ""
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading the gzip header: %w", err)
		}
		br, format = bufio.NewReaderSize(zr, 1<<20), " (gzip)"
	}
	magic, err := br.Peek(4)
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a pcap or pcapng capture: %d bytes in all", len(magic))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the capture header: %w", err)
	}
	rd := &Reader{}
	if uint32(magic[0])|uint32(magic[1])<<8|uint32(magic[2])<<16|uint32(magic[3])<<24 == pcapngMagic {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("reading the pcapng header: %w", noEOF(err))
		}
		rd.Format = "pcapng" + format
		rd.next = func() ([]byte, int, int64, int, uint8, error) {
			data, ci, opts, err := ng.ZeroCopyReadPacketDataWithOptions()
			link := 0
			if len(ci.AncillaryData) > 0 {
				if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					link = int(lt)
				}
			}
			var dir uint8
			if opts.Flags != nil {
				switch opts.Flags.Direction & pcapgo.NgEpbFlagDirectionMask {
				case pcapgo.NgEpbFlagDirectionInbound:
					dir = packet.DirIn
				case pcapgo.NgEpbFlagDirectionOutbound:
					dir = packet.DirOut
				}
			}
			return data, link, ci.Timestamp.UnixNano(), ci.Length, dir, err
		}
		return rd, nil
	}
	if m := binary.BigEndian.Uint32(magic); m != 0xa1b2c3d4 && m != 0xd4c3b2a1 && m != 0xa1b23c4d && m != 0x4d3cb2a1 {
		return nil, fmt.Errorf("not a pcap or pcapng capture: it starts with %#08x", m)
	}
	pr, err := openPcap(br)
	if err != nil {
		return nil, fmt.Errorf("reading the pcap header: %w", noEOF(err))
	}
	rd.Format = "pcap" + format
	rd.next = pr.next
	return rd, nil
}

// Next returns the next frame, io.EOF at a clean end, or an error naming the
// packet that could not be read (a truncated or damaged capture).
func (r *Reader) Next() (Frame, error) {
	data, link, ts, wire, dir, err := r.next()
	if err == io.EOF {
		return Frame{}, io.EOF
	}
	r.number++
	if err != nil {
		return Frame{}, fmt.Errorf("reading packet %d: %w", r.number, noEOF(err))
	}
	if wire < len(data) {
		wire = len(data)
	}
	return Frame{Number: r.number, TimeNs: ts, LinkType: link, WireLen: wire, Dir: dir, Data: data}, nil
}

// noEOF turns an end of input inside a structure into a truncation.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("capture truncated: %w", io.ErrUnexpectedEOF)
	}
	return err
}
