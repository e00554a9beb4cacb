package lab

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/load"
)

func init() {
	NIC = append(NIC, nicXDPDrop, nicTCDrop)
}

// nicXDPDrop is xdp-drop-veth on a real driver: a program on the NIC that
// drops is the device-side limit the doctor must name with its provenance.
// Natively (virtio-net) a dropped frame never becomes an skb, so no
// skb_drop explains the loss; generically (drivers without XDP, such as
// e1000e) it is freed as an skb after the program's verdict.
var nicXDPDrop = &Scenario{
	Name: "nic-xdp-drop",
	Fault: "an XDP program on the receiver's NIC drops 1 % of the TCP frames at random, attached natively where the " +
		"driver can, else in generic mode (control: none)",
	Expect:   "packet-loss",
	Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
	Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
	Inject: func(p *Pair) error {
		mode := "xdpdrv"
		err := attachXDPDrop(p.Receiver, p.ReceiverDev, 100, unix.XDP_FLAGS_DRV_MODE)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			mode = "xdpgeneric"
			err = attachXDPDrop(p.Receiver, p.ReceiverDev, 100, unix.XDP_FLAGS_SKB_MODE)
		}
		if err != nil {
			return &NotBuildable{fmt.Sprintf("%s refuses an XDP program natively and generically: %v", p.ReceiverDev, err)}
		}
		// The NIC outlives the namespace: the program must not.
		p.restore(func() error {
			if _, err := p.Receiver.Run("ip", "link", "set", "dev", p.ReceiverDev, mode, "off"); err != nil {
				return fmt.Errorf("detaching the XDP program from %s: %w", p.ReceiverDev, err)
			}
			return nil
		})
		return nil
	},
	// QEMU's e1000e on a hub retransmits in the control too (45 segments
	// beside 287 in a TCG guest's fault run): the loss must be several
	// times the control's and cost throughput.
	Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
		retrans := netRetrans(f)
		return fmt.Sprintf("%d retransmitted segments (control %d), %d skb_drop on %s; throughput %s",
				retrans, netRetrans(c), f.devDrops(p.ReceiverDev), p.ReceiverDev, change(c, f)),
			retrans > 3*(netRetrans(c)+1) && f.Load.Bps < 0.7*c.Load.Bps
	},
}

// nicTCDrop is tc-bpf-drop on a real driver: a tc BPF classifier on the
// receiver's NIC ingress that drops, a device-side limit the doctor must
// name with its provenance whatever the driver.
var nicTCDrop = &Scenario{
	Name:     "nic-tc-drop",
	Fault:    "a tc BPF program on the receiver's NIC ingress (clsact, direct action) drops 1 % of the IPv4 packets at random (control: none)",
	Expect:   "packet-loss",
	Families: []string{"tcp_conn", "tcp_retrans", "skb_drop"},
	Load:     load.Options{Mode: load.Bulk, Duration: 3 * time.Second, CC: "cubic"},
	Inject: func(p *Pair) error {
		if err := attachTCDrop(p.Receiver, p.ReceiverDev, 100); err != nil {
			return err
		}
		// The NIC outlives the namespace: its clsact must not.
		p.restore(func() error {
			if _, err := p.Receiver.Run("tc", "qdisc", "del", "dev", p.ReceiverDev, "clsact"); err != nil && !strings.Contains(err.Error(), "Cannot find") {
				return fmt.Errorf("removing the tc program's clsact from %s: %w", p.ReceiverDev, err)
			}
			return nil
		})
		return nil
	},
	// The program's drops are skbs on the NIC, which the control lacks;
	// QEMU's e1000e retransmits in the control too (611 segments beside
	// 823 in a TCG guest), so the retransmissions alone prove nothing.
	Verdict: func(c, f *Measurement, p *Pair) (string, bool) {
		drops, before := f.devDrops(p.ReceiverDev), c.devDrops(p.ReceiverDev)
		return fmt.Sprintf("%d skb_drop on %s (%s), %d in the control; %d retransmitted segments (control %d); throughput %s",
				drops, p.ReceiverDev, f.dropLocation(p.ReceiverDev), before, netRetrans(f), netRetrans(c), change(c, f)),
			drops >= 10 && drops > 3*before && f.Load.Bps < 0.7*c.Load.Bps
	},
}
