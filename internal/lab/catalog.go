package lab

import "slices"

// The lists of scenarios, by the names `lab run` takes for each.
const (
	// SetFaults is the lab's own scenario for each finding (Scenarios).
	SetFaults = "all"
	// SetVariants builds each finding's fault by other mechanisms (Variants).
	SetVariants = "variants"
	// SetNoise is healthy runs with background traffic: no warning allowed (Noise).
	SetNoise = "noise"
	// SetMatrix is all three.
	SetMatrix = "matrix"
	// SetNIC is the device faults built on real drivers (NIC), for a wire
	// of two NICs (lab run --wire); not part of the matrix.
	SetNIC = "nic"
)

// Catalog is every scenario with the list it belongs to, in the order
// `skbtrace lab list` prints them.
func Catalog() []Entry {
	var out []Entry
	for _, set := range []struct {
		name string
		list []*Scenario
	}{{SetFaults, Scenarios}, {SetVariants, Variants}, {SetNoise, Noise}, {SetNIC, NIC}} {
		for _, s := range set.list {
			out = append(out, Entry{Set: set.name, Scenario: s})
		}
	}
	return out
}

// Entry is a scenario in its list.
type Entry struct {
	Set string
	*Scenario
}

// Select resolves a name `lab run` takes: a list's name or a scenario's.
func Select(name string) ([]*Scenario, bool) {
	switch name {
	case SetFaults:
		return Scenarios, true
	case SetVariants:
		return Variants, true
	case SetNoise:
		return Noise, true
	case SetMatrix:
		return slices.Concat(Scenarios, Variants, Noise), true
	case SetNIC:
		return NIC, true
	}
	if s, ok := ByName(name); ok {
		return []*Scenario{s}, true
	}
	return nil, false
}

// ByName finds a scenario in any list.
func ByName(name string) (*Scenario, bool) {
	for _, e := range Catalog() {
		if e.Name == name {
			return e.Scenario, true
		}
	}
	return nil, false
}
