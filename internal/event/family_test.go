package event

import (
	"fmt"
	"testing"

	"github.com/skbtrace/skbtrace/internal/wire"
)

// Every family of the ABI is registered once, by a name of its own, and
// every event type is some family's.
func TestEveryFamilyIsRegistered(t *testing.T) {
	seen := map[string]bool{}
	for id := range uint16(wire.EventFamilyFAMILY_MAX) {
		name := FamilyName(id)
		if f, ok := ByName(name); !ok || f.ID != id || seen[name] {
			t.Errorf("family %d is named %q", id, name)
		}
		seen[name] = true
	}
	if got := FamilyName(uint16(wire.EventFamilyFAMILY_MAX)); got != fmt.Sprintf("family%d", wire.EventFamilyFAMILY_MAX) {
		t.Errorf("an unknown family is named %q", got)
	}
	for typ := TypeTCPConn; typ < Type(wire.EventTypeEVENT_MAX); typ++ {
		k := typ.Kind()
		if k == nil || k.Type != typ || k.decode == nil {
			t.Errorf("event type %d has no decoder", typ)
		}
	}
	if got := Type(wire.EventTypeEVENT_MAX).Action(); got != "unknown" {
		t.Errorf("an unknown event type is %q", got)
	}
}
