package trace

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// NotTraceError says an input is not a skbtrace trace at all, and what it
// seems to be: a user who gave a capture or a note learns which, not that
// a trace is damaged at some offset.
type NotTraceError struct {
	// Is says what the input is: "empty", "a pcap capture", "text (...)".
	Is string
	// Hint says what reads it instead, when something does.
	Hint string
}

func (e *NotTraceError) Error() string { return e.Named("the input") }

// Named says it of the input called name ("capture.pcap", "standard input").
func (e *NotTraceError) Named(name string) string {
	s := fmt.Sprintf("%s is %s, not a skbtrace trace", name, e.Is)
	if e.Hint != "" {
		s += ": " + e.Hint
	}
	return s
}

// sniffLen is how much of an input Identify wants to tell what it is.
const sniffLen = 512

// Identify says what an input that starts with start (up to its first
// sniffLen bytes) is, or nil when it starts as a trace does (or could: an
// input shorter than the magic that agrees with it is a trace cut short,
// and one byte off the magic a damaged trace).
func Identify(start []byte) *NotTraceError {
	if len(start) == 0 {
		return &NotTraceError{Is: "empty"}
	}
	if len(start) < len(Magic) && strings.HasPrefix(Magic, string(start)) || damagedMagic(start) {
		return nil
	}
	if is := capture(start); is != "" {
		return &NotTraceError{Is: is, Hint: "use skbtrace pcap"}
	}
	if len(start) >= 2 && start[0] == 0x1f && start[1] == 0x8b {
		return gzipped(start)
	}
	if s, ok := text(start); ok {
		return &NotTraceError{Is: fmt.Sprintf("text (it starts %q)", s)}
	}
	return &NotTraceError{Is: fmt.Sprintf("data of another kind (it starts % x)", start[:min(len(start), 8)])}
}

// damagedMagic says whether start opens with the magic or with the magic
// with one byte changed: a trace whose first block is damaged, which the
// reader reports as damage.
func damagedMagic(start []byte) bool {
	if len(start) < len(Magic) {
		return false
	}
	diff := 0
	for i := range len(Magic) {
		if start[i] != Magic[i] {
			diff++
		}
	}
	return diff <= 1
}

// capture names a pcap or pcapng capture by its magic, else "".
func capture(b []byte) string {
	if len(b) < 4 {
		return ""
	}
	switch string(b[:4]) {
	case "\xd4\xc3\xb2\xa1", "\xa1\xb2\xc3\xd4", "\x4d\x3c\xb2\xa1", "\xa1\xb2\x3c\x4d": // µs and ns, either order
		return "a pcap capture"
	case "\x0a\x0d\x0d\x0a":
		return "a pcapng capture"
	}
	return ""
}

// gzipped says what a gzip stream holds, from the first bytes it unpacks.
func gzipped(b []byte) *NotTraceError {
	inner := make([]byte, len(Magic))
	if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
		if n, _ := io.ReadFull(zr, inner); n == len(inner) {
			if is := capture(inner); is != "" {
				return &NotTraceError{Is: "a gzip-compressed " + strings.TrimPrefix(is, "a "), Hint: "use skbtrace pcap"}
			}
			if string(inner) == Magic {
				return &NotTraceError{Is: "a gzip-compressed skbtrace trace", Hint: "decompress it first (gunzip)"}
			}
		}
	}
	return &NotTraceError{Is: "gzip-compressed data"}
}

// text says whether b reads as text (UTF-8 without control characters
// other than white space), and gives its first line, shortened.
func text(b []byte) (string, bool) {
	// A character cut at the end of the sniffed bytes is still text.
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || !utf8.Valid(b) {
		return "", false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' || r == 0x7f {
			return "", false
		}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSpace(line)
	if utf8.RuneCountInString(line) > 24 {
		line = string([]rune(line)[:24]) + "..."
	}
	return line, true
}
