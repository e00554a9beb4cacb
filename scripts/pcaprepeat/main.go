// Command pcaprepeat writes a classic pcap's packets N times over into a new
// file, each pass later than the one before by the capture's span plus a
// millisecond: a capture N times as large with the same flows, for
// pcap-bench-capture.sh's memory check.
//
//	go run ./scripts/pcaprepeat -n 10 IN OUT
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	n := flag.Int("n", 10, "how many times to write the packets")
	flag.Parse()
	if flag.NArg() != 2 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: pcaprepeat [-n N] IN OUT")
		os.Exit(2)
	}
	if err := repeat(flag.Arg(0), flag.Arg(1), *n); err != nil {
		fmt.Fprintln(os.Stderr, "pcaprepeat:", err)
		os.Exit(1)
	}
}

func repeat(in, out string, n int) error {
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("opening the capture: %w", err)
	}
	defer f.Close()
	hdr := make([]byte, 24)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return fmt.Errorf("reading the pcap header: %w", err)
	}
	var unitsPerSec int64
	switch m := binary.LittleEndian.Uint32(hdr); {
	case m == 0xa1b2c3d4 || m == 0xd4c3b2a1:
		unitsPerSec = 1e6
	case m == 0xa1b23c4d || m == 0x4d3cb2a1:
		unitsPerSec = 1e9
	default:
		return fmt.Errorf("%s is not a classic pcap (magic %#08x)", in, m)
	}
	order := binary.ByteOrder(binary.LittleEndian)
	if binary.BigEndian.Uint32(hdr) == 0xa1b2c3d4 || binary.BigEndian.Uint32(hdr) == 0xa1b23c4d {
		order = binary.BigEndian
	}
	ts := func(rec []byte) int64 { return int64(order.Uint32(rec))*unitsPerSec + int64(order.Uint32(rec[4:])) }

	o, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("creating the output: %w", err)
	}
	w := bufio.NewWriterSize(o, 1<<20)
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("writing the pcap header: %w", err)
	}
	var first, last int64
	rec := make([]byte, 16)
	frame := make([]byte, 262144)
	for pass := 0; pass < n; pass++ {
		if _, err := f.Seek(24, io.SeekStart); err != nil {
			return fmt.Errorf("rewinding the capture: %w", err)
		}
		r := bufio.NewReaderSize(f, 1<<20)
		shift := int64(pass) * (last - first + unitsPerSec/1000)
		for i := 0; ; i++ {
			if _, err := io.ReadFull(r, rec); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("reading record %d: %w", i+1, err)
			}
			t := ts(rec)
			if pass == 0 {
				if i == 0 {
					first = t
				}
				last = t
			}
			t += shift
			order.PutUint32(rec, uint32(t/unitsPerSec))
			order.PutUint32(rec[4:], uint32(t%unitsPerSec))
			size := int(order.Uint32(rec[8:]))
			if size > len(frame) {
				return fmt.Errorf("record %d: %d bytes, more than any snaplen", i+1, size)
			}
			if _, err := io.ReadFull(r, frame[:size]); err != nil {
				return fmt.Errorf("reading record %d: %w", i+1, err)
			}
			if _, err := w.Write(rec); err != nil {
				return fmt.Errorf("writing the output: %w", err)
			}
			if _, err := w.Write(frame[:size]); err != nil {
				return fmt.Errorf("writing the output: %w", err)
			}
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	return o.Close()
}
