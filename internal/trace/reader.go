package trace

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Record is one record as stored. Body aliases the reader's buffer and is
// valid until the next call to Next.
type Record struct {
	Type   uint16
	Body   []byte
	Offset int64 // file offset of the record header
}

// FormatError says where and how a trace is damaged. A reader that found
// an intact block after the damage read on from it: Resumed is that
// block's offset, Skipped the bytes passed over (their records are lost),
// More the damaged spans after this one.
type FormatError struct {
	Offset  int64
	Msg     string
	Resumed int64
	Skipped int64
	More    int
}

func (e *FormatError) Error() string {
	msg := fmt.Sprintf("trace damaged at offset %d: %s", e.Offset, e.Msg)
	if e.Resumed > 0 {
		msg += fmt.Sprintf("; read on from the next intact block at offset %d (%d bytes skipped, their events lost)", e.Resumed, e.Skipped)
	}
	if e.More > 0 {
		msg += fmt.Sprintf("; %d more damaged spans after it", e.More)
	}
	return msg
}

// TruncatedError is returned when the trace ends inside a block, as after a
// crash during a write: the records of that block are lost.
type TruncatedError struct {
	Offset    int64 // where the incomplete block starts
	TornBytes int64 // how many bytes of it are present
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("trace truncated: the block at offset %d is incomplete (%d bytes present); its records are lost", e.Offset, e.TornBytes)
}

// Reader streams records from a trace. Memory is bounded by the largest block.
type Reader struct {
	Header Header
	r      *bufio.Reader
	order  ByteOrder
	off    int64 // offset of the next unread byte of the input

	block     []byte
	blockOff  int64
	pos       int
	remaining uint32

	// damage is the first damaged block, reported at the end once every
	// intact block after it was read; lost says reading since the last
	// damage has not yet found an intact block.
	damage *FormatError
	lost   bool
}

// NewReader reads and checks the header.
func NewReader(in io.Reader) (*Reader, error) {
	r := &Reader{r: bufio.NewReaderSize(in, 1<<20)}
	// Only an input that does not start as a trace is read further, to say
	// what it is: a live pipe's header is read as soon as it is there.
	if start, _ := r.r.Peek(len(Magic)); !damagedMagic(start) {
		start, _ = r.r.Peek(sniffLen)
		if err := Identify(start); err != nil {
			return nil, err
		}
	}
	fixed := make([]byte, fileHeaderFixedLen)
	if n, err := io.ReadFull(r.r, fixed); err != nil {
		return nil, &FormatError{Offset: int64(n), Msg: "input ends inside the file header"}
	}
	o, n, err := parseHeaderFixed(fixed)
	if err != nil {
		return nil, &FormatError{Offset: 0, Msg: err.Error()}
	}
	rest := make([]byte, n+4)
	if _, err := io.ReadFull(r.r, rest); err != nil {
		return nil, &FormatError{Offset: fileHeaderFixedLen, Msg: "input ends inside the file header"}
	}
	sum := crc32.Update(crc32.Checksum(fixed, castagnoli), castagnoli, rest[:n])
	if sum != o.Uint32(rest[n:]) {
		return nil, &FormatError{Offset: 0, Msg: "file header fails its checksum"}
	}
	if err := r.Header.unmarshalBody(o, rest[:n]); err != nil {
		return nil, &FormatError{Offset: fileHeaderFixedLen, Msg: err.Error()}
	}
	r.order = o
	r.off = int64(fileHeaderFixedLen + len(rest))
	return r, nil
}

// ByteOrder is the order the records are encoded in.
func (r *Reader) ByteOrder() ByteOrder { return r.order }

// Offset is how many bytes of the input were consumed.
func (r *Reader) Offset() int64 { return r.off }

// Next returns the next record; io.EOF at a clean end, *TruncatedError for a
// torn tail and *FormatError for damage. Records before an error were valid.
// A damaged block (a flipped byte fails its checksum) costs only itself:
// Next reads on from the next intact block and returns the damage, with
// where it resumed, at the end of the input.
func (r *Reader) Next() (Record, error) {
	for r.remaining == 0 {
		err := r.readBlock()
		var ferr *FormatError
		switch {
		case err == nil:
			if r.lost {
				r.lost = false
				if r.damage.Resumed == 0 {
					r.damage.Resumed, r.damage.Skipped = r.blockOff, r.blockOff-r.damage.Offset
				}
			}
		case errors.As(err, &ferr):
			if r.damage == nil {
				r.damage = ferr
			} else if !r.lost {
				r.damage.More++
			}
			r.lost = true
			if !r.seekBlock() {
				return Record{}, r.damage
			}
		case r.damage != nil:
			// The end, or a torn tail, after damage: the damage is the news.
			return Record{}, r.damage
		default:
			return Record{}, err
		}
	}
	rec, n, err := nextRecord(r.order, r.block[r.pos:], r.blockOff+blockHeaderLen+int64(r.pos))
	if err != nil {
		return Record{}, err
	}
	r.pos += n
	r.remaining--
	if r.remaining == 0 && r.pos != len(r.block) {
		return Record{}, &FormatError{Offset: rec.Offset, Msg: "block holds more bytes than its records"}
	}
	return rec, nil
}

