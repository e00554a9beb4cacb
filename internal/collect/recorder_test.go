package collect

import (
	"slices"
	"testing"

	"github.com/skbtrace/skbtrace/internal/probe"
)

// runningAsListed gives each named family the first alternative of every
// slot and optional slot, as a kernel with all the tracepoints attaches them.
func runningAsListed(t *testing.T, names ...string) []Running {
	t.Helper()
	var out []Running
	for _, name := range names {
		i := slices.IndexFunc(Families, func(f Family) bool { return f.Name == name })
		if i < 0 {
			t.Fatalf("no family %s", name)
		}
		run := Running{Family: Families[i]}
		for _, slot := range Families[i].Hooks {
			if !slices.Contains(run.Hooks, slot[0]) {
				run.Hooks = append(run.Hooks, slot[0])
			}
		}
		for _, o := range Families[i].Optional {
			run.Hooks = append(run.Hooks, o.Hooks[0])
		}
		out = append(out, run)
	}
	return out
}

func TestSamplingPausesWhatItSharesWithAnAlwaysOnFamily(t *testing.T) {
	sockSend := btf(probe.SkbtraceProgSockSend, "sock_send_length")
	sockRecv := btf(probe.SkbtraceProgSockIoRecv, "sock_recv_length")

	r := &Recording{Running: runningAsListed(t, "tcp_sendlim", "sock_io", "dev_xmit")}
	r.planSampling()
	if slices.Contains(r.sampled, sockSend) || !slices.Contains(r.sampled, sockRecv) {
		t.Fatalf("with tcp_sendlim on, sampling detaches %v; want sock_recv_length but not sock_send_length", r.sampled)
	}
	if !slices.Equal(r.paused, []string{probe.SkbtraceVarSockIoSendPaused}) || !slices.Equal(r.sampledFamilies, []string{"sock_io", "dev_xmit"}) {
		t.Fatalf("paused %v, sampled families %v", r.paused, r.sampledFamilies)
	}

	alone := &Recording{Running: runningAsListed(t, "sock_io")}
	alone.planSampling()
	if !slices.Contains(alone.sampled, sockSend) || alone.paused != nil {
		t.Fatalf("sock_io alone: sampled %v, paused %v; want sock_send_length detached, nothing paused", alone.sampled, alone.paused)
	}
}
