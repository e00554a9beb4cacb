package trace

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// Header is the host metadata at the start of a trace.
type Header struct {
	ByteOrder ByteOrder
	// BootAnchorNs and WallAnchorNs were read at the same instant from
	// CLOCK_BOOTTIME (the kernel's event clock) and CLOCK_REALTIME.
	BootAnchorNs uint64
	WallAnchorNs int64
	CPUs         uint32
	Hostname     string
	Kernel       string // uname release
	Machine      string // uname machine
	Tool         string // skbtrace version
	Command      string // what was recorded, for the reader's information
}

// WallTime converts a kernel CLOCK_BOOTTIME timestamp to wall-clock nanoseconds.
func (h *Header) WallTime(bootNs uint64) int64 {
	return h.WallAnchorNs + int64(bootNs-h.BootAnchorNs)
}

// Start is the wall-clock time of the anchor.
func (h *Header) Start() time.Time { return time.Unix(0, h.WallAnchorNs) }

func (h *Header) marshal() ([]byte, error) {
	o := h.ByteOrder
	body := make([]byte, 0, 256)
	body = o.AppendUint64(body, h.BootAnchorNs)
	body = o.AppendUint64(body, uint64(h.WallAnchorNs))
	body = o.AppendUint32(body, h.CPUs)
	for _, s := range []string{h.Hostname, h.Kernel, h.Machine, h.Tool, h.Command} {
		if len(s) > 0xffff {
			s = s[:0xffff]
		}
		body = o.AppendUint16(body, uint16(len(s)))
		body = append(body, s...)
	}
	out := make([]byte, 0, fileHeaderFixedLen+len(body))
	out = append(out, Magic...)
	out = append(out, byteOrderMark(o), 0)
	out = o.AppendUint16(out, Version)
	out = o.AppendUint32(out, uint32(len(body)))
	out = append(out, body...)
	return o.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

func parseHeaderFixed(b []byte) (ByteOrder, uint32, error) {
	if string(b[:8]) != Magic {
		return nil, 0, fmt.Errorf("not a skbtrace file (bad magic %q)", b[:8])
	}
	var o ByteOrder
	switch b[8] {
	case 'L':
		o = binary.LittleEndian
	case 'B':
		o = binary.BigEndian
	default:
		return nil, 0, fmt.Errorf("bad byte-order mark %#x at offset 8", b[8])
	}
	if v := o.Uint16(b[10:]); v != Version {
		return nil, 0, fmt.Errorf("unsupported trace format version %d (this skbtrace reads version %d)", v, Version)
	}
	n := o.Uint32(b[12:])
	if n > maxHeaderBody {
		return nil, 0, fmt.Errorf("header body of %d bytes is larger than the %d allowed", n, maxHeaderBody)
	}
	return o, n, nil
}

func (h *Header) unmarshalBody(o ByteOrder, b []byte) error {
	if len(b) < 20 {
		return fmt.Errorf("header body of %d bytes is shorter than its 20 fixed bytes", len(b))
	}
	h.ByteOrder = o
	h.BootAnchorNs = o.Uint64(b)
	h.WallAnchorNs = int64(o.Uint64(b[8:]))
	h.CPUs = o.Uint32(b[16:])
	b = b[20:]
	for _, dst := range []*string{&h.Hostname, &h.Kernel, &h.Machine, &h.Tool, &h.Command} {
		if len(b) < 2 {
			return fmt.Errorf("header strings end early")
		}
		n := int(o.Uint16(b))
		if len(b) < 2+n {
			return fmt.Errorf("header string of %d bytes overruns the header", n)
		}
		*dst = string(b[2 : 2+n])
		b = b[2+n:]
	}
	return nil
}
