package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
)

// Addresses of the pair. Each pair lives in its own namespaces, so every run
// can use the same ones without colliding with another run or the host.
var (
	SenderAddr   = netip.MustParsePrefix("10.200.0.1/24")
	ReceiverAddr = netip.MustParsePrefix("10.200.0.2/24")
)

var pairCount atomic.Uint32

// Pair is two namespaces joined by a veth pair.
type Pair struct {
	Sender, Receiver       *host.Netns
	SenderDev, ReceiverDev string
	// Wire: the devices are NICs lent by NewWirePair, not a veth pair of our own.
	Wire bool
	// undo releases what a scenario attached outside the namespaces' own
	// lifetime (an XDP link's file descriptor), before they are deleted.
	undo []func() error
}

// NewPair creates the namespaces and the veth pair with addresses and
// brings everything up. On error, whatever was created is removed.
func NewPair() (*Pair, error) {
	return newPair(func(p *Pair, id string) error {
		p.SenderDev, p.ReceiverDev = "skbs"+short(id), "skbr"+short(id)
		return p.addVeth()
	})
}

// newPair creates the two namespaces, named by the process and a count so
// no two runs collide, and joins them with join. On error, whatever was
// created is removed.
func newPair(join func(p *Pair, id string) error) (p *Pair, err error) {
	id := fmt.Sprintf("%d-%d", os.Getpid(), pairCount.Add(1))
	p = &Pair{}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if p.Sender, err = host.NewNetns("skbtrace-" + id + "-snd"); err != nil {
		return p, err
	}
	if p.Receiver, err = host.NewNetns("skbtrace-" + id + "-rcv"); err != nil {
		return p, err
	}
	return p, join(p, id)
}

// addVeth joins the namespaces by a veth pair, addressed and up.
func (p *Pair) addVeth() (err error) {
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.SenderDev, Namespace: netlink.NsFd(p.Sender.Handle())},
		PeerName: p.ReceiverDev, PeerNamespace: netlink.NsFd(p.Receiver.Handle())}
	if err = netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth pair %s/%s: %w", p.SenderDev, p.ReceiverDev, err)
	}
	if err = configure(p.Sender, p.SenderDev, SenderAddr); err != nil {
		return err
	}
	return configure(p.Receiver, p.ReceiverDev, ReceiverAddr)
}

// NewWirePair moves two existing devices, say two NICs cabled to each
// other, into fresh namespaces: sender first. Their settings outlive the
// namespaces, so what a scenario changes on them it undoes in Close
// (Pair.restore), which then moves them back here.
func NewWirePair(senderDev, receiverDev string) (*Pair, error) {
	return newPair(func(p *Pair, _ string) error {
		p.SenderDev, p.ReceiverDev, p.Wire = senderDev, receiverDev, true
		return p.borrow()
	})
}

// borrow moves the wire's NICs into the namespaces, addressed and up.
func (p *Pair) borrow() error {
	for _, side := range []struct {
		ns   *host.Netns
		dev  string
		addr netip.Prefix
	}{{p.Sender, p.SenderDev, SenderAddr}, {p.Receiver, p.ReceiverDev, ReceiverAddr}} {
		l, err := homeLink(side.dev)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(l, int(side.ns.Handle())); err != nil {
			return fmt.Errorf("moving %s into %s: %w", side.dev, side.ns.Name, err)
		}
		// Handed back explicitly, after every other undo: a namespace
		// lives on while a socket holds it (an orphan retransmitting into
		// an MTU black hole, for minutes), and its NIC with it.
		ns, dev := side.ns, side.dev
		p.restore(func() error { return handBack(ns, dev) })
		if err := configure(side.ns, side.dev, side.addr); err != nil {
			return err
		}
	}
	return p.waitCarrier()
}

// handBack moves a wire device from ns back to this process's namespace.
func handBack(ns *host.Netns, dev string) error {
	self, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("opening this namespace to hand %s back: %w", dev, err)
	}
	defer self.Close()
	h, err := netlink.NewHandleAt(ns.Handle(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("finding %s in %s to hand it back: %w", dev, ns.Name, err)
	}
	if err := h.LinkSetNsFd(l, int(self.Fd())); err != nil {
		return fmt.Errorf("handing %s back from %s: %w", dev, ns.Name, err)
	}
	return nil
}

// homeLink finds a wire device in this namespace. A NIC whose namespace a
// crashed run left is handed back when the kernel frees it, later: it waits.
func homeLink(dev string) (netlink.Link, error) {
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var l netlink.Link
		if l, err = netlink.LinkByName(dev); err == nil {
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("finding wire device %s in this namespace: %w", dev, err)
		}
	}
}

