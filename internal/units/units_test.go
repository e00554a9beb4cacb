package units

import "testing"

func TestUnits(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(999), "999 B"}, {Bytes(393216), "393.2 kB"}, {Bytes(1670000000), "1.67 GB"},
		{Bits(12), "12 bit/s"}, {Bits(12000), "12.0 kbit/s"}, {Bits(439.02e6), "439.02 Mbit/s"}, {Bits(9.41e9), "9.41 Gbit/s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
