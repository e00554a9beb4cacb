package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/skbtrace/skbtrace/internal/load"
)

// A UDP receiver whose application set a small SO_RCVBUF: its reader has
// time to spare, but the sender's bursts overflow the buffer; and its
// healthy control, a buffer set small that its traffic never fills.
func init() {
	Variants = append(Variants, udpVariants...)
	Noise = append(Noise, udpNoise...)
}

var udpVariants = []*Scenario{
	sockReceiverApp(&Scenario{
		Name:      "udp-rcvbuf-small",
		Mechanism: "a python3 UDP receiver sets SO_RCVBUF 4 KB; its sender's datagrams come in bursts its reader keeps up with on average",
		Fault: fmt.Sprintf("a python3 receiver with SO_RCVBUF 4096, a python3 sender of %d-byte datagrams in bursts of %d, %d a second (control: the default buffer)",
			udpBurstSize, udpBurst, udpBurstRate),
		Expect:   "packet-loss",
		Families: []string{"skb_drop", "sock_io"},
		Load:     load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: udpBurstSize},
		Workload: udpBurstWorkload(udpBurst, udpBurstRate),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, before := f.drops("SOCKET_RCVBUFF"), c.drops("SOCKET_RCVBUFF")
			return fmt.Sprintf("%d skb_drop [SOCKET_RCVBUFF], %d in the control; %.0f %% of the datagrams arrived, %.0f %% in the control; delivered %s",
					drops, before, netArrived(f)*100, netArrived(c)*100, change(c, f)),
				drops > 100 && before*10 < drops && netArrived(f) < 0.7*netArrived(c)
		},
	}, udpPyCountingSink, []string{"0"}, []string{"4096"}),
	sockReceiverApp(&Scenario{
		Name:      "udp-slow-reader",
		Mechanism: "a python3 UDP receiver with the default buffer pauses 1 ms after every 8 datagrams: it reads slower than its steady sender sends",
		Fault: fmt.Sprintf("a python3 receiver that pauses 1 ms after every 8 datagrams, the default buffer, a python3 sender of %d-byte datagrams in bursts of 10, %d a second (control: a reader without pauses, about 40,000 a second)",
			udpBurstSize, udpSteadyRate),
		Expect:   "packet-loss",
		Families: []string{"skb_drop", "sock_io"},
		Load:     load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: udpBurstSize},
		Workload: udpBurstWorkload(10, udpSteadyRate),
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			drops, before := f.drops("SOCKET_RCVBUFF"), c.drops("SOCKET_RCVBUFF")
			return fmt.Sprintf("%d skb_drop [SOCKET_RCVBUFF], %d in the control; %.0f %% of the datagrams arrived, %.0f %% in the control; delivered %s",
					drops, before, netArrived(f)*100, netArrived(c)*100, change(c, f)),
				drops > 100 && before*10 < drops && netArrived(f) < 0.7*netArrived(c)
		},
	}, udpPyCountingSink, []string{"0", "0"}, []string{"0", "0.001"}),
}

// udpSteadyRate is half of what a python3 reader without pauses reads
// here, and about twice what one pausing 1 ms every 8 datagrams can.
const udpSteadyRate = 20000

var udpNoise = []*Scenario{
	sockReceiverApp(&Scenario{
		Name:      "noise-udp-rcvbuf-set-unreached",
		Mechanism: "a UDP receiver's application sets SO_RCVBUF 16 KB, and its traffic never fills it",
		Fault:     "a python3 receiver with SO_RCVBUF 16384, a python3 sender of 1400-byte datagrams in pairs, 2,000 a second (control: the default buffer)",
		Families:  []string{"skb_drop", "sock_io"},
		Load:      load.Options{Mode: load.UDP, Duration: 2 * time.Second, Size: udpBurstSize},
		Workload:  udpBurstWorkload(2, 2000),
		Verdict: quietVerdict(func(c, f *Measurement, p *Pair) (string, bool) {
			drops := f.drops("SOCKET_RCVBUFF")
			return fmt.Sprintf("%d skb_drop [SOCKET_RCVBUFF]; %.0f %% of the datagrams arrived", drops, netArrived(f)*100), drops == 0
		}),
	}, udpPyCountingSink, []string{"0"}, []string{"16384"}),
}

// The burst sender's shape: a default buffer (212992 bytes) holds a burst
// of 50 such datagrams (about 2.3 KB each in the buffer's accounting), a 4
// KB one three; the reader, a python3 loop, reads about 40,000 a second
// here, four times the rate.
const (
	udpBurstSize = 1400
	udpBurst     = 50
	udpBurstRate = 10000
)

// udpPyCountingSink counts the datagrams it reads on argv[1] (argv[2] is
// SO_RCVBUF, 0 for the default; argv[3], if given, seconds to pause after
// every 8 datagrams) and tells the count to whoever connects to the same
// port over TCP.
const udpPyCountingSink = `
import socket, sys, threading, time
port, rcvbuf = int(sys.argv[1]), int(sys.argv[2])
pause = float(sys.argv[3]) if len(sys.argv) > 3 else 0
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if rcvbuf:
    u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
u.bind(("0.0.0.0", port))
n = 0
def tell():
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(8)
    while True:
        c, _ = l.accept()
        c.sendall(str(n).encode())
        c.close()
threading.Thread(target=tell, daemon=True).start()
buf = bytearray(65536)
while True:
    u.recv_into(buf)
    n += 1
    if pause and n % 8 == 0:
        time.sleep(pause)
`

// udpPyBurstSender sends argv[4]-byte datagrams in bursts of argv[5], at
// argv[6] datagrams a second.
const udpPyBurstSender = `
import json, socket, sys, time
host, port, secs, size, burst, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
data, n = b"u" * size, 0
start = time.monotonic()
while time.monotonic() - start < secs:
    for _ in range(burst):
        try:
            s.send(data)
            n += 1
        except OSError:
            pass
    wait = start + n / rate - time.monotonic()
    if wait > 0:
        time.sleep(wait)
print(json.dumps({"bytes": n * size, "ops": n, "seconds": time.monotonic() - start}))
`

// udpBurstWorkload runs the burst sender, bursts of burst datagrams at
// rate a second, and counts what the sink read meanwhile: the throughput
// is what arrived, Ops what was sent.
func udpBurstWorkload(burst, rate int) func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
	send := sockClient(udpPyBurstSender, func(o load.Options) []string {
		return []string{fmt.Sprint(o.Size), fmt.Sprint(burst), fmt.Sprint(rate)}
	})
	return func(ctx context.Context, p *Pair, o load.Options) (*load.Result, error) {
		before, err := udpSinkCount(p)
		if err != nil {
			return nil, err
		}
		sent, err := send(ctx, p, o)
		if err != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond) // the reader drains its queue
		after, err := udpSinkCount(p)
		if err != nil {
			return nil, err
		}
		sent.Received = after - before
		sent.Lost = sent.Ops - min(sent.Ops, sent.Received)
		sent.Bps = float64(sent.Received) * float64(o.Size) * 8 / sent.Seconds
		sent.OpsPerSec = float64(sent.Received) / sent.Seconds
		return sent, nil
	}
}

// udpSinkCount asks udpPyCountingSink how many datagrams it has read.
func udpSinkCount(p *Pair) (uint64, error) {
	var n uint64
	err := p.Sender.Do(func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ReceiverAddr.Addr().String(), fmt.Sprint(sockPort)), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		n, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("asking the python3 UDP receiver for its count: %w", err)
	}
	return n, nil
}
