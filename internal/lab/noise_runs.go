package lab

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

func init() { Noise = append(Noise, noiseRuns...) }

// noiseRuns are more healthy runs, each noise made another way than
// noise.go's: on the stream's own link, by the other end, by sysctls, by
// iperf3's and the lab's generator as processes of their own, by resets and
// refusals, by the scheduler with no steering at all.
var noiseRuns = []*Scenario{
	{
		Name:      "noise-fresh-vxlan",
		Mechanism: "a VXLAN overlay with IPv6 brought up over the stream's own link just before the run: ND, MLD and RS inside UDP",
		Fault:     "a VXLAN device (VNI 42) with IPv6 addresses on both sides comes up as the stream starts",
		Families:  []string{"tcp_conn", "skb_drop"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			if err := p.AddVXLAN(); err != nil {
				return err
			}
			if _, err := p.Sender.Run("ip", "-6", "addr", "add", "fd00:5b9::1/64", "dev", TunnelDev); err != nil {
				return err
			}
			_, err := p.Receiver.Run("ip", "-6", "addr", "add", "fd00:5b9::2/64", "dev", TunnelDev)
			return err
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			out := nrDevSNMP6(p.Sender, TunnelDev, "Icmp6OutMsgs") + nrDevSNMP6(p.Receiver, TunnelDev, "Icmp6OutMsgs")
			// Multicast to groups the receiver did not join is dropped before ICMPv6 counts it.
			in := nrDevSNMP6(p.Receiver, TunnelDev, "Ip6InMcastPkts")
			return fmt.Sprintf("%d ICMPv6 messages sent over the overlay (ND, MLD, RS), %d multicast packets arrived at the receiver; %d skb_drop on %s",
				out, in, f.devDrops(TunnelDev), TunnelDev), out > 0 && in > 0
		}),
	},
	{
		Name:      "noise-ipv6-addr-churn",
		Mechanism: "IPv6 addresses added and removed on the stream's own veth during the run: DAD, MLD joins and leaves on its link",
		Fault:     "every 50 ms each side adds a new IPv6 address to its veth and removes the one before",
		Families:  []string{"tcp_conn", "skb_drop"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			nrMark(p, "out", nrDevSNMP6(p.Sender, p.SenderDev, "Icmp6OutMsgs"))
			nrMark(p, "in", nrDevSNMP6(p.Receiver, p.ReceiverDev, "Ip6InMcastPkts"))
			return nil
		},
		During: func(ctx context.Context, p *Pair) {
			for i := 1; ctx.Err() == nil; i++ {
				for side, ns := range []*host.Netns{p.Sender, p.Receiver} {
					dev := []string{p.SenderDev, p.ReceiverDev}[side]
					// A failed change is noise not made: the verdict counts what was.
					ns.Run("ip", "-6", "addr", "add", fmt.Sprintf("fd00:5ba::%x:%d/64", i, side+1), "dev", dev)
					if i > 1 {
						ns.Run("ip", "-6", "addr", "del", fmt.Sprintf("fd00:5ba::%x:%d/64", i-1, side+1), "dev", dev)
					}
				}
				nrSleep(ctx, 50)
			}
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			// Each new address sends MLD reports and a DAD probe, each removed one an MLD report.
			out := nrDevSNMP6(p.Sender, p.SenderDev, "Icmp6OutMsgs") - nrSince(p, "out")
			in := nrDevSNMP6(p.Receiver, p.ReceiverDev, "Ip6InMcastPkts") - nrSince(p, "in")
			return fmt.Sprintf("%d ICMPv6 messages sent by the sender's veth during the run, %d multicast packets arrived at the receiver's; "+
				"%d skb_drop on it", out, in, f.devDrops(p.ReceiverDev)), out > 20 && in > 20
		}),
	},
	{
		Name:      "noise-keepalive-sysctl",
		Mechanism: "keepalive by the namespaces' sysctls (1 s) on both ends, the server's accepted sockets probing back",
		Fault:     "net.ipv4.tcp_keepalive_time and _intvl 1 in both namespaces; 48 idle connections with SO_KEEPALIVE on both ends",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			for _, ns := range []*host.Netns{p.Sender, p.Receiver} {
				for _, key := range []string{"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_keepalive_intvl"} {
					if err := sysctl(ns, key, "1"); err != nil {
						return err
					}
				}
			}
			return p.pythonServed(nrPyKeepaliveServer, nrPort, nrPyIdle, 48)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			conns := established(p.Sender, nrPort)
			probes := counter(p.Sender, "TcpExt.TCPKeepAlive") + counter(p.Receiver, "TcpExt.TCPKeepAlive")
			return fmt.Sprintf("%d idle connections, %d keepalive probes sent by both ends", conns, probes),
				conns >= 48 && probes >= 48
		}),
	},
	{
		Name:      "noise-churn-reset",
		Mechanism: "short connections closed by a reset (SO_LINGER 0) as fast as a script can, beside the stream",
		Fault:     "a python loop: connect, write 100 bytes, close with SO_LINGER 0 (RST)",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.pythonServed(nrPyDiscard, nrPort, nrPyResetChurn)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			accepted, resets := counter(p.Receiver, "Tcp.PassiveOpens"), counter(p.Sender, "Tcp.OutRsts")
			return fmt.Sprintf("%d connections accepted, %d resets sent by the client's side", accepted, resets),
				accepted > 100 && resets > 100
		}),
	},
	{
		Name:      "noise-refused",
		Mechanism: "a health check against a port nobody listens on: each SYN answered by a reset",
		Fault:     "a python loop connects to a closed port of the receiver, about 500 times a second",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.python(p.Sender, nrPyRefused, ReceiverAddr.Addr(), nrPort)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			fails, resets := counter(p.Sender, "Tcp.AttemptFails"), counter(p.Receiver, "Tcp.OutRsts")
			return fmt.Sprintf("%d connection attempts refused, %d resets sent by the receiver", fails, resets),
				fails > 100 && resets > 100
		}),
	},
	{
		Name:      "noise-iperf3-10m",
		Mechanism: "a second flow by iperf3 paced at 10 Mbit/s (the host's default congestion control) beside the stream",
		Fault:     "iperf3 -b 10M from the sender to an iperf3 server in the receiver",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.serveThen(nrPort,
				func() error { _, err := p.Background(p.Receiver, "iperf3", "-s", "-p", fmt.Sprint(nrPort)); return err },
				func() error {
					_, err := p.Background(p.Sender, "iperf3", "-c", ReceiverAddr.Addr().String(), "-p", fmt.Sprint(nrPort),
						"-b", "10M", "-t", "600")
					return err
				})
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := nrBytesAcked(p.Sender, nrPort)
			return fmt.Sprintf("iperf3's second flow moved %d KB", n>>10), n > 1<<20
		}),
	},
	{
		Name:      "noise-rr-beside",
		Mechanism: "the lab's generator as a process of its own: request/response transactions beside the stream, to the same server",
		Fault:     "skbtrace load client --mode rr (100-byte requests, 10-byte answers, back to back) from the sender",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.selfLoad(p.Sender, "client", fmt.Sprintf("%s:%d", ReceiverAddr.Addr(), Port), "--mode", "rr", "-d", "600s", "--cc", "cubic")
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := nrBytesAcked(p.Sender, Port)
			return fmt.Sprintf("the request/response connection sent %d KB of requests", n>>10), n > 100<<10
		}),
	},
	{
		Name:      "noise-iperf3-bidir",
		Mechanism: "iperf3 --bidir as the stream: full-speed data both ways, beside its idle control connection",
		Fault:     "none: iperf3 --bidir in both runs",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Workload:  iperf3("--bidir"),
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			// One way, the receiver sends ACKs alone: a few hundredths of the sender's bytes.
			back, fwd := counter(p.Receiver, "IpExt.OutOctets"), counter(p.Sender, "IpExt.OutOctets")
			return fmt.Sprintf("the receiver's end sent %s, the sender's %s over both runs", units.SignedBytes(back), units.SignedBytes(fwd)),
				back > fwd/10
		}),
	},
	{
		Name:      "noise-ping-large-reverse",
		Mechanism: "ICMP from the other end with full-size packets, and IPv6 echo to all nodes on the link",
		Fault:     "ping -s 1400 -i 0.005 from the receiver to the sender, ping -6 ff02::1 every 50 ms from the sender",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			if _, err := p.Background(p.Receiver, "ping", "-q", "-s", "1400", "-i", "0.005", SenderAddr.Addr().String()); err != nil {
				return err
			}
			_, err := p.Background(p.Sender, "ping", "-q", "-6", "-i", "0.05", "ff02::1%"+p.SenderDev)
			return err
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			echos, multi := counter(p.Sender, "Icmp.InEchos"), nrDevSNMP6(p.Receiver, p.ReceiverDev, "Icmp6InEchos")
			return fmt.Sprintf("%d large echo requests at the sender, %d multicast IPv6 echo requests at the receiver", echos, multi),
				echos > 200 && multi > 20
		}),
	},
	{
		Name:      "noise-udp-generator",
		Mechanism: "the lab's generator as a process of its own: 200-byte UDP datagrams at 1 Mbit/s to the stream's server",
		Fault:     "skbtrace load client --mode udp -l 200 --rate 1M from the sender",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.selfLoad(p.Sender, "client", fmt.Sprintf("%s:%d", ReceiverAddr.Addr(), Port), "--mode", "udp", "-l", "200",
				"--rate", "1M", "-d", "600s")
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := counter(p.Receiver, "Udp.InDatagrams")
			return fmt.Sprintf("%d datagrams received", n), n > 500
		}),
	},
	{
		Name:      "noise-udp-closed-port",
		Mechanism: "metrics sent by UDP to a port nobody listens on (a statsd without its daemon): each answered by ICMP port unreachable",
		Fault:     "a python loop sends 100-byte datagrams to a closed port of the receiver, about 500 a second",
		Families:  []string{"tcp_conn", "skb_drop"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			return p.python(p.Sender, nrPyUDPBlind, ReceiverAddr.Addr(), nrPort)
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := counter(p.Receiver, "Udp.NoPorts")
			return fmt.Sprintf("%d datagrams to no port, %d skb_drop [NO_SOCKET] recorded", n, f.drops("NO_SOCKET")), n > 200
		}),
	},
	{
		Name:      "noise-loopback-generator",
		Mechanism: "the lab's generator at full speed over the receiver's loopback, server and client processes of their own",
		Fault:     "skbtrace load server and client over 127.0.0.1 inside the receiver's namespace",
		Families:  []string{"tcp_conn"},
		Load:      bulk,
		Inject: func(p *Pair) error {
			addr := fmt.Sprintf("127.0.0.1:%d", nrPort)
			return p.serveThen(nrPort,
				func() error { return p.selfLoad(p.Receiver, "server", "--listen", addr) },
				func() error { return p.selfLoad(p.Receiver, "client", addr, "-d", "600s", "--cc", "cubic") })
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			n := nrBytesAcked(p.Receiver, nrPort)
			return fmt.Sprintf("the loopback stream moved %s", units.SignedBytes(n)), n > 100<<20
		}),
	},
	{
		Name: "noise-unpinned-no-steering",
		Mechanism: "one host as it comes: no RPS on either veth, sender and server threads wherever the scheduler puts them " +
			"(a veth delivers on the sending CPU's backlog, so a migrating sender can reorder)",
		Fault:    "RPS off on both veths (control: each side steered to its CPU); the generator and its server unpinned in both runs",
		Families: []string{"tcp_conn", "tcp_retrans"},
		Load:     bulk,
		Workload: func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
			o.PinCPU, o.CPU = false, -1
			return generatorTo(nrPort, func(p *Pair, o load.Options) (func() string, error) {
				exe, err := os.Executable()
				if err != nil {
					return nil, fmt.Errorf("finding this binary for its load server: %w", err)
				}
				return p.Background(p.Receiver, exe, "load", "server", "--listen", fmt.Sprintf(":%d", nrPort))
			})(ctx, p, o)
		},
		Inject: func(p *Pair) error {
			for _, side := range []struct {
				ns  *host.Netns
				dev string
			}{{p.Sender, p.SenderDev}, {p.Receiver, p.ReceiverDev}} {
				if _, err := side.ns.Run("sh", "-c", "echo 0 > "+nrRPSPath(side.dev)); err != nil {
					return fmt.Errorf("turning RPS off on %s: %w", side.dev, err)
				}
			}
			return nil
		},
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			snd, _ := p.Sender.Run("cat", nrRPSPath(p.SenderDev))
			rcv, _ := p.Receiver.Run("cat", nrRPSPath(p.ReceiverDev))
			off := strings.Trim(strings.TrimSpace(snd), "0,") == "" && strings.Trim(strings.TrimSpace(rcv), "0,") == ""
			return fmt.Sprintf("RPS masks %s and %s; %d segments queued out of order at the receiver, %d reorderings and %d DSACKs seen by the sender "+
					"(both runs)", strings.TrimSpace(snd), strings.TrimSpace(rcv), counter(p.Receiver, "TcpExt.TCPOFOQueue"),
					counter(p.Sender, "TcpExt.TCPSACKReorder")+counter(p.Sender, "TcpExt.TCPTSReorder"), counter(p.Sender, "TcpExt.TCPDSACKRecv")),
				off && runtime.NumCPU() >= 2
		}),
	},
}

