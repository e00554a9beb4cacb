package host

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// deviceIRQs lists a network device's interrupt numbers: the MSI vectors of
// its PCI function, or of its parent's for a virtio NIC (the virtio device
// sits under the PCI one). Read in the device's namespace: sysfs shows a
// namespace's own devices only.
func deviceIRQs(dev string) []int {
	var out []int
	for _, dir := range []string{"device/msi_irqs", "device/../msi_irqs"} {
		entries, err := os.ReadDir(filepath.Join("/sys/class/net", dev, dir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, n)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
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
