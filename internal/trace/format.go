package trace

import (
	"encoding/binary"
	"hash/crc32"
)

// Magic opens every trace file.
const Magic = "SKBTRACE"

// Version is the format version this package writes and reads.
const Version = 1

// blockMagic opens every block; a reader that lost its place can tell a
// block boundary from garbage.
const blockMagic = "SKBB"

const (
	fileHeaderFixedLen = 16 // magic, byte order, reserved, version, body length
	blockHeaderLen     = 16 // magic, payload length, crc, record count
	recordHeaderLen    = 8  // type, flags, length
	recordAlign        = 8

	// MaxBlockPayload bounds a block, so a corrupt length cannot make the
	// reader allocate without limit.
	MaxBlockPayload = 16 << 20
	// blockFlushSize is when the writer closes a block even before its timer.
	blockFlushSize = 256 << 10
	maxHeaderBody  = 64 << 10
)

// EndBlockLen is the size of a block that holds only an end record: what a
// file cut at a size must leave room for.
const EndBlockLen = blockHeaderLen + recordHeaderLen + 16

// Record types. Kernel events use their enum event_type value (1..0xff);
// metadata written by user space uses 0x100 and up.
const (
	RecordNetns  uint16 = 0x100 // a network namespace's inode and name
	RecordLoss   uint16 = 0x101 // events the kernel could not queue
	RecordEnd    uint16 = 0x102 // the recording ended normally
	RecordEnum   uint16 = 0x103 // names of a kernel enum's values, from the recording kernel's BTF
	RecordSym    uint16 = 0x104 // a kernel text address and its symbol+offset
	RecordSample uint16 = 0x105 // per-packet families attached only part of each interval
	// RecordSettings is the host's settings when the recording began, as
	// JSON (internal/host.Settings): what skbtrace compare diffs.
	RecordSettings uint16 = 0x106
	// RecordResume says the events from a sequence number on follow, and
	// those below it that the file lacks were left out on purpose: an
	// earlier file of a rotation, or the time between two flight-recorder
	// windows.
	RecordResume uint16 = 0x107
	// RecordTrigger names a trigger that fired and opened (or extended) the
	// flight-recorder window that follows.
	RecordTrigger uint16 = 0x108
)

// Causes of a RecordResume.
const (
	ResumeRotation uint32 = 1 // the events before are in the previous file
	ResumeWindow   uint32 = 2 // a flight-recorder window, or an agent's, begins
)

// Enums named by RecordEnum.
const (
	EnumDropReason  uint16 = 1 // enum skb_drop_reason
	EnumResetReason uint16 = 2 // enum sk_rst_reason
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ByteOrder encodes and decodes the integers of a trace.
type ByteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// byteOrderMark is the byte at offset 8 of the header.
func byteOrderMark(o ByteOrder) byte {
	if isBigEndian(o) {
		return 'B'
	}
	return 'L'
}

// NativeOrder is the byte order of the machine running this code, which is
// the order the kernel writes events in.
var NativeOrder ByteOrder = binary.NativeEndian

// IsNative says whether o is the order of this machine.
func IsNative(o ByteOrder) bool { return isBigEndian(o) == isBigEndian(NativeOrder) }

func isBigEndian(o ByteOrder) bool {
	var b [2]byte
	o.PutUint16(b[:], 1)
	return b[0] == 0
}

func align(n int) int { return (n + recordAlign - 1) &^ (recordAlign - 1) }
