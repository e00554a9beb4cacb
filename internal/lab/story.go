package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/report"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// The kernel's default tcp_wmem, the fix the story applies.
const defaultWmem = "4096 16384 4194304"

// defaultRmem is the kernel's default tcp_rmem.
const defaultRmem = "4096 131072 6291456"

// Story tells seed 001's case on the lab: a sender whose send buffer is too
// small, what skbtrace shows about it, the fix and its effect.
func Story(ctx context.Context, w io.Writer) (err error) {
	s, _ := ByName("sndbuf-limited")
	pair, done, err := setUp(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := done(false); cerr != nil && err == nil {
			err = cerr
		}
	}()

	fmt.Fprintf(w, "== A bulk TCP stream between two namespaces, with a small send buffer:\n")
	fmt.Fprintf(w, "   ip netns exec %s sysctl -w net.ipv4.tcp_wmem=\"4096 8192 16384\"\n\n", pair.Sender.Name)
	if err := s.Inject(pair); err != nil {
		return err
	}
	slow, err := s.measure(ctx, pair, s.Load, RunOptions{Doctor: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   throughput: %.2f Gbit/s\n\n", slow.Load.Bps/1e9)
	fmt.Fprintf(w, "== skbtrace doctor, watching that run: its top finding\n")
	if top := slow.Doctor.Top(finding.Warning); top != nil {
		one := &doctor.Report{Findings: []finding.Finding{*top}}
		if err := one.WriteText(indent{w}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "   no finding (%s)\n\n", slow.Doctor.Healthy)
	}
	fmt.Fprintf(w, "== skbtrace parse: why the sender stopped sending (tcp_sendlim, folded in the kernel)\n")
	if err := printSendlim(w, slow, 6); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n   %.0f %% of the sender's time was [sndbuf]: it had nothing left to send and its\n", slow.limitShare("sndbuf")*100)
	fmt.Fprintf(w, "   send buffer was full of unacknowledged data. The send buffer caps the bytes in flight.\n\n")
	fmt.Fprintf(w, "== The fix: a send buffer that can grow with the bandwidth-delay product\n")
	fmt.Fprintf(w, "   ip netns exec %s sysctl -w net.ipv4.tcp_wmem=\"%s\"\n\n", pair.Sender.Name, defaultWmem)
	if err := sysctl(pair.Sender, "net.ipv4.tcp_wmem", defaultWmem); err != nil {
		return err
	}
	fast, err := s.measure(ctx, pair, s.Load, RunOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   throughput: %.2f Gbit/s (%.1fx); the sender is now limited by %s (%.0f %% of its time)\n",
		fast.Load.Bps/1e9, fast.Load.Bps/slow.Load.Bps, topReason(fast), fast.limitShare(topReason(fast))*100)
	return nil
}

// printSendlim prints n of the sender's tcp_sendlim [sndbuf] events from the
// middle of the run, past the connection's first milliseconds.
func printSendlim(w io.Writer, m *Measurement, n int) error {
	r, err := trace.NewReader(bytes.NewReader(m.Trace))
	if err != nil {
		return err
	}
	sum := analyze.NewSummary()
	peer := fmt.Sprintf("%s:%d", ReceiverAddr.Addr(), Port)
	var lines [][]byte
	err = analyze.Replay(r, &event.Filter{}, sum, func(ev *event.Event) error {
		if ev.Type == event.TypeTCPSendlim && ev.Sendlim.Peer.String() == peer && ev.Sendlim.Reason == event.SendlimSndbuf {
			lines = append(lines, report.AppendText([]byte("   "), ev, sum.Names))
		}
		return nil
	})
	if err != nil {
		return err
	}
	from := max(len(lines)/2-n/2, 0)
	for _, l := range lines[from:min(from+n, len(lines))] {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	return nil
}

// indent shifts a block of text right to sit under the story's headings.
type indent struct{ w io.Writer }

func (in indent) Write(p []byte) (int, error) {
	out := bytes.ReplaceAll(p, []byte("\n"), []byte("\n   "))
	if _, err := in.w.Write(append([]byte("   "), bytes.TrimSuffix(out, []byte("   "))...)); err != nil {
		return 0, err
	}
	return len(p), nil
}
