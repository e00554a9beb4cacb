// Package units is the one place for the house style of numbers in what a
// user reads, the iperf3 user's: sizes in bytes with binary (IEC) prefixes
// ("384.0 KiB"), rates in SI bits per second ("9.41 Gbit/s"), durations with
// a space before the unit ("273 us", "4.1 ms", "2.31 s"), shares with a space
// before the sign ("85 %") and counts that agree with their noun ("1 event").
// JSON and columns labelled in bytes keep raw numbers: those are data.
package units

import (
	"fmt"
	"math"
	"time"
)

// Bytes prints a byte count with a binary prefix: 999 B, 384.0 KiB,
// 4.00 MiB, 1.56 GiB (ethtool, ip and the kernel's buffer sizes are binary).
func Bytes(n uint64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.2f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// SignedBytes is Bytes of a count that may be negative (a file's size
// before it is known, a difference).
func SignedBytes(n int64) string {
	if n < 0 {
		return "-" + Bytes(uint64(-n))
	}
	return Bytes(uint64(n))
}

// Bits prints a rate in bits per second: 9.41 Gbit/s, 439.02 Mbit/s.
func Bits(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.2f Mbit/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.1f kbit/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f bit/s", bps)
}

// Duration prints a duration with a space before the unit, in at most
// three significant digits: 850 ns, 4.5 us, 273 us, 4.1 ms, 27.3 ms, 2.31 s,
// 225 s. Go's own form, "90µs" or "1.5ms", is not the house style.
func Duration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	v := float64(d)
	unit := "s"
	switch {
	case v < 999.5:
		return fmt.Sprintf("%s%d ns", sign, int64(d))
	case v < 999.5e3:
		v, unit = v/1e3, "us"
	case v < 999.5e6:
		v, unit = v/1e6, "ms"
	default:
		v /= 1e9
	}
	prec := 1
	switch {
	case v >= 99.95:
		prec = 0
	case unit == "s" && v < 9.995:
		prec = 2
	}
	return fmt.Sprintf("%s%.*f %s", sign, prec, v, unit)
}

// Percent prints a share (0.85) as a percentage: 85 %.
func Percent(share float64) string {
	return fmt.Sprintf("%.0f %%", share*100)
}

// SignedPercent prints a change (0.85, -0.1) as a signed percentage:
// +85 %, -10 %.
func SignedPercent(change float64) string {
	return fmt.Sprintf("%+.0f %%", change*100)
}

// Count prints a count with its noun in agreement: 1 event, 2 events,
// 0 events.
func Count[N ~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Short prints a measure in at most four significant digits with a decimal
// prefix: 10.4 k, 1.96 G, 7.241, 0.0123.
func Short(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return fmt.Sprintf("%.3g G", v/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.3g M", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3g k", v/1e3)
	case a >= 1 || a == 0:
		return fmt.Sprintf("%.4g", v)
	}
	return fmt.Sprintf("%.3g", v)
}