// nrPort is where these runs' own servers listen, and the closed port the
// refusal and blind UDP runs aim at.
const nrPort = 5321

// Python programs of these runs; each takes its settings as arguments.
const (
	// nrPyKeepaliveServer PORT: accepts connections, turns keepalive on for
	// each (the namespace's sysctls time it) and holds it.
	nrPyKeepaliveServer = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(128)
def hold(c):
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    try:
        while c.recv(4096):
            pass
    except OSError:
        pass
while True:
    threading.Thread(target=hold, args=(s.accept()[0],), daemon=True).start()
`
	// nrPyIdle HOST PORT N: opens N connections with SO_KEEPALIVE and no
	// timers of their own, and leaves them idle.
	nrPyIdle = `
import socket, sys, time
conns = []
for _ in range(int(sys.argv[3])):
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    conns.append(c)
time.sleep(3600)
`
	// nrPyDiscard PORT: accepts connections and reads until the peer closes
	// or resets them.
	nrPyDiscard = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(512)
def drain(c):
    try:
        while c.recv(65536):
            pass
    except OSError:
        pass
    c.close()
while True:
    threading.Thread(target=drain, args=(s.accept()[0],), daemon=True).start()
`
	// nrPyResetChurn HOST PORT: connect, write 100 bytes, close with a
	// reset (SO_LINGER 0), over and over.
	nrPyResetChurn = `
import socket, struct, sys
linger = struct.pack("ii", 1, 0)
while True:
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        c.sendall(b"x" * 100)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        c.close()
    except OSError:
        pass
`
	// nrPyRefused HOST PORT: tries to connect to a closed port, about 500
	// times a second.
	nrPyRefused = `
import socket, sys, time
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2]))).close()
    except OSError:
        pass
    time.sleep(0.002)
`
	// nrPyUDPBlind HOST PORT: 100-byte datagrams, about 500 a second,
	// whether anything listens or not.
	nrPyUDPBlind = `
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    try:
        s.sendto(b"m" * 100, (sys.argv[1], int(sys.argv[2])))
    except OSError:
        pass
    time.sleep(0.002)
`
)