// nextRecord decodes the record at the start of rest, found at offset off,
// and says how many bytes it takes.
func nextRecord(o ByteOrder, rest []byte, off int64) (Record, int, error) {
	if len(rest) < recordHeaderLen {
		return Record{}, 0, &FormatError{Offset: off, Msg: "record header overruns its block"}
	}
	typ := o.Uint16(rest)
	n := int(o.Uint32(rest[4:]))
	if n < recordHeaderLen || align(n) > len(rest) {
		return Record{}, 0, &FormatError{Offset: off, Msg: fmt.Sprintf("record length %d does not fit its block", n)}
	}
	return Record{Type: typ, Body: rest[recordHeaderLen:n], Offset: off}, align(n), nil
}

// checkBlockHeader checks a block header found at offset start and returns
// its payload length, checksum and record count.
func checkBlockHeader(o ByteOrder, hdr []byte, start int64) (size, sum, count uint32, err error) {
	if string(hdr[:4]) != blockMagic {
		return 0, 0, 0, &FormatError{Offset: start, Msg: fmt.Sprintf("no block starts here (found %q)", hdr[:4])}
	}
	size = o.Uint32(hdr[4:])
	if size > MaxBlockPayload || size%recordAlign != 0 {
		return 0, 0, 0, &FormatError{Offset: start, Msg: fmt.Sprintf("block length %d is invalid", size)}
	}
	count = o.Uint32(hdr[12:])
	if count == 0 {
		return 0, 0, 0, &FormatError{Offset: start, Msg: "block holds no records"}
	}
	return size, o.Uint32(hdr[8:]), count, nil
}

// BlockRecords calls fn with each record of one whole block, as a Writer
// writes it in one Write: what sees a recording block by block (rotation,
// the flight recorder, the agent) reads it in place. Bodies alias block.
func BlockRecords(o ByteOrder, block []byte, fn func(Record) error) error {
	if len(block) < blockHeaderLen {
		return &FormatError{Offset: 0, Msg: "block shorter than its header"}
	}
	size, sum, count, err := checkBlockHeader(o, block, 0)
	if err != nil {
		return err
	}
	payload := block[blockHeaderLen:]
	if int(size) != len(payload) {
		return &FormatError{Offset: 0, Msg: fmt.Sprintf("block of %d bytes says it holds %d", len(payload), size)}
	}
	if crc32.Checksum(payload, castagnoli) != sum {
		return &FormatError{Offset: 0, Msg: "block fails its checksum"}
	}
	pos := 0
	for i := uint32(0); i < count; i++ {
		rec, n, err := nextRecord(o, payload[pos:], int64(blockHeaderLen+pos))
		if err != nil {
			return err
		}
		pos += n
		if err := fn(rec); err != nil {
			return err
		}
	}
	if pos != len(payload) {
		return &FormatError{Offset: 0, Msg: "block holds more bytes than its records"}
	}
	return nil
}

// seekBlock moves to the next place a block's magic appears, and says
// whether one does before the end of the input.
func (r *Reader) seekBlock() bool {
	for {
		b, err := r.r.Peek(len(blockMagic))
		if err != nil {
			return false
		}
		if string(b) == blockMagic {
			return true
		}
		r.r.Discard(1)
		r.off++
	}
}

func (r *Reader) readBlock() error {
	var hdr [blockHeaderLen]byte
	start := r.off
	n, err := io.ReadFull(r.r, hdr[:])
	r.off += int64(n)
	if err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return &TruncatedError{Offset: start, TornBytes: int64(n)}
		}
		return fmt.Errorf("reading trace at offset %d: %w", r.off, err)
	}
	size, sum, count, err := checkBlockHeader(r.order, hdr[:], start)
	if err != nil {
		return err
	}
	if cap(r.block) < int(size) {
		r.block = make([]byte, size)
	}
	r.block = r.block[:size]
	m, err := io.ReadFull(r.r, r.block)
	r.off += int64(m)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &TruncatedError{Offset: start, TornBytes: int64(n + m)}
		}
		return fmt.Errorf("reading trace at offset %d: %w", r.off, err)
	}
	if crc32.Checksum(r.block, castagnoli) != sum {
		return &FormatError{Offset: start, Msg: "block fails its checksum"}
	}
	r.remaining = count
	r.blockOff = start
	r.pos = 0
	return nil
}
