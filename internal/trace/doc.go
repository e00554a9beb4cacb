// Package trace reads and writes skbtrace's binary trace file.
//
// A file is a header (magic, byte order, version, host metadata and the
// clock anchor) followed by blocks. Each block carries a CRC32-C of its
// records and is written with one write call, so after a crash every
// complete block is readable and a torn last block is detected and measured.
// Records are type- and length-prefixed and 8-byte aligned; kernel events are
// stored verbatim as the structs of bpf/include/events.h. docs/format.md is
// the specification.
package trace
