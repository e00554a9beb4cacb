package lab

import (
	"fmt"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
)

// Variants build each finding's fault by other mechanisms than the lab's own
// scenario for it (Scenarios): other tools (iperf3, scripts), socket options
// instead of sysctls, the other side, other qdiscs. The doctor was not tuned
// on them; they show whether its judgement holds off its own lab.
var Variants = append([]*Scenario{
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
		Fault:     "the sender sets SO_SNDBUF to 16 KB and the receiver drops 0.3 % of the segments (control: neither)",
		// The sender waits on the buffer two thirds to three quarters of its
		// time and on the loss's smaller windows the rest: the buffer ranks
		// first. At 1 % loss the two bound the flow about equally (the buffer
		// 39-57 % of the time) and either answer was right.
		Expect:    "sndbuf-limited",
		Also:      []string{"packet-loss"},
		Families:  []string{"tcp_conn", "tcp_sendlim", "tcp_retrans", "skb_drop"},
		Load:      bulk,
		FaultLoad: func(o *load.Options) { o.SndBuf = 16 << 10 },
		Inject:    func(p *Pair) error { return dropOnInput(p.Receiver, 3) },
		// The top finding's remedy alone: what it gains with the loss still there.
		FixLoad:       func(o *load.Options) { o.SndBuf = 0 },
		RemedyPartial: "the 0.3 % netfilter drop, the second fault, stays when the buffer is freed",
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			share, drops := f.limitShare("sndbuf"), f.drops("NETFILTER_DROP")
			return fmt.Sprintf("tcp_sendlim [sndbuf] %.0f %% of the sender's time, %d skb_drop [NETFILTER_DROP]; throughput %s",
				share*100, drops, change(c, f)), share > 0.3 && drops > 0 && f.Load.Bps < 0.7*c.Load.Bps
		},
	},
}, moreVariants...)

// rwndVerdict: the sender waited for the peer's window most of its time,
// well above the control's CPU-bound reader, and lost throughput for it.
func rwndVerdict(c, f *Measurement, p *Pair) (string, bool) {
	share := f.limitShare("swnd")
	return fmt.Sprintf("tcp_sendlim [swnd] %.0f %% of the sender's time (control %.0f %%); throughput %s",
		share*100, c.limitShare("swnd")*100, change(c, f)), share > 0.5 && share > c.limitShare("swnd")+0.3 && f.Load.Bps < 0.7*c.Load.Bps
}

