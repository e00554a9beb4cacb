package event

import (
	"testing"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// Every family of the ABI has its name.
func TestEveryFamilyIsNamed(t *testing.T) {
	seen := map[string]bool{}
	for id := range uint16(wire.EventFamilyFAMILY_MAX) {
		name := FamilyName(id)
		if familyNames[id] == "" || seen[name] {
			t.Errorf("family %d is named %q", id, name)
		}
		seen[name] = true
	}
	if got := FamilyName(uint16(wire.EventFamilyFAMILY_MAX)); got != "family15" {
		t.Errorf("an unknown family is named %q", got)
	}
}
