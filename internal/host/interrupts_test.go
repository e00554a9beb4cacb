package host

import (
	"slices"
	"strings"
	"testing"
)

// From a QEMU guest with two e1000e NICs: three vectors each.
const interruptsText = `           CPU0       CPU1       
  0:        142          0   IO-APIC   2-edge      timer
 32:          3          0  PCI-MSIX-0000:00:05.0   0-edge      eth0-rx-0
 33:          0          6  PCI-MSIX-0000:00:05.0   1-edge      eth0-tx-0
 35:      12345      67890  PCI-MSIX-0000:00:06.0   0-edge      eth1-rx-0
LOC:       2166       2095   Local timer interrupts
ERR:          0
`

func TestParseInterrupts(t *testing.T) {
	got, err := ParseInterrupts(strings.NewReader(interruptsText))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Errorf("got %d numbered interrupts, want 4 (named ones skipped): %v", len(got), got)
	}
	if !slices.Equal(got[35], []uint64{12345, 67890}) || !slices.Equal(got[33], []uint64{0, 6}) {
		t.Errorf("counts per CPU wrong: %v", got)
	}
}
