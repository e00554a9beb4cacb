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
	pcap   *pcapRecords
	ng     func(*Frame) error // pcapng, when pcap is nil
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
		rd.ng = func(f *Frame) error {
			data, ci, opts, err := ng.ZeroCopyReadPacketDataWithOptions()
			if err != nil {
				return err
			}
			f.Data, f.LinkType, f.TimeNs, f.WireLen, f.Dir = data, 0, ci.Timestamp.UnixNano(), ci.Length, packet.DirUnknown
			if len(ci.AncillaryData) > 0 {
				if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					f.LinkType = int(lt)
				}
			}
			if opts.Flags != nil {
				switch opts.Flags.Direction & pcapgo.NgEpbFlagDirectionMask {
				case pcapgo.NgEpbFlagDirectionInbound:
					f.Dir = packet.DirIn
				case pcapgo.NgEpbFlagDirectionOutbound:
					f.Dir = packet.DirOut
				}
			}
			return nil
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
	rd.pcap = pr
	return rd, nil
}

// Next fills f with the next frame; it returns io.EOF at a clean end, or an
// error naming the packet that could not be read (a truncated or damaged
// capture). f is filled in place: returning a 64-byte Frame for every
// packet showed in the profile.
func (r *Reader) Next(f *Frame) error {
	var err error
	if r.pcap != nil {
		err = r.pcap.next(f)
	} else {
		err = r.ng(f)
	}
	if err == io.EOF {
		return io.EOF
	}
	r.number++
	if err != nil {
		return fmt.Errorf("reading packet %d: %w", r.number, noEOF(err))
	}
	f.Number = r.number
	f.WireLen = max(f.WireLen, len(f.Data))
	return nil
}

// noEOF turns an end of input inside a structure into a truncation.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("capture truncated: %w", io.ErrUnexpectedEOF)
	}
	return err
}
