package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

func init() { Variants = append(Variants, sockVariants...) }

// sockVariants build the socket-side findings (send and receive buffers,
// Nagle, small packets, CPU) by other mechanisms than the lab's own
// scenarios: python3 applications that set their own socket options, read
// slowly or do work of their own, iperf3, the server's end of the
// connection, and CPU taken by other processes.
var sockVariants = []*Scenario{
	{
		Name:      "sndbuf-python-sndbuf",
		Mechanism: "a python3 sender sets SO_SNDBUF itself, to a python3 receiver",
		Fault:     "the python3 sender sets SO_SNDBUF to 16 KB (control: autotuned)",
		Expect:    "sndbuf-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      sockBulk,
		FaultLoad: func(o *load.Options) { o.SndBuf = 16 << 10 },
		FixLoad:   func(o *load.Options) { o.SndBuf = 0 },
		Prepare:   sockFastSink,
		Workload:  sockClient(sockPyBulk, sockBulkArgs),
		Verdict:   sockSndbufVerdict,
	},
	{
		Name:      "sndbuf-iperf3-reverse",
		Mechanism: "the other end sends: iperf3 -R, the server's namespace with a small tcp_wmem maximum",
		Fault:     "iperf3 -R (the server in the receiver's namespace sends), net.ipv4.tcp_wmem = 4096 4096 8192 there (control: the default)",
		Expect:    "sndbuf-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Workload:  iperf3("-R"),
		Inject:    func(p *Pair) error { return sysctl(p.Receiver, "net.ipv4.tcp_wmem", "4096 4096 8192") },
		Fix:       func(p *Pair) error { return sysctl(p.Receiver, "net.ipv4.tcp_wmem", defaultWmem) },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			share, before := sockShare(f.sockServerConn(p), "sndbuf"), sockShare(c.sockServerConn(p), "sndbuf")
			return fmt.Sprintf("tcp_sendlim [sndbuf] %.0f %% of the server's sending time (control %.0f %%); throughput %s",
				share*100, before*100, change(c, f)), share > 0.5 && f.Load.Bps < 0.7*c.Load.Bps
		},
	},
	sockReader(&Scenario{
		Name:      "rwnd-python-slow-reader",
		Mechanism: "the receiving application (python3) sets SO_RCVBUF 8 KB and reads 4 KB a millisecond; tcp_rmem's maximum stays large",
		Fault:     "a python3 receiver with SO_RCVBUF 8 KB reading 4 KB then sleeping 1 ms, the generator sending (control: autotuned, reading 256 KB at once)",
		Expect:    "rwnd-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      bulk,
		Workload:  sockGenerator,
		Verdict:   sockRwndVerdict,
	}, sockSinkArgs{rcvbuf: 8 << 10, chunk: 4 << 10, pause: time.Millisecond}),
	sockStalledReader(),
	{
		Name:      "nagle-python-rr",
		Mechanism: "python3 request/response: the client writes each request in two parts, Nagle on",
		Fault:     "a python3 client writes 100-byte requests in two 50-byte writes, a python3 server answers 10 bytes (control: TCP_NODELAY)",
		Expect:    "nagle-delay",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      load.Options{Mode: load.RR, Duration: 2 * time.Second, Size: 100, Response: 10, Writes: 2, NoDelay: true, CC: "cubic"},
		FaultLoad: func(o *load.Options) { o.NoDelay = false },
		FixLoad:   func(o *load.Options) { o.NoDelay = true },
		Prepare: func(p *Pair) error {
			_, err := sockServer(p, false, sockPyReply, "100", "10", "1")
			return err
		},
		Workload: sockClient(sockPyRRClient, sockRRArgs),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			nagle := sockCount(f.sockSender(p), "nagle")
			return fmt.Sprintf("%d tcp_sendlim [nagle] decisions; %.0f transactions/s against %.0f with TCP_NODELAY",
				nagle, f.Load.OpsPerSec, c.Load.OpsPerSec), nagle > 0 && f.Load.OpsPerSec*5 < c.Load.OpsPerSec
		},
	},
	sockReceiverApp(&Scenario{
		Name:      "nagle-python-server-reply",
		Mechanism: "the other end: the server writes each reply in two parts with Nagle on, the client has TCP_NODELAY",
		Fault:     "a python3 server answers each 100-byte request with a 10-byte header and a 100-byte body, two writes, Nagle on (control: the server sets TCP_NODELAY)",
		Expect:    "nagle-delay",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      load.Options{Mode: load.RR, Duration: 2 * time.Second, Size: 100, Response: 110, Writes: 1, NoDelay: true, CC: "cubic"},
		Workload:  sockClient(sockPyRRClient, sockRRArgs),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			nagle := sockCount(f.sockServerConn(p), "nagle")
			return fmt.Sprintf("%d tcp_sendlim [nagle] decisions on the server's socket; %.0f transactions/s against %.0f with its TCP_NODELAY",
				nagle, f.Load.OpsPerSec, c.Load.OpsPerSec), nagle > 0 && f.Load.OpsPerSec*5 < c.Load.OpsPerSec
		},
	}, sockPyReply, []string{"100", "10,100", "1"}, []string{"100", "10,100", "0"}),
	{
		Name:      "small-packet-iperf3-writes",
		Mechanism: "iperf3 TCP in 100-byte writes, Nagle on: segments coalesce, the cost is per write call, not per packet",
		Fault:     "iperf3 -l 100 (control: iperf3's 128 KB writes), Nagle on in both",
		Expect:    "small-packet-bound",
		Families:  []string{"tcp_conn", "sock_io", "dev_xmit"},
		Load:      load.Options{Mode: load.Bulk, Duration: 2 * time.Second, Size: 128 << 10, CC: "cubic"},
		FaultLoad: func(o *load.Options) { o.Size = 100 },
		FixLoad:   func(o *load.Options) { o.Size = 128 << 10 },
		Workload: func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
			return iperf3("-l", fmt.Sprint(o.Size))(ctx, p, o)
		},
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			calls, before := f.sockCallsOf("iperf3", "send"), c.sockCallsOf("iperf3", "send")
			segs := f.device(p.SenderDev).Xmit.SegsPerSkb()
			return fmt.Sprintf("%.0f send calls/s of 100 bytes against %.0f of 128 KB; %.1f segments per skb; %s against %s",
					calls, before, segs, units.Bits(f.Load.Bps), units.Bits(c.Load.Bps)),
				calls > 20000 && calls > 2*before && f.Load.Bps < 0.2*c.Load.Bps
		},
	},
	{
		Name:      "small-packet-tcp-nodelay",
		Mechanism: "TCP, not UDP: 64-byte writes with TCP_NODELAY, each its own segment",
		Fault:     "the generator streams 64-byte writes with TCP_NODELAY (control: 1400-byte writes)",
		Expect:    "small-packet-bound",
		Families:  []string{"tcp_conn", "sock_io", "softirq"},
		Load:      load.Options{Mode: load.Bulk, Duration: 2 * time.Second, Size: 1400, NoDelay: true, CC: "cubic"},
		FaultLoad: func(o *load.Options) { o.Size = 64 },
		FixLoad:   func(o *load.Options) { o.Size = 1400 },
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return sockSmallVerdict(c, f, c.sendCalls(), f.sendCalls())
		},
	},
	{
		Name:      "small-packet-iperf3-udp",
		Mechanism: "iperf3 -u -l 64: another tool's UDP sender",
		Fault:     "iperf3 -u -b 0 -l 64 (control: -l 1400)",
		Expect:    "small-packet-bound",
		Families:  []string{"sock_io", "softirq"},
		Load:      load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: 1400},
		FaultLoad: func(o *load.Options) { o.Size = 64 },
		FixLoad:   func(o *load.Options) { o.Size = 1400 },
		Workload:  iperf3(),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return sockSmallVerdict(c, f, c.sockCallsOf("iperf3", "send"), f.sockCallsOf("iperf3", "send"))
		},
	},
	{
		Name:      "small-packet-python-udp",
		Mechanism: "a python3 UDP sender: an interpreter's cost on every datagram",
		Fault:     "a python3 sender of 64-byte datagrams to a python3 receiver (control: 1400 bytes)",
		Expect:    "small-packet-bound",
		Families:  []string{"sock_io", "softirq"},
		Load:      load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: 1400},
		FaultLoad: func(o *load.Options) { o.Size = 64 },
		FixLoad:   func(o *load.Options) { o.Size = 1400 },
		Prepare: func(p *Pair) error {
			_, err := sockServer(p, true, sockPyUDPSink)
			return err
		},
		Workload: sockClient(sockPyUDP, func(o load.Options) []string { return []string{fmt.Sprint(o.Size)} }),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			return sockSmallVerdict(c, f, c.sockCallsOf("python3", "send"), f.sockCallsOf("python3", "send"))
		},
	},
	{
		Name:      "cpu-python-hog-receiver",
		Mechanism: "another process (a python3 busy loop pinned with taskset) on the receiver's CPU",
		Fault:     "a python3 busy loop pinned to CPU 1, the receiver's (control: none)",
		Expect:    "cpu-saturated",
		Families:  []string{"tcp_conn", "softirq"},
		Load:      bulk,
		During:    sockHog(1),
		Fix:       func(p *Pair) error { return nil },
		Verdict:   sockCPUVerdict(1),
	},
	sockReceiverApp(&Scenario{
		Name:      "cpu-receiver-app-work",
		Mechanism: "the receiving application's own work: it hashes (BLAKE2b) every byte it reads, on the receiver's CPU",
		Fault:     "a python3 receiver computes a BLAKE2b digest of the stream as it reads it (control: it only reads)",
		Expect:    "cpu-saturated",
		Families:  []string{"tcp_conn", "tcp_sendlim", "softirq"},
		Load:      bulk,
		Workload:  sockGenerator,
		Verdict:   sockAppWorkVerdict,
	}, sockPySink, sockSinkArgs{chunk: 256 << 10}.argv(), sockSinkArgs{chunk: 64 << 10, digest: true}.argv()),
	{
		Name:      "cpu-python-hog-sender",
		Mechanism: "another process on the sender's CPU, not the receiver's",
		Fault:     "a python3 busy loop pinned to CPU 0, the sender's (control: none)",
		Expect:    "cpu-saturated",
		Families:  []string{"tcp_conn", "softirq"},
		Load:      bulk,
		During:    sockHog(0),
		Fix:       func(p *Pair) error { return nil },
		Verdict:   sockCPUVerdict(0),
	},
}

