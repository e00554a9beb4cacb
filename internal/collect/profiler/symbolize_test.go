package profiler

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// testSym is a symbol of a hand-made ELF file.
type testSym struct {
	name        string
	typ         elf.SymType
	value, size uint64
}

// Layout of the hand-made ELF file: the text is at file offset 0x1000 but
// address 0x3000, as in a PIE or shared library whose segments the linker
// spread apart, so that a lookup that mixes up the two fails.
const (
	textOff   = 0x1000
	textAddr  = 0x3000
	textBytes = 0x1000
)

// writeTestELF writes an x86-64 shared object with a header segment, a
// text segment and the given symbols in .symtab and .dynsym.
func writeTestELF(t *testing.T, symtab, dynsym []testSym) string {
	t.Helper()
	le := binary.LittleEndian
	var b bytes.Buffer
	put := func(v any) {
		if err := binary.Write(&b, le, v); err != nil {
			t.Fatal(err)
		}
	}
	padTo := func(off int) {
		if b.Len() > off {
			t.Fatalf("ELF layout overlaps at %#x", off)
		}
		b.Write(make([]byte, off-b.Len()))
	}
	// Symbols and their names.
	symBytes := func(syms []testSym, shndx uint16) (tab, str []byte) {
		var tb bytes.Buffer
		str = []byte{0}
		binary.Write(&tb, le, elf.Sym64{})
		for _, s := range syms {
			binary.Write(&tb, le, elf.Sym64{Name: uint32(len(str)), Info: elf.ST_INFO(elf.STB_GLOBAL, s.typ),
				Shndx: shndx, Value: s.value, Size: s.size})
			str = append(append(str, s.name...), 0)
		}
		return tb.Bytes(), str
	}
	symtabB, strtabB := symBytes(symtab, 1)
	dynsymB, dynstrB := symBytes(dynsym, 1)
	shstr := []byte("\x00.text\x00.symtab\x00.strtab\x00.dynsym\x00.dynstr\x00.shstrtab\x00")
	shname := func(n string) uint32 { return uint32(bytes.Index(shstr, []byte("\x00"+n+"\x00")) + 1) }

	symtabOff := textOff + textBytes
	strtabOff := symtabOff + len(symtabB)
	dynsymOff := (strtabOff + len(strtabB) + 7) &^ 7
	dynstrOff := dynsymOff + len(dynsymB)
	shstrOff := dynstrOff + len(dynstrB)
	shOff := (shstrOff + len(shstr) + 7) &^ 7
	sections := []elf.Section64{
		{},
		{Name: shname(".text"), Type: uint32(elf.SHT_PROGBITS), Flags: uint64(elf.SHF_ALLOC | elf.SHF_EXECINSTR),
			Addr: textAddr, Off: textOff, Size: textBytes, Addralign: 16},
		{Name: shname(".symtab"), Type: uint32(elf.SHT_SYMTAB), Off: uint64(symtabOff), Size: uint64(len(symtabB)),
			Link: 3, Info: 1, Addralign: 8, Entsize: elf.Sym64Size},
		{Name: shname(".strtab"), Type: uint32(elf.SHT_STRTAB), Off: uint64(strtabOff), Size: uint64(len(strtabB)),
			Addralign: 1},
		{Name: shname(".dynsym"), Type: uint32(elf.SHT_DYNSYM), Flags: uint64(elf.SHF_ALLOC), Off: uint64(dynsymOff),
			Size: uint64(len(dynsymB)), Link: 5, Info: 1, Addralign: 8, Entsize: elf.Sym64Size},
		{Name: shname(".dynstr"), Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Off: uint64(dynstrOff),
			Size: uint64(len(dynstrB)), Addralign: 1},
		{Name: shname(".shstrtab"), Type: uint32(elf.SHT_STRTAB), Off: uint64(shstrOff), Size: uint64(len(shstr)),
			Addralign: 1},
	}

	var ident [elf.EI_NIDENT]byte
	copy(ident[:], elf.ELFMAG)
	ident[elf.EI_CLASS], ident[elf.EI_DATA], ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	put(elf.Header64{Ident: ident, Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64),
		Version: uint32(elf.EV_CURRENT), Phoff: 64, Shoff: uint64(shOff), Ehsize: 64, Phentsize: 56, Phnum: 2,
		Shentsize: 64, Shnum: uint16(len(sections)), Shstrndx: uint16(len(sections) - 1)})
	put(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R), Off: 0, Vaddr: 0, Paddr: 0,
		Filesz: textOff, Memsz: textOff, Align: 0x1000})
	put(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Off: textOff, Vaddr: textAddr,
		Paddr: textAddr, Filesz: textBytes, Memsz: textBytes, Align: 0x1000})
	padTo(textOff)
	b.Write(bytes.Repeat([]byte{0xcc}, textBytes))
	b.Write(symtabB)
	b.Write(strtabB)
	padTo(dynsymOff)
	b.Write(dynsymB)
	b.Write(dynstrB)
	b.Write(shstr)
	padTo(shOff)
	for _, s := range sections {
		put(s)
	}
	file := filepath.Join(t.TempDir(), "libtest.so")
	if err := os.WriteFile(file, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return file
}

