package host

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pciIRQs lists the MSI vectors of the PCI function at bus (ethtool -i's
// bus-info; a virtio NIC reports its PCI function's), from the global
// /sys/bus/pci: /sys/class/net shows the namespace sysfs was mounted in,
// not the one a thread entered.
func pciIRQs(bus string) []int {
	if bus == "" || strings.ContainsAny(bus, "/ ") {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join("/sys/bus/pci/devices", bus, "msi_irqs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// InterruptCounts reads /proc/interrupts: per numbered interrupt, its count
// on each CPU.
func InterruptCounts() (map[int][]uint64, error) {
	f, err := os.Open("/proc/interrupts")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseInterrupts(f)
}

// ParseInterrupts parses /proc/interrupts' text: a header of CPU names,
// then "N: count count ... chip name" lines (named ones such as LOC: are
// not a device's and are skipped).
func ParseInterrupts(r io.Reader) (map[int][]uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	if !sc.Scan() {
		return nil, sc.Err()
	}
	cpus := len(strings.Fields(sc.Text()))
	out := map[int][]uint64{}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		irq, err := strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		if err != nil {
			continue
		}
		counts := make([]uint64, 0, cpus)
		for _, v := range f[1:min(len(f), cpus+1)] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				break
			}
			counts = append(counts, n)
		}
		out[irq] = counts
	}
	return out, sc.Err()
}
