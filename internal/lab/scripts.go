package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
)

// Python programs some variants and noise runs use instead of the lab's
// generator: applications the doctor was not built on. Each takes its
// settings as arguments.
const (
	// pyListener PORT: accepts connections and holds them open, reading
	// whatever comes.
	pyListener = `
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(512)
def serve(c):
    while c.recv(65536):
        pass
    c.close()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
`
	// pyKeepalive HOST PORT N: opens N connections with keepalive probes
	// every second and leaves them idle.
	pyKeepalive = `
import socket, sys, time
conns = []
for _ in range(int(sys.argv[3])):
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    conns.append(c)
time.sleep(3600)
`
	// pyChurn HOST PORT: opens a connection, writes 100 bytes and closes it,
	// over and over.
	pyChurn = `
import socket, sys
while True:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    c.sendall(b"x" * 100)
    c.close()
`
	// pySlowWriter HOST PORT: a TCP stream at about 10 Mbit/s, 12.5 KB every
	// 10 ms (iperf3 -b spins a CPU to keep its rate).
	pySlowWriter = `
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
while True:
    c.sendall(b"s" * 12500)
    time.sleep(0.01)
`
	// pyUDPPinger HOST PORT: small UDP requests, a hundred a second.
	pyUDPPinger = `
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    s.sendto(b"q" * 64, (sys.argv[1], int(sys.argv[2])))
    time.sleep(0.01)
`
	// pyUDPEcho PORT: answers each datagram with one of 200 bytes.
	pyUDPEcho = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
while True:
    _, peer = s.recvfrom(2048)
    s.sendto(b"a" * 200, peer)
`
)

// python starts a script in ns for the rest of the pair's life.
func (p *Pair) python(ns *host.Netns, script string, args ...any) error {
	argv := []string{"-c", script}
	for _, a := range args {
		argv = append(argv, fmt.Sprint(a))
	}
	_, err := p.Background(ns, "python3", argv...)
	return err
}

// serveThen starts a server in the receiver, waits until it listens on
// port, then starts its client.
func (p *Pair) serveThen(port int, server, client func() error) error {
	if err := server(); err != nil {
		return err
	}
	if err := waitListening(context.Background(), p.Receiver, port); err != nil {
		return err
	}
	return client()
}

// pythonServed is serveThen of two python scripts: the server gets the
// port, the client the receiver's address, the port and clientArgs.
func (p *Pair) pythonServed(server string, port int, client string, clientArgs ...any) error {
	return p.serveThen(port,
		func() error { return p.python(p.Receiver, server, port) },
		func() error {
			return p.python(p.Sender, client, append([]any{ReceiverAddr.Addr(), port}, clientArgs...)...)
		})
}

// generatorTo is a workload of the lab's generator against a server of the
// variant's on another port; serve starts that server for the run's options
// (the fault's changes arrive through them), killed after the run.
func generatorTo(port int, serve func(p *Pair, o load.Options) (stop func() string, err error)) func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	return func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
		stop, err := serve(p, o)
		if err != nil {
			return nil, err
		}
		defer stop()
		if err := waitListening(ctx, p.Receiver, port); err != nil {
			return nil, err
		}
		host, _, _ := strings.Cut(o.Addr, ":")
		o.Addr = fmt.Sprintf("%s:%d", host, port)
		o.RcvBuf = 0 // the fault's receive buffer is the server's
		return load.Run(ctx, o, nil)
	}
}

// snmp6 reads one counter of a namespace's /proc/net/snmp6 (Icmp6OutMsgs ...).
func snmp6(ns *host.Netns, name string) uint64 {
	out, err := ns.Run("cat", "/proc/net/snmp6")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// counter reads one counter of a namespace's /proc/net/snmp or netstat
// ("Tcp.PassiveOpens", "Icmp.InEchos").
func counter(ns *host.Netns, name string) int64 {
	var c host.Counters
	if err := ns.Do(func() (err error) { c, err = host.ReadCounters(); return err }); err != nil {
		return 0
	}
	return c[name]
}

// established counts a namespace's established TCP connections to port.
func established(ns *host.Netns, port int) int {
	out, _ := ns.Run("ss", "-Htn", "state", "established", fmt.Sprintf("( dport = :%d )", port))
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}
