package lab

import (
	"fmt"
	"strings"
)

func init() { Noise = append(Noise, reorderNoise...) }

// reorderNoise are healthy streams whose path reorders: many segments are
// retransmitted, nearly all needlessly (the receiver reports each
// duplicate with a DSACK, or discards a late copy by PAWS), and none is
// lost. The doctor must call none of it packet loss.
var reorderNoise = []*Scenario{
	{
		Name: "noise-reordered-ifb",
		Mechanism: "reordering without loss: a u32 filter on the receiver's ingress sends the skbs whose IP ID is odd through an ifb " +
			"device whose tbf (10 Gbit/s, a 16 MB queue that never fills) delays them behind the others",
		Fault: "the receiver's veth redirects its ingress skbs with an odd IP ID to an ifb device with tbf rate 10gbit limit 16mb " +
			"(control: no filter)",
		Families: []string{"tcp_conn", "tcp_retrans", "tcp_cong", "skb_drop"},
		Load:     bulk,
		Inject: func(p *Pair) error {
			ifb := netIfb(p)
			for _, cmd := range [][]string{
				{"ip", "link", "add", ifb, "type", "ifb"},
				{"ip", "link", "set", ifb, "up"},
				{"tc", "qdisc", "add", "dev", ifb, "root", "tbf", "rate", "10gbit", "burst", "64kb", "limit", "16mb"},
				{"tc", "qdisc", "add", "dev", p.ReceiverDev, "handle", "ffff:", "ingress"},
				{"tc", "filter", "add", "dev", p.ReceiverDev, "parent", "ffff:", "protocol", "ip", "prio", "1", "u32",
					"match", "ip", "protocol", "6", "0xff", "match", "u16", "0x0001", "0x0001", "at", "4",
					"action", "mirred", "egress", "redirect", "dev", ifb},
			} {
				if _, err := p.Receiver.Run(cmd[0], cmd[1:]...); err != nil {
					return err
				}
			}
			return nil
		},
		// Reordered, not lost: the sender retransmitted, the receiver
		// proved most of it needless, and the ifb's queue dropped nothing.
		// The detour costs the stream most of its rate by itself (each
		// needless retransmission halves the window until the DSACK undoes
		// it; 7.9 against 32.8 Gbit/s on an idle host): it need keep a tenth.
		Verdict: quietVerdictAbove(0.1, func(c, f *Measurement, p *Pair) (string, bool) {
			retrans, dups := counter(p.Sender, "Tcp.RetransSegs"), counter(p.Sender, "TcpExt.TCPDSACKRecvSegs")
			out, _ := p.Receiver.Run("tc", "-s", "qdisc", "show", "dev", netIfb(p))
			dropped := strings.Contains(out, "(dropped ") && !strings.Contains(out, "(dropped 0,")
			return fmt.Sprintf("%d segments retransmitted, %d proven needless by DSACK (%d %%), the ifb's queue %s",
					retrans, dups, dups*100/max(retrans, 1), map[bool]string{true: "dropped packets", false: "dropped none"}[dropped]),
				retrans >= 1000 && dups*10 >= retrans*8 && !dropped
		}),
	},
}
