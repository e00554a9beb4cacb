package units

import (
	"testing"
	"time"
)

func TestUnits(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Bytes(0), "0 B"}, {Bytes(999), "999 B"}, {Bytes(1023), "1023 B"}, {Bytes(1024), "1.0 KiB"},
		{Bytes(393216), "384.0 KiB"}, {Bytes(4 << 20), "4.00 MiB"}, {Bytes(1670000000), "1.56 GiB"},
		{Bytes(3 << 40), "3.00 TiB"}, {SignedBytes(-2048), "-2.0 KiB"}, {SignedBytes(5), "5 B"},
		{Bits(12), "12 bit/s"}, {Bits(12000), "12.0 kbit/s"}, {Bits(439.02e6), "439.02 Mbit/s"}, {Bits(9.41e9), "9.41 Gbit/s"},
		{Duration(0), "0 ns"}, {Duration(850), "850 ns"}, {Duration(999), "999 ns"},
		{Duration(4500 * time.Nanosecond), "4.5 us"}, {Duration(90 * time.Microsecond), "90.0 us"},
		{Duration(273 * time.Microsecond), "273 us"}, {Duration(999600 * time.Nanosecond), "1.0 ms"},
		{Duration(4100 * time.Microsecond), "4.1 ms"}, {Duration(27300 * time.Microsecond), "27.3 ms"},
		{Duration(2310 * time.Millisecond), "2.31 s"}, {Duration(225 * time.Second), "225 s"},
		{Duration(-1500 * time.Microsecond), "-1.5 ms"},
		{Percent(0.85), "85 %"}, {Percent(0), "0 %"}, {SignedPercent(0.85), "+85 %"}, {SignedPercent(-0.1), "-10 %"},
		{Count(0, "event", "events"), "0 events"}, {Count(1, "event", "events"), "1 event"}, {Count(2, "window", "windows"), "2 windows"}, {Count(uint64(1), "firing", "firings"), "1 firing"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
