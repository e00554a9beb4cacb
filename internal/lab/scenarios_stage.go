package lab

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
	"github.com/skbtrace/skbtrace/internal/wire"
)

func init() { Scenarios = append(Scenarios, stageScenarios...) }

// stageBulk runs long enough for tcp_stage to time several bytes that each
// wait the better part of a second: a socket times one byte at a time.
var stageBulk = load.Options{Mode: load.Bulk, Duration: 4 * time.Second, CC: "cubic"}

// stageShaper is the shaped path the stage scenarios put their fault
// behind, in both runs: a rate the flow's bytes queue for.
func stageShaper(p *Pair, limit string) error {
	_, err := p.Sender.Run("tc", "qdisc", "replace", "dev", p.SenderDev, "root", "tbf", "rate", "200mbit", "burst", "64kb", "limit", limit)
	return err
}

// stageScenarios are the faults where a flow's bytes spend their time in
// one stage on this host: slow, and nothing lost (tcp_stage).
var stageScenarios = []*Scenario{
	{
		Name:      "send-queue-bloat",
		Fault:     "the sender's SO_SNDBUF forced to 8 MB (16 MB with the kernel's doubling) behind a tbf of 200 Mbit/s on its veth (control: autotuned)",
		Expect:    "send-queue-bloat",
		Also:      []string{"rate-shaped"},
		Families:  []string{"tcp_conn", "tcp_stage"},
		Load:      stageBulk,
		FaultLoad: func(o *load.Options) { o.SndBuf, o.ForceBufs = 8<<20, true },
		FixLoad:   func(o *load.Options) { o.SndBuf, o.ForceBufs = 0, false },
		Prepare:   func(p *Pair) error { return stageShaper(p, "1mb") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return stageVerdict(c, f, p.Sender, ReceiverAddr.Addr(), wire.TcpStageSTAGE_SEND_QUEUE, 200*time.Millisecond)
		},
		Latency: func(m *Measurement, p *Pair) time.Duration {
			w, _ := m.stageWait(p.Sender, ReceiverAddr.Addr(), wire.TcpStageSTAGE_SEND_QUEUE)
			return w
		},
	},
	{
		Name: "qdisc-bloat",
		Fault: "a router namespace forwards between the ends, observed by the doctor; a tbf of 200 Mbit/s with an 8 MB limit " +
			"on its link to the receiver (control: 128 KB, 5 ms at the rate)",
		Expect:        "qdisc-bloat",
		Also:          []string{"rate-shaped"},
		Families:      []string{"tcp_conn", "qdisc"},
		Load:          stageBulk,
		ObserveRouter: true,
		Prepare:       netRouted(func(p *Pair) error { return routerShaper(p, "128kb") }),
		Inject:        func(p *Pair) error { return routerShaper(p, "8mb") },
		Fix:           func(p *Pair) error { return routerShaper(p, "128kb") },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			cb, fb := c.backlogMax(netRouter(p).out), f.backlogMax(netRouter(p).out)
			// 200 Mbit/s is 25 MB a second: 2.5 MB wait 100 ms.
			return fmt.Sprintf("tbf backlog up to %d bytes (control %d); throughput %s", fb, cb, change(c, f)),
				fb >= 2500000 && fb >= 10*cb
		},
		// The longest wait in the router's queue: its deepest backlog at
		// the rate.
		Latency: func(m *Measurement, p *Pair) time.Duration {
			return time.Duration(float64(m.backlogMax(netRouter(p).out)) / routerShaperBytes * float64(time.Second))
		},
	},
	shaped(sockReader(&Scenario{
		Name: "reader-late",
		Fault: "a python3 receiver that sleeps 20 ms after each read of up to 1 MB, behind a tbf of 200 Mbit/s on the sender's veth " +
			"(control: reading 256 KB at once, no sleep); it keeps up, the window stays open",
		Expect:   "reader-late",
		Also:     []string{"rate-shaped"},
		Families: []string{"tcp_conn", "tcp_stage"},
		Load:     stageBulk,
		Workload: sockGenerator,
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return stageVerdict(c, f, p.Receiver, SenderAddr.Addr(), wire.TcpStageSTAGE_RX_QUEUE, 5*time.Millisecond)
		},
		Latency: func(m *Measurement, p *Pair) time.Duration {
			w, _ := m.stageWait(p.Receiver, SenderAddr.Addr(), wire.TcpStageSTAGE_RX_QUEUE)
			return w
		},
	}, sockSinkArgs{chunk: 1 << 20, pause: 20 * time.Millisecond})),
}

// shaped puts s behind stageShaper: its Prepare shapes, then does its own.
func shaped(s *Scenario) *Scenario {
	prepare := s.Prepare
	s.Prepare = func(p *Pair) error {
		if err := stageShaper(p, "1mb"); err != nil {
			return err
		}
		return prepare(p)
	}
	return s
}

// stageVerdict: the fault run's bytes waited in stage at least least,
// five times the control's, on the connection in ns to peer: the wait
// weighted by time, as the doctor judges (a connection's first bytes,
// before its queue fills, are timed many times for each long way).
func stageVerdict(c, f *Measurement, ns *host.Netns, peer netip.Addr, stage wire.TcpStage, least time.Duration) (string, bool) {
	name := event.StageNames[stage]
	fs, fn := f.stageWait(ns, peer, stage)
	cs, _ := c.stageWait(ns, peer, stage)
	return fmt.Sprintf("tcp_stage %s %s weighted by time over %s (control %s); throughput %s", name, units.Duration(fs), units.Bytes(uint64(fn)), units.Duration(cs), change(c, f)),
		fn > 0 && fs >= least && fs >= 5*cs
}

// stageWait is the time-weighted wait in stage of the connection in ns to
// peer that timed the most bytes through it, and how many it timed.
func (m *Measurement) stageWait(ns *host.Netns, peer netip.Addr, stage wire.TcpStage) (time.Duration, uint64) {
	ino, err := ns.Inode()
	if err != nil {
		return 0, 0
	}
	var best *wire.StageHist
	for _, c := range m.Stat.Connections {
		p, err := netip.ParseAddrPort(c.Peer)
		if err != nil || c.Netns != ino || p.Addr().Unmap() != peer || c.Stages == nil {
			continue
		}
		if h := c.Stages.Hist(int(stage)); best == nil || h.Count > best.Count {
			best = &h
		}
	}
	if best == nil || best.Count == 0 {
		return 0, 0
	}
	return time.Duration(event.TimeWeightedUs(best.Hist[:], event.StageBits) * float64(time.Microsecond)), best.Count
}

// routerShaperBytes is routerShaper's rate, 200 Mbit/s, in bytes a second.
const routerShaperBytes = 25e6

// routerShaper shapes the router's link to the receiver with a queue of limit.
func routerShaper(p *Pair, limit string) error {
	r := netRouter(p)
	_, err := r.ns.Run("tc", "qdisc", "replace", "dev", r.out, "root", "tbf", "rate", "200mbit", "burst", "64kb", "limit", limit)
	return err
}

// backlogMax is the largest backlog the qdisc family saw on dev.
func (m *Measurement) backlogMax(dev string) uint32 {
	var b uint32
	for _, q := range m.Stat.Qdiscs {
		if q.Dev == dev {
			b = max(b, q.BacklogMax)
		}
	}
	return b
}
