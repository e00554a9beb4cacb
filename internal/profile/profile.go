package profile

import (
	"sort"

	"github.com/skbtrace/skbtrace/internal/host"
)

// Profile is a symbolized set of stack samples and the window they cover.
type Profile struct {
	Meta    Meta
	Samples []Sample
}

// Sample is one distinct stack of one task on one CPU and how often it was seen.
type Sample struct {
	Count uint64
	Pid   uint32 // the thread
	Tgid  uint32 // its process
	CPU   int
	Comm  string
	// Kernel and User are function names, innermost first; either may be empty.
	Kernel  []string
	User    []string
	Context Context
	Phase   Phase
}

// Meta is what compare needs beside the stacks: the window, its traffic and the settings.
type Meta struct {
	Version  string         `json:"version"`
	Hostname string         `json:"hostname"`
	Kernel   string         `json:"kernel"`
	Clock    string         `json:"clock"` // cpu-clock or cycles
	Hz       int            `json:"hz"`
	Seconds  float64        `json:"seconds"`
	CPUs     []int          `json:"cpus"`
	Command  []string       `json:"command,omitempty"` // the workload profiled (-- CMD)
	Traffic  Traffic        `json:"traffic"`
	Dropped  uint64         `json:"dropped_samples,omitempty"`
	Settings *host.Settings `json:"settings,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
}

// Traffic is what the host's devices moved in the window (all namespaces).
type Traffic struct {
	Counted bool   `json:"counted"` // false when the packet counters could not attach
	TxSkbs  uint64 `json:"tx_skbs"`
	TxPkts  uint64 `json:"tx_packets"` // segments on the wire: a TSO skb counts its segments
	TxBytes uint64 `json:"tx_bytes"`
	RxSkbs  uint64 `json:"rx_skbs"`
	RxPkts  uint64 `json:"rx_packets"`
	RxBytes uint64 `json:"rx_bytes"`
}

// Packets is the packets the workload moved: on loopback and veth every
// packet is both transmitted and received, on a real NIC a sender transmits
// and a receiver receives, so the larger direction counts.
func (t Traffic) Packets() uint64 { return max(t.TxPkts, t.RxPkts) }

// Bytes is the bytes of the same direction as Packets.
func (t Traffic) Bytes() uint64 {
	if t.TxPkts >= t.RxPkts {
		return t.TxBytes
	}
	return t.RxBytes
}

// Skbs is the skbs of the same direction as Packets.
func (t Traffic) Skbs() uint64 {
	if t.TxPkts >= t.RxPkts {
		return t.TxSkbs
	}
	return t.RxSkbs
}

// Total is the number of samples.
func (p *Profile) Total() uint64 {
	var n uint64
	for _, s := range p.Samples {
		n += s.Count
	}
	return n
}

// NsPerSample is the CPU time one sample stands for: the perf event is
// opened in frequency mode, so the kernel keeps each CPU at Hz samples per
// second of its running time. (An idle CPU may go unsampled, measured here
// with cpu-clock: the window's CPU time over the samples would overstate
// the busy time.)
func (p *Profile) NsPerSample() float64 {
	if p.Meta.Hz > 0 {
		return 1e9 / float64(p.Meta.Hz)
	}
	return 0
}

// Comms are the commands that took samples outside idle, busiest first.
func (p *Profile) Comms() []CommShare {
	by := map[string]uint64{}
	var busy uint64
	for _, s := range p.Samples {
		if s.Context == Idle {
			continue
		}
		by[s.Comm] += s.Count
		busy += s.Count
	}
	var out []CommShare
	for c, n := range by {
		out = append(out, CommShare{c, float64(n) / float64(busy)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Share != out[j].Share {
			return out[i].Share > out[j].Share
		}
		return out[i].Comm < out[j].Comm
	})
	return out
}

// CommShare is a command's share of the busy samples.
type CommShare struct {
	Comm  string
	Share float64
}

// Summary is what a report keeps of a profile: the window, its traffic and
// the busy CPU time per phase (what compare needs), without the stacks.
type Summary struct {
	Clock   string            `json:"clock"`
	Hz      int               `json:"hz"`
	Seconds float64           `json:"seconds"`
	Traffic Traffic           `json:"traffic"`
	BusyNs  float64           `json:"busy_ns"`
	PhaseNs map[Phase]float64 `json:"phase_ns"`
}

// Summary sums the profile's busy CPU time per phase.
func (p *Profile) Summary() *Summary {
	s := &Summary{Clock: p.Meta.Clock, Hz: p.Meta.Hz, Seconds: p.Meta.Seconds, Traffic: p.Meta.Traffic, PhaseNs: map[Phase]float64{}}
	ns := p.NsPerSample()
	for _, smp := range p.Samples {
		if smp.Context != Idle {
			s.PhaseNs[smp.Phase] += float64(smp.Count) * ns
			s.BusyNs += float64(smp.Count) * ns
		}
	}
	return s
}
