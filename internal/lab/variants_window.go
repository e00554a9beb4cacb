package lab

import (
	"fmt"

	"github.com/skbtrace/skbtrace/internal/units"
)

func init() { Variants = append(Variants, windowVariants...) }

// windowClamp is the fault's TCP_WINDOW_CLAMP: on veth, whose round trip
// is tens of microseconds, 8 KiB holds a stream near 1.6 Gbit/s, a fifth
// of the control's.
const windowClamp = 8 << 10

// windowRcvbuf is the fault's SO_RCVBUF: far above what the stream keeps
// in flight, so that the clamp, not the buffer, holds the window.
const windowRcvbuf = 4 << 20

// windowVariants cap the receiver's window by something other than its
// buffer: the application's TCP_WINDOW_CLAMP, and a route's window metric.
var windowVariants = []*Scenario{
	sockReceiverApp(&Scenario{
		Name:      "rwnd-python-window-clamp",
		Mechanism: "the receiving application (python3) sets a roomy SO_RCVBUF and a small TCP_WINDOW_CLAMP on its socket; tcp_rmem left as it is",
		Fault: fmt.Sprintf("a python3 receiver sets SO_RCVBUF %d and, once data flows, TCP_WINDOW_CLAMP %d (at its 2nd, 64th and 1024th read: "+
			"6.18 resets a clamp when the buffer grows, which SO_RCVBUF stops, and when it measures the payload's share of the buffer anew), "+
			"the generator sending (control: neither)", windowRcvbuf, windowClamp),
		Expect:   "rwnd-limited",
		Families: []string{"tcp_conn", "tcp_sendlim"},
		Load:     bulk,
		Workload: sockGenerator,
		Verdict:  windowClampVerdict,
	}, windowPySink, []string{"0", "0"}, []string{fmt.Sprint(windowClamp), fmt.Sprint(windowRcvbuf)}),
	{
		Name: "rwnd-route-window",
		Mechanism: "the receiver's route back to the sender carries a window metric: the kernel copies it into the clamp at the " +
			"handshake and chooses the window scale from it (none below 64 KiB); autotuning lifts the clamp later, never the scale",
		Fault:    fmt.Sprintf("ip route change %s dev RECEIVER ... window %d in the receiver's namespace (control: no metric)", SenderAddr.Masked(), windowClamp),
		Expect:   "rwnd-limited",
		Families: []string{"tcp_conn", "tcp_sendlim"},
		Load:     bulk,
		Inject: func(p *Pair) error {
			_, err := p.Receiver.Run("ip", "route", "change", SenderAddr.Masked().String(), "dev", p.ReceiverDev, "proto", "kernel", "scope", "link",
				"src", ReceiverAddr.Addr().String(), "window", fmt.Sprint(windowClamp))
			return err
		},
		Fix: func(p *Pair) error {
			_, err := p.Receiver.Run("ip", "route", "change", SenderAddr.Masked().String(), "dev", p.ReceiverDev, "proto", "kernel", "scope", "link",
				"src", ReceiverAddr.Addr().String())
			return err
		},
		Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
			share, before := sockShare(f.sockSender(p), "swnd"), sockShare(c.sockSender(p), "swnd")
			return fmt.Sprintf("tcp_sendlim [swnd] %.0f %% of the sender's time (control %.0f %%); throughput %s", share*100, before*100, change(c, f)),
				share > 0.5 && share > 2*before
		},
	},
}

// windowPySink reads as fast as it can; argv[2] is the TCP_WINDOW_CLAMP it
// sets once data flows (0: none), argv[3] its SO_RCVBUF (0: autotuned).
const windowPySink = `
import socket, sys
port, clamp, rcvbuf = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if rcvbuf:
    l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
l.bind(("0.0.0.0", port))
l.listen(8)
buf = bytearray(256 << 10)
while True:
    c, _ = l.accept()
    n = 0
    while c.recv_into(buf):
        n += 1
        if clamp and n in (2, 64, 1024):
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
    c.close()
`

// windowClampVerdict: the sender waited for the receiver's window most of
// its time, its window stayed at the clamp, and the stream lost most of
// its throughput.
func windowClampVerdict(c, f *Measurement, p *Pair) (string, bool) {
	share, before := sockShare(f.sockSender(p), "swnd"), sockShare(c.sockSender(p), "swnd")
	return fmt.Sprintf("tcp_sendlim [swnd] %.0f %% of the sender's time (control %.0f %%); clamp %s; throughput %s",
		share*100, before*100, units.Bytes(windowClamp), change(c, f)), share > 0.5 && f.Load.Bps < 0.5*c.Load.Bps
}
