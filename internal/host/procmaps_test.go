package host

import (
	"reflect"
	"strings"
	"testing"
)

// A python process's maps, shortened, with what a profile meets: the
// executable and its libraries, a JIT's anonymous code, a path with spaces,
// code from a deleted memfd, the vdso and the vsyscall page.
const pythonMaps = `55d0c6a00000-55d0c6a28000 r--p 00000000 fd:01 1835082                    /usr/bin/python3.12
55d0c6a28000-55d0c6d2f000 r-xp 00028000 fd:01 1835082                    /usr/bin/python3.12
55d0c6d2f000-55d0c6e0a000 r--p 0032f000 fd:01 1835082                    /usr/bin/python3.12
55d0c6e0b000-55d0c6e59000 rw-p 0040a000 fd:01 1835082                    /usr/bin/python3.12
55d0c8f1a000-55d0c8fd5000 rw-p 00000000 00:00 0                          [heap]
7f3b29e00000-7f3b2a000000 rw-p 00000000 00:00 0 
7f3b2a000000-7f3b2a028000 r--p 00000000 fd:01 1836217                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b2a028000-7f3b2a1bd000 r-xp 00028000 fd:01 1836217                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b2a1bd000-7f3b2a215000 r--p 001bd000 fd:01 1836217                    /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b2a400000-7f3b2a401000 rwxp 00000000 00:00 0 
7f3b2a500000-7f3b2a510000 r-xp 00002000 fd:01 2097233                    /opt/My App/lib/libplugin v2.so
7f3b2a600000-7f3b2a601000 r-xs 00000000 00:01 4121                       /memfd:doublemapper (deleted)
7ffd5a1c0000-7ffd5a1e1000 rw-p 00000000 00:00 0                          [stack]
7ffd5a1ee000-7ffd5a1f2000 r--p 00000000 00:00 0                          [vvar]
7ffd5a1f2000-7ffd5a1f4000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
`

func TestParseMappings(t *testing.T) {
	got, err := ParseMappings(strings.NewReader(pythonMaps))
	if err != nil {
		t.Fatal(err)
	}
	// Only code: the symbolizer looks user addresses up in these.
	want := []Mapping{
		{0x55d0c6a28000, 0x55d0c6d2f000, 0x28000, "/usr/bin/python3.12"},
		{0x7f3b2a028000, 0x7f3b2a1bd000, 0x28000, "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{0x7f3b2a400000, 0x7f3b2a401000, 0, ""},
		{0x7f3b2a500000, 0x7f3b2a510000, 0x2000, "/opt/My App/lib/libplugin v2.so"},
		{0x7f3b2a600000, 0x7f3b2a601000, 0, "/memfd:doublemapper (deleted)"},
		{0x7ffd5a1f2000, 0x7ffd5a1f4000, 0, "[vdso]"},
		{0xffffffffff600000, 0xffffffffff601000, 0, "[vsyscall]"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMappings:\n got %#v\nwant %#v", got, want)
	}
}

// A line that does not parse is skipped, not an error: the file is the
// kernel's, and the rest of it still symbolizes.
func TestParseMappingsSkipsDamagedLines(t *testing.T) {
	in := `not a mapping
zzzz-1000 r-xp 00000000 00:00 0 /bad/start
1000-2000 r-xp
1000 r-xp 00000000 00:00 0 /no/end
3000-4000 r-xp 00001000 fd:01 7 /ok
`
	got, err := ParseMappings(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{{0x3000, 0x4000, 0x1000, "/ok"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMappings = %#v, want %#v", got, want)
	}
}