// More variants, one or more per finding, each unlike the lab's scenario.
var moreVariants = []*Scenario{
	{
		Name:      "nagle-small-writes",
		Mechanism: "a stream of 100-byte writes with Nagle on (not request/response)",
		Fault:     "bulk TCP in 100-byte writes, Nagle on (control: the same writes with TCP_NODELAY)",
		// Nagle holds each tail for a round trip while full segments go out:
		// here it even coalesces the writes (faster than TCP_NODELAY). What
		// costs is the small writes.
		Expect:    "small-packet-bound",
		Families:  []string{"tcp_conn", "tcp_sendlim", "sock_io"},
		Load:      load.Options{Mode: load.Bulk, Duration: 2 * time.Second, Size: 100, NoDelay: true, CC: "cubic"},
		FaultLoad: func(o *load.Options) { o.NoDelay = false },
		FixLoad:   func(o *load.Options) { o.Size = 128 << 10 },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			nagle := f.sender().LimitCount()["nagle"]
			return fmt.Sprintf("%d tcp_sendlim [nagle] decisions (control %d); throughput %s", nagle, c.sender().LimitCount()["nagle"], change(c, f)),
				nagle > 10*(c.sender().LimitCount()["nagle"]+1)
		},
	},
	{
		Name:      "rate-tbf-bursts",
		Mechanism: "a shaper the flow stays well below: TSO bursts overrun a small bucket",
		Fault:     "tbf rate 500mbit burst 16kb on the sender's veth (control: none)",
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "qdisc"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "qdisc", "add", "dev", p.SenderDev, "root", "tbf", "rate", "500mbit", "burst", "16kb", "latency", "20ms")
			return err
		},
		Fix:     delSenderRoot,
		Verdict: shapedVerdict("tbf", 500e6),
	},
	{
		Name:      "rate-htb",
		Mechanism: "an htb class instead of tbf, traffic by iperf3",
		Fault:     "htb with one class at 300mbit on the sender's veth, iperf3 traffic (control: none)",
		Expect:    "rate-shaped",
		Families:  []string{"tcp_conn", "qdisc"},
		Load:      bulk,
		Workload:  iperf3(),
		Inject: func(p *Pair) error {
			for _, args := range [][]string{
				{"qdisc", "add", "dev", p.SenderDev, "root", "handle", "1:", "htb", "default", "10"},
				{"class", "add", "dev", p.SenderDev, "parent", "1:", "classid", "1:10", "htb", "rate", "300mbit"},
			} {
				if _, err := p.Sender.Run("tc", args...); err != nil {
					return err
				}
			}
			return nil
		},
		Fix:     delSenderRoot,
		Verdict: shapedVerdict("htb", 300e6),
	},
	{
		Name:      "loss-on-output",
		Mechanism: "a netfilter rule on the sender's output, not the receiver's input",
		Fault:     "nft drops 1 % of the sender's outgoing segments to the lab's port (control: none)",
		Expect:    "packet-loss",
		Families:  []string{"tcp_conn", "tcp_retrans", "skb_drop"},
		Load:      bulk,
		Inject:    func(p *Pair) error { return dropOnOutput(p.Sender, 1) },
		Fix:       func(p *Pair) error { return dropNothing(p.Sender) },
		EstimateUnheld: "a segment its own host drops on output is sent again at once, neither retransmitted nor followed by a " +
			"window cut: the doctor has no measure of what that costs (0 % estimated where 12-23 % was, 2026-11-28)",
		// A segment dropped on its own host's output was never sent: TCP
		// sends it again later, not as a retransmission, and loses little.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops := f.drops("NETFILTER_DROP")
			return fmt.Sprintf("%d skb_drop [NETFILTER_DROP] on the sender's output, %d in the control; throughput %s", drops,
				c.drops("NETFILTER_DROP"), change(c, f)), drops > 0 && c.drops("NETFILTER_DROP") == 0
		},
	},
	{
		Name:      "loss-tiny-queue",
		Mechanism: "a queue that overflows: the fifo under an htb class holds 2 packets",
		Fault:     "a 2-packet pfifo under an htb class at 20gbit on the sender's veth (control: the same class with its default queue, txqueuelen packets)",
		Expect:    "packet-loss",
		Families:  []string{"tcp_conn", "skb_drop", "qdisc"},
		Load:      bulk,
		// The class shapes the control as it does the fault: the queue's
		// limit, not the shaper, is what the fault adds.
		Prepare: func(p *Pair) error {
			for _, args := range [][]string{
				{"qdisc", "add", "dev", p.SenderDev, "root", "handle", "1:", "htb", "default", "10"},
				{"class", "add", "dev", p.SenderDev, "parent", "1:", "classid", "1:10", "htb", "rate", "20gbit"},
			} {
				if _, err := p.Sender.Run("tc", args...); err != nil {
					return err
				}
			}
			return nil
		},
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "qdisc", "add", "dev", p.SenderDev, "parent", "1:10", "pfifo", "limit", "2")
			return err
		},
		Fix: func(p *Pair) error {
			_, err := p.Sender.Run("tc", "qdisc", "del", "dev", p.SenderDev, "parent", "1:10")
			return err
		},
		// Like a netfilter drop on output, a qdisc drop of the host's own
		// segment is not retransmitted: TCP enters CWR and sends it again.
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops := f.drops("QDISC_DROP")
			return fmt.Sprintf("%d skb_drop [QDISC_DROP] (%s), %d in the control; throughput %s", drops, f.dropLocation(p.SenderDev),
				c.drops("QDISC_DROP"), change(c, f)), drops > 0 && c.drops("QDISC_DROP") == 0
		},
	},
	{
		Name:      "offload-tx-csum-off",
		Mechanism: "transmit checksum offload off, which takes TSO and GSO with it",
		Fault:     "ethtool -K tx off on the sender's veth (control: on)",
		Expect:    "offload-disabled",
		Families:  []string{"tcp_conn", "dev_xmit"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			_, err := p.Sender.Run("ethtool", "-K", p.SenderDev, "tx", "off")
			return err
		},
		Fix: func(p *Pair) error {
			_, err := p.Sender.Run("ethtool", "-K", p.SenderDev, "tx", "on", "tso", "on", "gso", "on")
			return err
		},
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			on, off := c.device(p.SenderDev).Xmit.SegsPerSkb(), f.device(p.SenderDev).Xmit.SegsPerSkb()
			return fmt.Sprintf("dev_xmit %.1f segments per skb, against %.1f with checksum offload; throughput %s", off, on, change(c, f)),
				on > 4 && off < 1.1
		},
	},
	func() *Scenario {
		s := groOff()
		s.Name, s.Mechanism = "gro-off-iperf3", "GRO off on the receiver with iperf3's traffic"
		s.Fault = "GRO off on the receiver's veth, sender TSO and GSO off in both runs, iperf3 (control: GRO on)"
		s.Workload = iperf3()
		return s
	}(),
	{
		Name:      "sndbuf-iperf3-wmem",
		Mechanism: "iperf3's traffic with the sender namespace's tcp_wmem maximum small",
		Fault:     "net.ipv4.tcp_wmem = 4096 16384 32768 in the sender, iperf3 (control: the default)",
		Expect:    "sndbuf-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Workload:  iperf3(),
		Inject:    func(p *Pair) error { return sysctl(p.Sender, "net.ipv4.tcp_wmem", "4096 16384 32768") },
		Fix:       func(p *Pair) error { return sysctl(p.Sender, "net.ipv4.tcp_wmem", defaultWmem) },
		Verdict:   sndbufVerdict,
	},
}