// testLib is a library with the kinds of symbols readELFSymbols must tell
// apart.
func testLib(t *testing.T) string {
	return writeTestELF(t,
		[]testSym{
			{"send_loop", elf.STT_FUNC, 0x3100, 0x80},
			{"recv_loop", elf.STT_FUNC, 0x3200, 0x40},
			{"size_unknown", elf.STT_FUNC, 0x3300, 0}, // hand-written assembly often has no size
			{"a_table", elf.STT_OBJECT, 0x3400, 0x100},
			{"imported", elf.STT_FUNC, 0, 0}, // undefined: resolved in another file
		},
		[]testSym{
			{"exported_only", elf.STT_FUNC, 0x3500, 0x10},
			{"send_loop", elf.STT_FUNC, 0x3100, 0x80}, // exported too: one symbol
		})
}

func TestELFLookup(t *testing.T) {
	e, err := readELFSymbols(testLib(t))
	if err != nil {
		t.Fatal(err)
	}
	// Offsets in the file, as the symbolizer computes them from a mapping.
	for off, want := range map[uint64]string{
		textOff + 0x100:            "send_loop",
		textOff + 0x17f:            "send_loop",
		textOff + 0x180:            "", // between two functions
		textOff + 0x200:            "recv_loop",
		textOff + 0x300:            "size_unknown",
		textOff + 0x301:            "",
		textOff + 0x400:            "", // data, not code
		textOff + 0x508:            "exported_only",
		textOff + 0x600:            "",
		0x100:                      "", // in the header segment, below every function
		textOff + textBytes + 0x10: "", // past every segment
	} {
		if got := e.lookup(off); got != want {
			t.Errorf("lookup(%#x) = %q, want %q", off, got, want)
		}
	}
	if n := len(e.names); n != 4 {
		t.Errorf("%d functions %v, want 4 (no data, no undefined, no duplicate)", n, e.names)
	}
}

func TestReadELFSymbolsErrors(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stripped := writeTestELF(t, []testSym{{"a_table", elf.STT_OBJECT, 0x3400, 0x100}}, nil)
	for name, path := range map[string]string{
		"not ELF":     script,
		"missing":     filepath.Join(dir, "missing"),
		"no function": stripped,
	} {
		if e, err := readELFSymbols(path); err == nil {
			t.Errorf("%s: readELFSymbols = %v, want an error", name, e.names)
		}
	}
}

