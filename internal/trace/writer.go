package trace

import (
	"fmt"
	"hash/crc32"
	"io"
)

// Writer appends records to a trace. It is not safe for concurrent use.
// Records are buffered into a block until Flush, which the caller should
// call at least once a second; the block is written with a single Write so a
// crash leaves whole blocks behind. The caller closes the underlying writer.
type Writer struct {
	w       io.Writer
	order   ByteOrder
	block   []byte
	records uint32
	written int64
}

// NewWriter writes the header and returns a writer positioned at the first block.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if h.ByteOrder == nil {
		h.ByteOrder = NativeOrder
	}
	hdr, err := h.marshal()
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, fmt.Errorf("writing trace header: %w", err)
	}
	tw := &Writer{w: w, order: h.ByteOrder, written: int64(len(hdr))}
	tw.resetBlock()
	return tw, nil
}

func (w *Writer) resetBlock() {
	if w.block == nil {
		w.block = make([]byte, blockHeaderLen, blockFlushSize+4096)
	}
	w.block = w.block[:blockHeaderLen]
	w.records = 0
}

// Append adds one record. body is copied.
func (w *Writer) Append(typ uint16, body []byte) error {
	n := recordHeaderLen + len(body)
	if n > MaxBlockPayload/2 {
		return fmt.Errorf("record of %d bytes is too large", n)
	}
	w.block = w.order.AppendUint16(w.block, typ)
	w.block = w.order.AppendUint16(w.block, 0)
	w.block = w.order.AppendUint32(w.block, uint32(n))
	w.block = append(w.block, body...)
	for pad := align(n) - n; pad > 0; pad-- {
		w.block = append(w.block, 0)
	}
	w.records++
	if len(w.block) >= blockFlushSize {
		return w.Flush()
	}
	return nil
}

// Flush writes the buffered records as one block.
func (w *Writer) Flush() error {
	if w.records == 0 {
		return nil
	}
	payload := w.block[blockHeaderLen:]
	copy(w.block, blockMagic)
	w.order.PutUint32(w.block[4:], uint32(len(payload)))
	w.order.PutUint32(w.block[8:], crc32.Checksum(payload, castagnoli))
	w.order.PutUint32(w.block[12:], w.records)
	if _, err := w.w.Write(w.block); err != nil {
		return fmt.Errorf("writing trace block: %w", err)
	}
	w.written += int64(len(w.block))
	w.resetBlock()
	return nil
}

// BytesWritten counts what reached the underlying writer.
func (w *Writer) BytesWritten() int64 { return w.written }

// ByteOrder is the order records must be encoded in.
func (w *Writer) ByteOrder() ByteOrder { return w.order }