// sockBulk is the lab's bulk load for a python3 sender: 128 KB writes.
var sockBulk = load.Options{Mode: load.Bulk, Duration: 2 * time.Second, Size: 128 << 10, CC: "cubic"}

// sockPort is where a variant's python3 server listens in the receiver's
// namespace, beside the lab's generator (Port) and iperf3 (iperf3Port).
const sockPort = 5401

// sockPySink is a TCP receiving application: argv port, SO_RCVBUF (0:
// autotuned), bytes per read, a pause in seconds (0: none), how long it
// reads between pauses (0: pause after every read), and whether it digests
// what it reads (BLAKE2b, about 3 Gbit/s of one CPU here).
const sockPySink = `
import hashlib, socket, sys, time
port, rcvbuf, chunk, pause, burst, digest = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if rcvbuf:
    l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
l.bind(("0.0.0.0", port))
l.listen(8)
buf = bytearray(chunk)
while True:
    c, _ = l.accept()
    h, view, since = hashlib.blake2b(), memoryview(buf), time.monotonic()
    while True:
        n = c.recv_into(buf)
        if not n:
            break
        if digest:
            h.update(view[:n])
        if pause and time.monotonic() - since >= burst:
            time.sleep(pause)
            since = time.monotonic()
    c.close()
`

