package observe

import (
	"slices"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
)

// wmemLimits are the send buffers' limits of the namespaces whose flows
// sent: net.ipv4.tcp_wmem, the most an autotuned send buffer grows to,
// read from the namespace's /proc/sys with its other settings. Its undo
// is rendered by sndbuf-limited from what the flow needs (the number is
// the flow's, not the observer's). Where the sockets' own settings were
// not read (no BPF, a kernel before 5.9's iter/tcp), a buffer the
// application locked cannot be told from one the sysctl holds: no limit
// is read, and sndbuf-limited names neither alone.
func wmemLimits(ev *doctor.Evidence, socketsRead bool) []finding.Limit {
	if !socketsRead {
		return nil
	}
	var out []finding.Limit
	for _, ns := range ev.Namespaces {
		v := ns.Sysctls[doctor.SysctlTCPWmem]
		if v == "" {
			continue
		}
		var flows []string
		for _, f := range ev.Flows {
			if f.Netns == ns.Name && f.BytesAcked > 0 {
				if s := f.Local.String() + " " + f.Peer.String(); !slices.Contains(flows, s) {
					flows = append(flows, s)
				}
			}
		}
		if len(flows) == 0 {
			continue
		}
		out = append(out, doctor.WmemLimit(ns.Name, v, flows))
	}
	return out
}
