package host

import (
	"fmt"
)

// Settings are what a run's host was set to: what compare diffs between two
// runs (kernel, CPU mitigations, and per namespace the sysctls and devices).
type Settings struct {
	Kernel      string          `json:"kernel"`
	Mitigations []Mitigation    `json:"mitigations,omitempty"`
	Namespaces  []NetnsSettings `json:"namespaces,omitempty"`
}

// NetnsSettings is one namespace's sysctls and devices.
type NetnsSettings struct {
	Name    string            `json:"name"`
	Sysctls map[string]string `json:"sysctls,omitempty"`
	Devices []DeviceSettings  `json:"devices,omitempty"`
}

// DeviceSettings are what a device is set to, without its counters.
type DeviceSettings struct {
	Name      string          `json:"name"`
	Kind      string          `json:"kind"`
	MTU       int             `json:"mtu"`
	Driver    string          `json:"driver,omitempty"`
	SpeedMbps int             `json:"speed_mbps,omitempty"`
	Features  map[string]bool `json:"features,omitempty"`
	Qdiscs    []QdiscSettings `json:"qdiscs,omitempty"`
}

// QdiscSettings are a qdisc's or shaping class's kind, place and rate.
type QdiscSettings struct {
	Kind    string `json:"kind"`
	Handle  string `json:"handle"`
	Parent  string `json:"parent"`
	RateBps uint64 `json:"rate_bytes_per_second,omitempty"`
}

// Settings drops a device's counters.
func (d *Device) Settings() DeviceSettings {
	s := DeviceSettings{Name: d.Name, Kind: d.Kind, MTU: d.MTU, Driver: d.Driver, SpeedMbps: d.SpeedMbps, Features: d.Features}
	for _, q := range d.Qdiscs {
		s.Qdiscs = append(s.Qdiscs, QdiscSettings{q.Kind, q.Handle, q.Parent, q.RateBps})
	}
	return s
}

// ReadSettings reads the settings of this process's namespace and every
// named one; namespaces it cannot read are left out with a note.
func ReadSettings() (*Settings, []string) {
	s := &Settings{Kernel: ReadIdentity().Kernel}
	var notes []string
	if m, err := ReadMitigations(MitigationsDir); err == nil {
		s.Mitigations = m
	} else {
		notes = append(notes, err.Error())
	}
	read := func(name string) error {
		devs, err := ReadDevices()
		if err != nil {
			return err
		}
		ns := NetnsSettings{Name: name, Sysctls: ReadSysctls(NetSysctls)}
		for i := range devs {
			ns.Devices = append(ns.Devices, devs[i].Settings())
		}
		s.Namespaces = append(s.Namespaces, ns)
		return nil
	}
	if err := read(SelfNetnsName); err != nil {
		notes = append(notes, fmt.Sprintf("netns %s: %v", SelfNetnsName, err))
	}
	for _, name := range NamedNetns() {
		ns, err := OpenNetns(name)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		if err := ns.Do(func() error { return read(name) }); err != nil {
			notes = append(notes, fmt.Sprintf("netns %s: %v", name, err))
		}
		ns.Close()
	}
	return s, notes
}
