package host

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// ParseCPUMask parses a sysfs CPU mask (rps_cpus, xps_cpus, smp_affinity):
// hexadecimal, in comma-separated 32-bit words, the highest first.
func ParseCPUMask(s string) ([]int, error) {
	hex := strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	n, ok := new(big.Int).SetString(hex, 16)
	if !ok {
		return nil, fmt.Errorf("bad CPU mask %q", s)
	}
	var cpus []int
	for i := 0; i < n.BitLen(); i++ {
		if n.Bit(i) == 1 {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// FormatCPUMask writes CPUs as a mask sysfs takes ("2", "ff", "1,00000000").
func FormatCPUMask(cpus []int) string {
	n := new(big.Int)
	for _, c := range cpus {
		n.SetBit(n, c, 1)
	}
	hex := n.Text(16)
	// Words of 32 bits, comma-separated, as the kernel prints them.
	var words []string
	for len(hex) > 8 {
		words = append([]string{hex[len(hex)-8:]}, words...)
		hex = hex[:len(hex)-8]
	}
	return strings.Join(append([]string{hex}, words...), ",")
}

// FormatCPUList writes CPUs as a list ("0", "1,3", "0-3").
func FormatCPUList(cpus []int) string {
	s := slices.Sorted(slices.Values(cpus))
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(s[i])+"-"+strconv.Itoa(s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