// dropOnOutput has a netfilter rule in ns drop percent of the TCP segments
// it sends to the lab's port.
func dropOnOutput(ns *host.Netns, percent int) error {
	for _, args := range [][]string{
		{"add", "table", "inet", "skbtrace_lab"},
		{"add", "chain", "inet", "skbtrace_lab", "out", "{ type filter hook output priority 0 ; }"},
		{"add", "rule", "inet", "skbtrace_lab", "out", "tcp", "dport", fmt.Sprint(Port), "numgen", "random", "mod", "100", "<", fmt.Sprint(percent), "drop"},
	} {
		if _, err := ns.Run("nft", args...); err != nil {
			return err
		}
	}
	return nil
}

// shapedVerdict: a qdisc of that kind on the sender's veth held a backlog
// and the flow stayed below its rate.
func shapedVerdict(kind string, rate float64) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		var backlog uint32
		for _, q := range f.Stat.Qdiscs {
			if q.Dev == p.SenderDev {
				backlog = max(backlog, q.BacklogMax)
			}
		}
		return fmt.Sprintf("%s backlog up to %d bytes; throughput %s", kind, backlog, change(c, f)),
			backlog > 0 && f.Load.Bps < 1.1*rate && c.Load.Bps > 2*rate
	}
}

// sndbufVerdict: the sender waited for send-buffer space most of its time,
// far more than the control's, and lost throughput for it.
func sndbufVerdict(c, f *Measurement, p *Pair) (string, bool) {
	return sndbufJudged(f.limitShare("sndbuf"), c.limitShare("sndbuf"), c, f)
}

// sndbufJudged judges a buffer-capped sender from its share of time waiting
// for buffer space (share, the control's before) and the runs' throughput.
// A control whose CPU was saturated hides the cap's cost: a 6.12 TCG guest
// moved 238 Mbit/s capped against 272 with the control CPU-bound, 95 % of
// the time waiting against 0 %. There the waits alone prove it, and they
// do wherever the sender waited on its buffer nearly all its time (a 5.10
// guest: 95 % against 0 %, 425 against 488 Mbit/s, its control's CPU 89 %
// busy, a point under the bar the CPU's reading was held to).
func sndbufJudged(share, before float64, c, f *Measurement) (string, bool) {
	text := fmt.Sprintf("tcp_sendlim [sndbuf] %.0f %% of the sender's time (control %.0f %%); throughput %s",
		share*100, before*100, change(c, f))
	held := share > 0.5 && share > before+0.3
	if f.Load.Bps < 0.7*c.Load.Bps || share >= 0.9 && before < 0.1 {
		return text, held
	}
	cpu, busy := c.busiestCPU()
	text += fmt.Sprintf("; the control's CPU %d was busy %.0f %% of its run", cpu, busy*100)
	return text, held && busy >= cpuSaturated
}
