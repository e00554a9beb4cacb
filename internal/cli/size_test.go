package cli

import "testing"

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "64M": 64 << 20, "64MiB": 64 << 20, "64mb": 64 << 20, "1G": 1 << 30, "2 KiB": 2048, "512B": 512} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1M", "M", "1.5G", "1T", "99999999999999999999", "9000000000G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}
