package event

import "strconv"

// Fields receives an event's fields in order; report's text and JSON forms
// implement it, so each family lists its fields once, in its own file.
type Fields interface {
	Flag(key, v string) // the [FLAG] of the text form; key names it in JSON
	Str(key, v string)
	Bytes(key string, v []byte)
	Uint(key string, v uint64)
	Time(key string, ns int64)
	Hist(key string, v []uint64)
	Socket(s *Socket)
	// Netns names a namespace: the text form by its name (or inode), JSON
	// by its inode with the name beside it, as the socket fields are.
	Netns(inode uint32)
}

// Names resolves what events carry as numbers: namespace inodes, the
// recording kernel's drop and reset reasons, drop locations. Unknown values
// resolve to "" and print as numbers; nil Names prints numbers throughout.
type Names interface {
	NetnsName(inode uint32) string
	DropReason(v uint32) string
	ResetReason(v uint32) string
	Symbol(addr uint64) string
}

// EnumName names v by lookup in names, or prints its number.
func EnumName(names Names, v uint32, lookup func(Names, uint32) string) string {
	if names != nil {
		if n := lookup(names, v); n != "" {
			return n
		}
	}
	return strconv.FormatUint(uint64(v), 10)
}

// SymbolName names a kernel address, or prints it in hex.
func SymbolName(names Names, addr uint64) string {
	if names != nil {
		if s := names.Symbol(addr); s != "" {
			return s
		}
	}
	return "0x" + strconv.FormatUint(addr, 16)
}
