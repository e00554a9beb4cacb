package lab

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/load"
)

// Variants build each finding's fault by other mechanisms than the lab's own
// scenario for it (Scenarios): other tools (iperf3, scripts), socket options
// instead of sysctls, the other side, other qdiscs. The doctor was not tuned
// on them; they show whether its judgement holds off its own lab.
var Variants = []*Scenario{
	{
		Name:      "sndbuf-so-sndbuf",
		Mechanism: "socket option in the sending application",
		Fault:     "the sender sets SO_SNDBUF to 16 KB (control: autotuned)",
		Expect:    "sndbuf-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		FaultLoad: func(o *load.Options) { o.SndBuf = 16 << 10 },
		FixLoad:   func(o *load.Options) { o.SndBuf = 0 },
		Verdict:   sndbufVerdict,
	},
	{
		Name:      "rwnd-iperf3-window",
		Mechanism: "iperf3 -w: SO_RCVBUF (and SO_SNDBUF) set by the application on both ends",
		Fault:     "iperf3 -w 8K: the receiver's buffer fixed at 8 KB, autotuning off (control: iperf3 autotuned)",
		Expect:    "rwnd-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Workload:  iperf3(),
		FaultLoad: func(o *load.Options) { o.SndBuf = 8 << 10 },
		FixLoad:   func(o *load.Options) { o.SndBuf = 0 },
		Verdict:   rwndVerdict,
	},
	{
		Name:      "two-faults-sndbuf-loss",
		Mechanism: "two faults at once: SO_SNDBUF in the sender and a netfilter drop at the receiver",
		Fault:     "the sender sets SO_SNDBUF to 16 KB and the receiver drops 1 % of the segments (control: neither)",
		// Alone, the 16 KB buffer costs about four fifths of the throughput
		// here and the 1 % loss about three fifths: the buffer ranks first.
		Expect:    "sndbuf-limited",
		Also:      []string{"packet-loss"},
		Families:  []string{"tcp_conn", "tcp_sendlim", "tcp_retrans", "skb_drop"},
		Load:      bulk,
		FaultLoad: func(o *load.Options) { o.SndBuf = 16 << 10 },
		Inject:    func(p *Pair) error { return dropOnInput(p.Receiver, 1) },
		// The top finding's remedy alone: what it gains with the loss still there.
		FixLoad: func(o *load.Options) { o.SndBuf = 0 },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			share, drops := f.limitShare("sndbuf"), f.drops("NETFILTER_DROP")
			return fmt.Sprintf("tcp_sendlim [sndbuf] %.0f%% of the sender's time, %d skb_drop [NETFILTER_DROP]; throughput %s",
				share*100, drops, change(c, f)), share > 0.3 && drops > 0 && f.Load.Bps < 0.7*c.Load.Bps
		},
	},
}

// rwndVerdict: the sender waited for the peer's window most of its time,
// well above the control's CPU-bound reader, and lost throughput for it.
func rwndVerdict(c, f *Measurement, p *Pair) (string, bool) {
	share := f.limitShare("swnd")
	return fmt.Sprintf("tcp_sendlim [swnd] %.0f%% of the sender's time (control %.0f%%); throughput %s",
		share*100, c.limitShare("swnd")*100, change(c, f)), share > 0.5 && share > c.limitShare("swnd")+0.3 && f.Load.Bps < 0.7*c.Load.Bps
}

// sndbufVerdict: the sender waited for send-buffer space most of its time,
// and lost throughput for it.
func sndbufVerdict(c, f *Measurement, p *Pair) (string, bool) {
	share := f.limitShare("sndbuf")
	return fmt.Sprintf("tcp_sendlim [sndbuf] %.0f%% of the sender's time (control %.0f%%); throughput %s",
		share*100, c.limitShare("sndbuf")*100, change(c, f)), share > 0.5 && f.Load.Bps < 0.7*c.Load.Bps
}
