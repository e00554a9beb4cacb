// Package units prints sizes and rates the same way in every report.
package units

import (
	"fmt"
	"math"
)

// Bytes prints a byte count in decimal units: 393.2 kB, 1.67 GB.
func Bytes(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
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
