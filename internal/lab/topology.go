package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"

	"github.com/vishvananda/netlink"

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
	// undo releases what a scenario attached outside the namespaces' own
	// lifetime (an XDP link's file descriptor), before they are deleted.
	undo []func() error
}

// NewPair creates the namespaces and the veth pair with addresses and
// brings everything up. On error, whatever was created is removed.
func NewPair() (p *Pair, err error) {
	id := fmt.Sprintf("%d-%d", os.Getpid(), pairCount.Add(1))
	p = &Pair{SenderDev: "skbs" + short(id), ReceiverDev: "skbr" + short(id)}
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
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.SenderDev, Namespace: netlink.NsFd(p.Sender.Handle())},
		PeerName: p.ReceiverDev, PeerNamespace: netlink.NsFd(p.Receiver.Handle())}
	if err = netlink.LinkAdd(veth); err != nil {
		return p, fmt.Errorf("creating veth pair %s/%s: %w", p.SenderDev, p.ReceiverDev, err)
	}
	if err = configure(p.Sender, p.SenderDev, SenderAddr); err != nil {
		return p, err
	}
	if err = configure(p.Receiver, p.ReceiverDev, ReceiverAddr); err != nil {
		return p, err
	}
	return p, nil
}

// short keeps interface names within the kernel's 15 characters.
func short(id string) string {
	if len(id) > 11 {
		return id[len(id)-11:]
	}
	return id
}

func configure(ns *host.Netns, dev string, addr netip.Prefix) error {
	h, err := netlink.NewHandleAt(ns.Handle())
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
		h, err := netlink.NewHandleAt(side.ns.Handle())
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
	}
	return nil
}

// Close deletes both namespaces (and with them the veth pair).
func (p *Pair) Close() error {
	var errs []error
	for _, u := range p.undo {
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