// A Go binary is laid out by Go's linker, not by the hand-made file above:
// its functions must be found too. go test strips its own binary (-s -w),
// so the test builds one unless run from a binary built with go test -c.
func TestELFLookupGoBinary(t *testing.T) {
	path, name := goBinaryWithSymbols(t)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var sym elf.Symbol
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			sym = s
		}
	}
	if sym.Size < 2 {
		t.Fatalf("%s has no function %s with a size", path, name)
	}
	var off uint64
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && sym.Value >= p.Vaddr && sym.Value < p.Vaddr+p.Filesz {
			off, found = sym.Value-p.Vaddr+p.Off, true
		}
	}
	if !found {
		t.Fatalf("%s of %s is in no loadable segment", name, path)
	}
	e, err := readELFSymbols(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []uint64{off, off + sym.Size/2, off + sym.Size - 1} {
		if got := e.lookup(o); got != name {
			t.Errorf("lookup(%#x) = %q, want %q (at %#x, %d bytes)", o, got, name, off, sym.Size)
		}
	}
}

// goBinaryWithSymbols is this test binary if it has a symbol table, or a
// small Go program built for the test, and a function in it.
func goBinaryWithSymbols(t *testing.T) (path, fn string) {
	t.Helper()
	if exe, err := os.Executable(); err == nil {
		if f, err := elf.Open(exe); err == nil {
			_, err := f.Symbols()
			f.Close()
			if err == nil {
				return exe, "github.com/skbtrace/skbtrace/internal/profile.readELFSymbols"
			}
		}
	}
	// This test binary has no symbols: go builds a program that has.
	goBin := testenv.Tool(t, "go")
	dir := t.TempDir()
	src := "package main\n\nfunc main() { println(\"hello\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "hello")
	cmd := exec.Command(goBin, "build", "-o", path, "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a Go program: %v\n%s", err, out)
	}
	return path, "main.main"
}

func TestUserSymbolizerResolve(t *testing.T) {
	lib := testLib(t)
	// The kernel maps the text segment at a random base, from the page of
	// its first byte; the mapping's offset is that page's in the file.
	const base = 0x7f3b2a000000
	text := host.Mapping{Start: base + textAddr, End: base + textAddr + textBytes, Offset: textOff, Path: lib}
	header := host.Mapping{Start: base, End: base + textOff, Offset: 0, Path: lib}

	tgid := uint32(os.Getpid())
	u := newUserSymbolizer()
	u.mappings[tgid] = []host.Mapping{
		header,
		text,
		{Start: 0x7f3b30000000, End: 0x7f3b30001000}, // JIT code
		{Start: 0x7f3b31000000, End: 0x7f3b31010000, Path: "/nonexistent/libgone.so.1"},
		{Start: 0x7ffd5a1f2000, End: 0x7ffd5a1f4000, Path: "[vdso]"},
	}
	cases := []struct {
		name       string
		tgid       uint32
		addr       uint64
		fn, inFile string
	}{
		{"function", tgid, base + 0x3100, "send_loop", lib},
		{"inside a function", tgid, base + 0x3220, "recv_loop", lib},
		{"exported only", tgid, base + 0x3500, "exported_only", lib},
		// Mapped but no function: the file at least.
		{"between functions", tgid, base + 0x3190, "[libtest.so]", lib},
		{"header", tgid, base + 0x10, "[libtest.so]", lib},
		{"anonymous", tgid, 0x7f3b30000010, "[anonymous]", "[anonymous]"},
		{"unreadable file", tgid, 0x7f3b31000100, "[libgone.so.1]", "/nonexistent/libgone.so.1"},
		{"vdso", tgid, 0x7ffd5a1f2100, "[vdso]", "[vdso]"},
		// End is the first address past a mapping.
		{"end of the vdso", tgid, 0x7ffd5a1f4000, "[unknown]", ""},
		{"outside every mapping", tgid, 0x1000, "[unknown]", ""},
		{"unknown process", tgid + 1, base + 0x3100, "[unknown]", ""},
	}
	for _, c := range cases {
		if fn, file := u.resolve(c.tgid, c.addr); fn != c.fn || file != c.inFile {
			t.Errorf("%s: resolve(%d, %#x) = %q, %q; want %q, %q", c.name, c.tgid, c.addr, fn, file, c.fn, c.inFile)
		}
	}
}
