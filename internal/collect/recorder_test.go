package collect

import (
	"slices"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// runningAsListed gives each named family the first alternative of every
// slot and optional slot, as a kernel with all the tracepoints attaches them.
func runningAsListed(t *testing.T, names ...string) []Running {
	t.Helper()
	var out []Running
	for _, name := range names {
		f, ok := event.ByName(name)
		if !ok {
			t.Fatalf("no family %s", name)
		}
		run := Running{Family: f}
		for _, slot := range f.Hooks {
			if !slices.Contains(run.Hooks, slot[0]) {
				run.Hooks = append(run.Hooks, slot[0])
			}
		}
		for _, o := range f.Optional {
			run.Hooks = append(run.Hooks, o.Hooks[0])
		}
		out = append(out, run)
	}
	return out
}

func TestSamplingPausesWhatItSharesWithAnAlwaysOnFamily(t *testing.T) {
	sockSend := event.BTFHook(wire.ProgSockSend, "sock_send_length")
	sockRecv := event.BTFHook(wire.ProgSockIoRecv, "sock_recv_length")

	r := &Recording{Running: runningAsListed(t, "tcp_sendlim", "sock_io", "dev_xmit")}
	r.planSampling()
	if slices.Contains(r.sampled, sockSend) || !slices.Contains(r.sampled, sockRecv) {
		t.Fatalf("with tcp_sendlim on, sampling detaches %v; want sock_recv_length but not sock_send_length", r.sampled)
	}
	if !slices.Equal(r.paused, []string{wire.VarSockIoSendPaused}) || !slices.Equal(r.sampledFamilies, []string{"sock_io", "dev_xmit"}) {
		t.Fatalf("paused %v, sampled families %v", r.paused, r.sampledFamilies)
	}

	alone := &Recording{Running: runningAsListed(t, "sock_io")}
	alone.planSampling()
	if !slices.Contains(alone.sampled, sockSend) || alone.paused != nil {
		t.Fatalf("sock_io alone: sampled %v, paused %v; want sock_send_length detached, nothing paused", alone.sampled, alone.paused)
	}
}

// tcp_stage is paused at a window's end and its hooks linger until the
// bytes it began have ended: they are not among those the flip detaches.
func TestSamplingLetsTCPStageLinger(t *testing.T) {
	r := &Recording{Running: runningAsListed(t, "tcp_stage", "dev_xmit")}
	r.planSampling()
	for _, h := range r.Running[0].Hooks {
		if slices.Contains(r.sampled, h) {
			t.Errorf("the flip detaches tcp_stage's %s", h)
		}
	}
	if len(r.lingerers) != 1 || len(r.lingerers[0].hooks) != len(r.Running[0].Hooks) || !r.lingerers[0].attached {
		t.Fatalf("lingerers %+v, want tcp_stage's %d hooks, attached", r.lingerers, len(r.Running[0].Hooks))
	}
	if !slices.Equal(r.paused, []string{wire.VarTcpStagePaused}) || !slices.Equal(r.sampledFamilies, []string{"tcp_stage", "dev_xmit"}) {
		t.Fatalf("paused %v, sampled families %v", r.paused, r.sampledFamilies)
	}
}