// selfLoad starts this binary's traffic generator (skbtrace load ARGS) in
// ns, a process of its own: its socket calls are not the lab's.
func (p *Pair) selfLoad(ns *host.Netns, args ...string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary for its load generator: %w", err)
	}
	_, err = p.Background(ns, exe, append([]string{"load"}, args...)...)
	return err
}

// nrDevSNMP6 reads one counter of a device's /proc/net/dev_snmp6 file in ns.
func nrDevSNMP6(ns *host.Netns, dev, name string) int64 {
	out, err := ns.Run("cat", "/proc/net/dev_snmp6/"+dev)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// nrBytesAcked sums tcp_info's bytes_acked over ns's established
// connections to port: what a background flow has moved so far.
func nrBytesAcked(ns *host.Netns, port int) int64 {
	out, _ := ns.Run("ss", "-Htin", "state", "established", fmt.Sprintf("( dport = :%d )", port))
	var n int64
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "bytes_acked:"); ok {
			b, _ := strconv.ParseInt(v, 10, 64)
			n += b
		}
	}
	return n
}

// nrBefore holds counters read as the noise began, by pair and name, so
// that a verdict counts what changed during the fault run.
var nrBefore sync.Map

type nrKey struct {
	p    *Pair
	name string
}

func nrMark(p *Pair, name string, v int64) { nrBefore.Store(nrKey{p, name}, v) }

// nrSince is a counter's value nrMark kept, forgotten once read.
func nrSince(p *Pair, name string) int64 {
	v, _ := nrBefore.LoadAndDelete(nrKey{p, name})
	n, _ := v.(int64)
	return n
}

// nrRPSPath is a device's receive steering mask.
func nrRPSPath(dev string) string { return fmt.Sprintf("/sys/class/net/%s/queues/rx-0/rps_cpus", dev) }

// nrSleep waits ms milliseconds or until ctx ends.
func nrSleep(ctx context.Context, ms int) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(ms) * time.Millisecond):
	}
}
