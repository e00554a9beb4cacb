package lab

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/skbtrace/skbtrace/internal/load"
)

// Noise are healthy runs with the background a real host has: fresh
// interfaces (IPv6 neighbour discovery, MLD, ARP), idle and keepalive
// connections, connection churn, a second slow flow, ping, small UDP
// requests, receive work spread over CPUs. The doctor must give none of them
// a warning. The control is the stream alone, the "fault" run the stream
// with the noise; the verdict checks that the noise happened and that the
// stream still ran.
var Noise = []*Scenario{
	{
		Name:      "noise-fresh-ipv6",
		Mechanism: "a second link brought up with IPv6 just before the run: neighbour discovery, MLD reports, router solicitations",
		Fault:     "a new veth pair between the namespaces with IPv6 addresses comes up as the stream starts",
		Families:  []string{"tcp_conn", "skb_drop"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			for _, args := range [][]string{
				{"link", "add", noiseDev, "type", "veth", "peer", "name", noiseDev + "p", "netns", p.Receiver.Name},
				{"-6", "addr", "add", "fd00:5b7::1/64", "dev", noiseDev},
				{"link", "set", noiseDev, "up"},
			} {
				if _, err := p.Sender.Run("ip", args...); err != nil {
					return err
				}
			}
			for _, args := range [][]string{
				{"-6", "addr", "add", "fd00:5b7::2/64", "dev", noiseDev + "p"},
				{"link", "set", noiseDev + "p", "up"},
			} {
				if _, err := p.Receiver.Run("ip", args...); err != nil {
					return err
				}
			}
			return nil
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := snmp6(p.Sender, "Icmp6OutMsgs") + snmp6(p.Receiver, "Icmp6OutMsgs")
			return fmt.Sprintf("%d ICMPv6 messages sent (ND, MLD, RS)", n), n > 0
		}),
	},
	{
		Name:      "noise-idle-keepalive",
		Mechanism: "forty idle connections with keepalive probes every second beside the stream",
		Fault:     "40 idle TCP connections (python) with TCP_KEEPIDLE and TCP_KEEPINTVL of 1 s",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.pythonServed(pyListener, noisePort, pyKeepalive, 40)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := established(p.Sender, noisePort)
			return fmt.Sprintf("%d idle connections established", n), n >= 40
		}),
	},
	{
		Name:      "noise-churn",
		Mechanism: "short connections opened and closed as fast as a script can beside the stream",
		Fault:     "a python loop: connect, write 100 bytes, close",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.pythonServed(pyListener, noisePort, pyChurn)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := counter(p.Receiver, "Tcp.PassiveOpens")
			return fmt.Sprintf("%d connections accepted", n), n > 100
		}),
	},
	{
		Name:      "noise-second-slow-flow",
		Mechanism: "a second TCP flow at 10 Mbit/s beside the stream",
		Fault:     "a python writer sends 12.5 KB every 10 ms to a python reader",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.pythonServed(pyListener, noisePort, pySlowWriter)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := established(p.Sender, noisePort)
			return fmt.Sprintf("%d connections of the second flow", n), n >= 1
		}),
	},
	{
		Name:      "noise-iperf3",
		Mechanism: "iperf3 as the stream: its control connection idles beside the data",
		Fault:     "none: the stream is iperf3's in both runs",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Workload:  iperf3(),
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			return "iperf3's data and control connections", f.Load.Bps > 0
		}),
	},
	{
		Name:      "noise-ping",
		Mechanism: "ICMP echo a hundred times a second beside the stream",
		Fault:     "ping -i 0.01 from the sender to the receiver",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			_, err := p.Background(p.Sender, "ping", "-q", "-i", "0.01", ReceiverAddr.Addr().String())
			return err
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := counter(p.Receiver, "Icmp.InEchos")
			return fmt.Sprintf("%d echo requests received", n), n > 50
		}),
	},
	{
		Name:      "noise-udp-requests",
		Mechanism: "small UDP requests and answers a hundred times a second beside the stream",
		Fault:     "a python client sends 64-byte datagrams, a python server answers with 200 bytes",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			if err := p.python(p.Receiver, pyUDPEcho, noisePort); err != nil {
				return err
			}
			return p.python(p.Sender, pyUDPPinger, ReceiverAddr.Addr(), noisePort)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := counter(p.Receiver, "Udp.InDatagrams")
			return fmt.Sprintf("%d datagrams received", n), n > 50
		}),
	},
	{
		Name:      "noise-loopback",
		Mechanism: "a bulk stream over the receiver's loopback at full speed beside the stream",
		Fault:     "iperf3 over 127.0.0.1 inside the receiver's namespace",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.serveThen(noisePort,
				func() error {
					_, err := p.Background(p.Receiver, "iperf3", "-s", "-p", fmt.Sprint(noisePort))
					return err
				},
				func() error {
					_, err := p.Background(p.Receiver, "iperf3", "-c", "127.0.0.1", "-p", fmt.Sprint(noisePort), "-t", "60")
					return err
				})
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := established(p.Receiver, noisePort)
			return fmt.Sprintf("%d loopback connections", n), n >= 2
		}),
	},
	{
		Name:      "noise-reordering",
		Mechanism: "receive work spread over both CPUs (RPS) and the generator not pinned: segments may be reordered",
		Fault:     "RPS on the receiver's veth over CPUs 0 and 1, threads unpinned",
		Families:  []string{"tcp_conn", "tcp_retrans"},
		Load:      bulk,
		Workload: func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
			o.PinCPU, o.CPU = false, -1
			return load.Run(ctx, o, nil)
		},
		Inject: func(p *Pair) error {
			if runtime.NumCPU() < 2 {
				return nil
			}
			_, err := p.Receiver.Run("sh", "-c", fmt.Sprintf("echo 3 > /sys/class/net/%s/queues/rx-0/rps_cpus", p.ReceiverDev))
			return err
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			mask, _ := p.Receiver.Run("cat", fmt.Sprintf("/sys/class/net/%s/queues/rx-0/rps_cpus", p.ReceiverDev))
			reorder := counter(p.Sender, "TcpExt.TCPSACKReorder") + counter(p.Sender, "TcpExt.TCPDSACKRecv")
			return fmt.Sprintf("receive steered to CPUs %s, %d reorderings and DSACKs seen by the sender", strings.TrimSpace(mask), reorder),
				runtime.NumCPU() >= 2 && strings.Trim(strings.TrimSpace(mask), "0,") == "3"
		}),
	},
}

// Names and a port for the noise's own devices and servers; each pair has
// namespaces of its own, so fixed names never collide.
const (
	noiseDev  = "skbnoise0"
	noisePort = 5311
)

// quietVerdict is a noise run's verdict: the noise happened and the stream
// still ran (above a quarter of the control's throughput: this VM's rate
// swings up to twice between seconds, and the noise takes CPU too).
func quietVerdict(happened func(c, f *Measurement, p *Pair) (string, bool)) func(c, f *Measurement, p *Pair) (string, bool) {
	return quietVerdictAbove(0.25, happened)
}

// quietVerdictAbove is quietVerdict for noise that costs the stream more
// of its rate by itself: the stream must keep above share of the control's.
func quietVerdictAbove(share float64, happened func(c, f *Measurement, p *Pair) (string, bool)) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		what, ok := happened(c, f, p)
		return fmt.Sprintf("%s; the stream %s", what, change(c, f)), ok && f.Load.Bps > c.Load.Bps*share
	}
}