// waitCarrier waits for both NICs to report their link up: a NIC's link
// comes up some time after the device does (autonegotiation).
func (p *Pair) waitCarrier() error {
	for _, side := range []struct {
		ns  *host.Netns
		dev string
	}{{p.Sender, p.SenderDev}, {p.Receiver, p.ReceiverDev}} {
		path := "/sys/class/net/" + side.dev + "/carrier"
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := side.ns.Run("cat", path)
			if err == nil && strings.TrimSpace(out) == "1" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("waiting for %s's link to come up in %s: no carrier after 10s", side.dev, side.ns.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// restore registers how to undo a change to a wire device, run in Close
// before its namespace goes; veth pairs die with their namespaces and need
// none.
func (p *Pair) restore(undo func() error) {
	if p.Wire {
		p.undo = append(p.undo, undo)
	}
}

// short keeps interface names within the kernel's 15 characters.
func short(id string) string {
	if len(id) > 11 {
		return id[len(id)-11:]
	}
	return id
}

func configure(ns *host.Netns, dev string, addr netip.Prefix) error {
	h, err := netlink.NewHandleAt(ns.Handle(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("opening netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	for _, name := range []string{"lo", dev} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("finding %s in %s: %w", name, ns.Name, err)
		}
		if name == dev {
			a, _ := netlink.ParseAddr(addr.String())
			if err := h.AddrAdd(l, a); err != nil {
				return fmt.Errorf("adding %s to %s in %s: %w", addr, dev, ns.Name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("bringing up %s in %s: %w", name, ns.Name, err)
		}
	}
	return nil
}

// BigTCP lets GSO and GRO on the pair build packets of up to size bytes,
// above the 64 KB an IP length field holds (BIG TCP: Linux 5.19 for IPv6,
// 6.3 for IPv4).
func (p *Pair) BigTCP(size int) error {
	for _, side := range []struct {
		ns  *host.Netns
		dev string
	}{{p.Sender, p.SenderDev}, {p.Receiver, p.ReceiverDev}} {
		h, err := netlink.NewHandleAt(side.ns.Handle(), unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("opening netlink in %s: %w", side.ns.Name, err)
		}
		l, err := h.LinkByName(side.dev)
		if err == nil {
			err = errors.Join(h.LinkSetGSOMaxSize(l, size), h.LinkSetGROMaxSize(l, size),
				h.LinkSetGSOIPv4MaxSize(l, size), h.LinkSetGROIPv4MaxSize(l, size))
		}
		h.Close()
		if err != nil {
			return fmt.Errorf("raising the GSO and GRO sizes of %s to %d: %w", side.dev, size, err)
		}
	}
	return nil
}

// TwoHosts makes the pair behave like two machines on a 2-CPU host: receive
// processing of each side steered (RPS) to its own CPU, sender on CPU 0 and
// receiver on CPU 1 (the lab pins its generator's threads to match). Without
// it the receiver's ACK is processed inside the sender's own softirq, and
// limits that act through the ACK clock cost little.
func (p *Pair) TwoHosts() error {
	for _, side := range []struct {
		ns   *host.Netns
		dev  string
		mask string
	}{{p.Sender, p.SenderDev, "1"}, {p.Receiver, p.ReceiverDev, "2"}} {
		path := fmt.Sprintf("/sys/class/net/%s/queues/rx-0/rps_cpus", side.dev)
		if _, err := side.ns.Run("sh", "-c", "echo "+side.mask+" > "+path); err != nil {
			return fmt.Errorf("steering %s to CPU mask %s: %w", side.dev, side.mask, err)
		}
		ns := side.ns
		p.restore(func() error {
			_, err := ns.Run("sh", "-c", "echo 0 > "+path)
			return err
		})
	}
	return nil
}

// Close deletes both namespaces (and with them the veth pair).
func (p *Pair) Close() error {
	var errs []error
	// Last change undone first, back to the settings the devices came with.
	for _, u := range slices.Backward(p.undo) {
		errs = append(errs, u())
	}
	p.undo = nil
	for _, ns := range []*host.Netns{p.Sender, p.Receiver} {
		if ns != nil {
			errs = append(errs, ns.Delete())
		}
	}
	return errors.Join(errs...)
}

// Tunnel addresses: the inner network a VXLAN overlay carries over the pair.
var (
	SenderTunnelAddr   = netip.MustParsePrefix("10.201.0.1/24")
	ReceiverTunnelAddr = netip.MustParsePrefix("10.201.0.2/24")
)

// TunnelDev is the VXLAN device's name on both sides.
const TunnelDev = "skbvx0"

// AddVXLAN joins the two namespaces by a VXLAN overlay (VNI 42, port 4789)
// over the veth pair, with the outer DF bit unset as on seed 004's device.
func (p *Pair) AddVXLAN() error {
	for _, side := range []struct {
		ns                 *host.Netns
		dev                string
		local, remote, tun netip.Prefix
	}{
		{p.Sender, p.SenderDev, SenderAddr, ReceiverAddr, SenderTunnelAddr},
		{p.Receiver, p.ReceiverDev, ReceiverAddr, SenderAddr, ReceiverTunnelAddr},
	} {
		for _, args := range [][]string{
			{"link", "add", TunnelDev, "type", "vxlan", "id", "42", "dstport", "4789", "dev", side.dev,
				"local", side.local.Addr().String(), "remote", side.remote.Addr().String(), "df", "unset"},
			{"addr", "add", side.tun.String(), "dev", TunnelDev},
			{"link", "set", TunnelDev, "up"},
		} {
			if _, err := side.ns.Run("ip", args...); err != nil {
				return err
			}
		}
	}
	return nil
}