// sockPyReply answers each request of argv[2] bytes with writes of the
// sizes argv[3] lists (comma-separated); argv[4] is TCP_NODELAY.
const sockPyReply = `
import socket, sys
port, req, parts, nodelay = int(sys.argv[1]), int(sys.argv[2]), [int(n) for n in sys.argv[3].split(",")], int(sys.argv[4])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", port))
l.listen(8)
pieces = [b"r" * n for n in parts]
while True:
    c, _ = l.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, nodelay)
    while True:
        got = 0
        while got < req:
            b = c.recv(req - got)
            if not b:
                break
            got += len(b)
        if got < req:
            break
        for piece in pieces:
            c.sendall(piece)
    c.close()
`

// sockPyUDPSink reads datagrams on argv[1] and drops them.
const sockPyUDPSink = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
buf = bytearray(65536)
while True:
    s.recv_into(buf)
`

// The clients get host, port and seconds, then their own arguments, and
// print what they moved as JSON.

// sockPyBulk writes argv[4] bytes at a time; argv[5] is SO_SNDBUF (0:
// autotuned), argv[6] TCP_NODELAY.
const sockPyBulk = `
import json, socket, sys, time
host, port, secs, size, sndbuf, nodelay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
if sndbuf:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
s.connect((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, nodelay)
data, n = b"b" * size, 0
start = time.monotonic()
while time.monotonic() - start < secs:
    s.sendall(data)
    n += 1
print(json.dumps({"bytes": n * size, "ops": n, "seconds": time.monotonic() - start}))
`

// sockPyRRClient sends requests of argv[4] bytes in argv[5] writes and
// waits for argv[6] bytes of response; argv[7] is TCP_NODELAY.
const sockPyRRClient = `
import json, socket, sys, time
host, port, secs, size, parts, resp, nodelay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
s = socket.socket()
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
s.connect((host, port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, nodelay)
piece, n = b"q" * (size // parts), 0
start = time.monotonic()
while time.monotonic() - start < secs:
    for _ in range(parts):
        s.sendall(piece)
    got = 0
    while got < resp:
        b = s.recv(resp - got)
        if not b:
            sys.exit("the server closed the connection")
        got += len(b)
    n += 1
print(json.dumps({"bytes": n * size, "ops": n, "seconds": time.monotonic() - start}))
`

// sockPyUDP sends datagrams of argv[4] bytes as fast as it can.
const sockPyUDP = `
import json, socket, sys, time
host, port, secs, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
data, n = b"u" * size, 0
start = time.monotonic()
while time.monotonic() - start < secs:
    for _ in range(1000):
        try:
            s.send(data)
            n += 1
        except OSError:
            pass
print(json.dumps({"bytes": n * size, "ops": n, "seconds": time.monotonic() - start}))
`

func sockBulkArgs(o load.Options) []string {
	return []string{fmt.Sprint(o.Size), fmt.Sprint(o.SndBuf), sockFlag(o.NoDelay)}
}

func sockRRArgs(o load.Options) []string {
	return []string{fmt.Sprint(o.Size), fmt.Sprint(o.Writes), fmt.Sprint(o.Response), sockFlag(o.NoDelay)}
}

func sockFlag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// sockOnCPU runs a command on one CPU in the two-hosts emulation
// (Pair.TwoHosts), as the lab pins its generator and server.
func sockOnCPU(cpu int, name string, args ...string) (string, []string) {
	if runtime.NumCPU() < 2 {
		return name, args
	}
	return "taskset", append([]string{"-c", fmt.Sprint(cpu), name}, args...)
}

// sockServer starts a python3 server script in the receiver's namespace, on
// the receiver's CPU, with sockPort and args, and waits until it is bound.
func sockServer(p *Pair, udp bool, script string, args ...string) (stop func() string, err error) {
	name, cargs := sockOnCPU(1, "python3", append([]string{"-c", script, fmt.Sprint(sockPort)}, args...)...)
	if stop, err = p.Background(p.Receiver, name, cargs...); err != nil {
		return nil, err
	}
	if udp {
		err = sockWaitUDP(p.Receiver, sockPort)
	} else {
		err = waitListening(context.Background(), p.Receiver, sockPort)
	}
	if err != nil {
		return nil, fmt.Errorf("python3 server: %w: %s", err, stop())
	}
	return stop, nil
}

// sockWaitUDP waits until something in ns is bound to the UDP port.
func sockWaitUDP(ns *host.Netns, port int) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if out, _ := ns.Run("ss", "-Huln", fmt.Sprintf("sport = :%d", port)); strings.TrimSpace(out) != "" {
			return nil
		}
	}
	return fmt.Errorf("nothing is bound to udp port %d in %s after 5s", port, ns.Name)
}

// sockFastSink is a python3 receiver reading as fast as it can.
func sockFastSink(p *Pair) error {
	_, err := sockServer(p, false, sockPySink, sockSinkArgs{chunk: 256 << 10}.argv()...)
	return err
}

// sockSinkArgs describe how sockPySink reads.
type sockSinkArgs struct {
	rcvbuf, chunk int
	pause, burst  time.Duration
	digest        bool
}

func (a sockSinkArgs) argv() []string {
	return []string{fmt.Sprint(a.rcvbuf), fmt.Sprint(a.chunk), fmt.Sprint(a.pause.Seconds()), fmt.Sprint(a.burst.Seconds()), sockFlag(a.digest)}
}

// sockReceiverApp makes the receiving application the fault: Prepare starts
// a python3 server script with the control's arguments, Inject replaces it
// by one with the fault's, and Fix puts the control's back.
func sockReceiverApp(s *Scenario, script string, control, fault []string) *Scenario {
	var stop func() string
	start := func(p *Pair, args []string) (err error) {
		if stop != nil {
			stop() // the previous server, or an earlier pair's (already ended)
		}
		stop, err = sockServer(p, false, script, args...)
		return err
	}
	s.Prepare = func(p *Pair) error { return start(p, control) }
	s.Inject = func(p *Pair) error { return start(p, fault) }
	s.Fix = func(p *Pair) error { return start(p, control) }
	s.FixIsApp = true
	return s
}

// sockReader is a receiving application that reads as slow says, against
// a control that reads as fast as it can.
func sockReader(s *Scenario, slow sockSinkArgs) *Scenario {
	return sockReceiverApp(s, sockPySink, sockSinkArgs{chunk: 256 << 10}.argv(), slow.argv())
}

// sockClient is a workload of a python3 client script in the sender's
// namespace, on the sender's CPU: it gets the receiver's address, sockPort,
// the run's seconds and args(o), and prints {"bytes", "ops", "seconds"}.
func sockClient(script string, args func(o load.Options) []string) func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	return func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
		host, _, _ := strings.Cut(o.Addr, ":")
		name, cargs := sockOnCPU(0, "python3", append([]string{"-c", script, host, fmt.Sprint(sockPort),
			fmt.Sprint(o.Duration.Seconds())}, args(o)...)...)
		out, err := p.Sender.Output(exec.CommandContext(ctx, name, cargs...))
		if err != nil {
			return nil, fmt.Errorf("python3 client: %w", err)
		}
		var r struct {
			Bytes, Ops uint64
			Seconds    float64
		}
		if err := json.Unmarshal(out, &r); err != nil {
			return nil, fmt.Errorf("reading the python3 client's result %q: %w", out, err)
		}
		if r.Seconds <= 0 {
			return nil, fmt.Errorf("the python3 client reported no time: %s", out)
		}
		return &load.Result{Mode: o.Mode, Streams: 1, Seconds: r.Seconds, Bytes: r.Bytes, Ops: r.Ops,
			Bps: float64(r.Bytes) * 8 / r.Seconds, OpsPerSec: float64(r.Ops) / r.Seconds}, nil
	}
}

// sockGenerator is the lab's generator aimed at sockPort, where a variant's
// own receiving application listens instead of the lab's server.
func sockGenerator(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	host, _, _ := strings.Cut(o.Addr, ":")
	o.Addr = net.JoinHostPort(host, fmt.Sprint(sockPort))
	return load.Run(ctx, o, nil)
}

// sockHog runs a python3 busy loop on cpu, in its own process, until the
// fault run ends.
func sockHog(cpu int) func(ctx context.Context, p *Pair) {
	return func(ctx context.Context, p *Pair) {
		if runtime.NumCPU() < 2 {
			return
		}
		ns := p.Receiver
		if cpu == 0 {
			ns = p.Sender
		}
		name, args := sockOnCPU(cpu, "python3", "-c", "while True: pass")
		stop, err := p.Background(ns, name, args...)
		if err != nil {
			return
		}
		<-ctx.Done()
		stop()
	}
}

// sockCallsOf is a process's socket calls per second in one direction, as
// sock_io counted them, found by its command name (the busiest of the name).
func (m *Measurement) sockCallsOf(comm, dir string) float64 {
	var best *analyze.SockIOStat
	for _, p := range m.Stat.SockIO {
		if p.Comm == comm && p.Dir == dir && p.Seconds > 0 && (best == nil || p.Calls > best.Calls) {
			best = p
		}
	}
	if best == nil {
		return 0
	}
	return float64(best.Calls) / min(best.Seconds, m.Load.Seconds)
}

// sockSmallVerdict: at least the doctor's 20 000 send calls per second, of
// the order of the control's, for a fifth of the bits or less: the cost is
// per packet (a per-byte cost would give 64-byte writes 22 times the
// control's calls). "Of the order" is more than 0.15 of the control's: the
// fault run alone is watched by the doctor, whose cost is per call, and
// sock_io is sampled by default, so its rates swing (CI read 0.46 and 0.21
// of the control, where this machine had read over 0.5).
func sockSmallVerdict(c, f *Measurement, controlCalls, faultCalls float64) (string, bool) {
	return fmt.Sprintf("%.0f send calls/s of 64 bytes against %.0f of 1400; %s against %s: the cost is per packet",
			faultCalls, controlCalls, units.Bits(f.Load.Bps), units.Bits(c.Load.Bps)),
		faultCalls > 20000 && faultCalls > 0.15*controlCalls && f.Load.Bps < 0.2*c.Load.Bps
}

// sockCPUVerdict: the CPU was busy all the run and user-space work on it
// grew well beyond the control's: the competing work. The throughput is
// only shown: a hog costs 15-50 % on an idle VM, within this VM's drift
// between two 2-second runs (a sender-side run beside other work measured
// the fault 33 % faster than its control; in CI a receiver-side control
// ran at half its usual rate, and the fault came within 6 % of it).
func sockCPUVerdict(cpu int) func(c, f *Measurement, p *Pair) (string, bool) {
	return func(c, f *Measurement, p *Pair) (string, bool) {
		busy, before := f.cpuBusy(cpu), c.cpuBusy(cpu)
		user, userBefore := f.sockCPUUser(cpu), c.sockCPUUser(cpu)
		return fmt.Sprintf("CPU %d busy %.0f %% of the run, %.0f %% in user space (control %.0f %%, %.0f %%); throughput %s",
				cpu, busy*100, user*100, before*100, userBefore*100, change(c, f)),
			runtime.NumCPU() >= 2 && busy > 0.95 && user > userBefore+0.15
	}
}

// sockAppWorkVerdict: the receiver's CPU went to user space (the digest),
// the sender waited for the window the reader opened slower, and throughput
// fell. The busy share is shown, not judged: the control's reader keeps
// that CPU 90 % busy too.
func sockAppWorkVerdict(c, f *Measurement, p *Pair) (string, bool) {
	user, userBefore := f.sockCPUUser(1), c.sockCPUUser(1)
	swnd := sockShare(f.sockSender(p), "swnd")
	return fmt.Sprintf("CPU 1 %.0f %% in user space (control %.0f %%), busy %.0f %% (control %.0f %%); tcp_sendlim [swnd] %.0f %% of the sender's time; throughput %s",
			user*100, userBefore*100, f.cpuBusy(1)*100, c.cpuBusy(1)*100, swnd*100, change(c, f)),
		runtime.NumCPU() >= 2 && user > 0.5 && user > userBefore+0.3 && swnd > 0.8 && f.Load.Bps < 0.5*c.Load.Bps
}

// sockCPUUser is the share of a CPU's time it spent in user space during the run.
func (m *Measurement) sockCPUUser(cpu int) float64 {
	if cpu >= len(m.CPU) {
		return 0
	}
	return m.CPU[cpu].User
}

// sockSndbufVerdict is sndbufVerdict on this pair's sender.
func sockSndbufVerdict(c, f *Measurement, p *Pair) (string, bool) {
	return sndbufJudged(sockShare(f.sockSender(p), "sndbuf"), sockShare(c.sockSender(p), "sndbuf"), c, f)
}

// sockRwndVerdict: the sender waited for the peer's window most of its
// time, each wait far longer than the control's, and lost throughput for it.
// The control's python reader is CPU-bound: it holds the sender by the
// window too (29-72 % of the time here), in waits of 11-19 ms against the
// slow reader's 670-680 ms, so the share cannot tell them apart.
func sockRwndVerdict(c, f *Measurement, p *Pair) (string, bool) {
	share, before := sockShare(f.sockSender(p), "swnd"), sockShare(c.sockSender(p), "swnd")
	run, runBefore := sockMeanRun(f.sockSender(p), "swnd"), sockMeanRun(c.sockSender(p), "swnd")
	return fmt.Sprintf("tcp_sendlim [swnd] %.0f %% of the sender's time (control %.0f %%), %s per wait (control %s); throughput %s",
		share*100, before*100, units.Duration(run), units.Duration(runBefore), change(c, f)), share > 0.5 && run >= 10*runBefore && f.Load.Bps < 0.7*c.Load.Bps
}

// sockStalledReader is a receiving application that stops reading for
// stretches longer than the sender's retransmission timeout. Its proof is
// how long the window stays shut: a CPU-bound reader closes it too, hundreds
// of times a run here, but reopens it within a few milliseconds; this one
// keeps it shut tens of milliseconds per stall, sometimes long enough for
// zero-window probes. The [swnd] share is shown, not judged: a decision run
// ends at its last decision, and the silence after it counts for no reason.
func sockStalledReader() *Scenario {
	return sockReader(&Scenario{
		Name:      "rwnd-python-stalled-reader",
		Mechanism: "the receiving application (python3) stops reading for long stretches: the window stays closed, the sender probes it",
		Fault:     "a python3 receiver reads 50 ms, then stops 400 ms, over and over (buffers autotuned), a python3 sender (control: reading all the time)",
		Expect:    "rwnd-limited",
		Families:  []string{"tcp_conn", "tcp_sendlim"},
		Load:      sockBulk,
		Workload:  sockClient(sockPyBulk, sockBulkArgs),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			s, cs := f.sockSender(p), c.sockSender(p)
			stall, before := sockMeanRun(s, "swnd"), sockMeanRun(cs, "swnd")
			probed := uint64(0)
			if s != nil {
				probed = s.ProbedRuns
			}
			return fmt.Sprintf("the window stayed shut %s per [swnd] run on average (control %s), %d runs with zero-window probes unanswered; [swnd] %.0f %% of the sender's time (control %.0f %%); throughput %s",
					units.Duration(stall), units.Duration(before), probed, sockShare(s, "swnd")*100, sockShare(cs, "swnd")*100, change(c, f)),
				(probed > 0 || stall >= 20*time.Millisecond && stall > 2*before) && f.Load.Bps < 0.5*c.Load.Bps
		},
	}, sockSinkArgs{chunk: 256 << 10, pause: 400 * time.Millisecond, burst: 50 * time.Millisecond})
}

// sockConn is the load's connection as one end saw it: of the connections
// in ns to the other end's address, the one with the most send decisions.
// Every pair has the same addresses, so the namespace tells this pair's
// connections from another run's the recording may have caught. A
// dual-stack server (iperf3's) names its peer by a v4-mapped IPv6 address.
func (m *Measurement) sockConn(ns *host.Netns, to netip.Addr) *analyze.ConnStat {
	ino, err := ns.Inode()
	if err != nil {
		return nil
	}
	var best *analyze.ConnStat
	for _, c := range m.Stat.Connections {
		peer, err := netip.ParseAddrPort(c.Peer)
		if err == nil && c.Netns == ino && peer.Addr().Unmap() == to && (best == nil || sum(c.LimitCount()) > sum(best.LimitCount())) {
			best = c
		}
	}
	return best
}

// sockSender is the load's sending connection in the sender's namespace.
func (m *Measurement) sockSender(p *Pair) *analyze.ConnStat {
	return m.sockConn(p.Sender, ReceiverAddr.Addr())
}

// sockServerConn is the load's connection as the server in the receiver's
// namespace saw it (a download, a reply).
func (m *Measurement) sockServerConn(p *Pair) *analyze.ConnStat {
	return m.sockConn(p.Receiver, SenderAddr.Addr())
}

// sockShare is a send-limit reason's share of a connection's time.
func sockShare(c *analyze.ConnStat, reason string) float64 {
	if c == nil {
		return 0
	}
	return c.LimitShares()[reason]
}

// sockMeanRun is how long a send-limit reason's runs lasted on average.
func sockMeanRun(c *analyze.ConnStat, reason string) time.Duration {
	if c == nil || c.LimitRuns()[reason] == 0 {
		return 0
	}
	return (time.Duration(c.LimitNs()[reason]) / time.Duration(c.LimitRuns()[reason])).Round(time.Millisecond / 10)
}

// sockCount is a send-limit reason's decisions on a connection.
func sockCount(c *analyze.ConnStat, reason string) uint64 {
	if c == nil {
		return 0
	}
	return c.LimitCount()[reason]
}
