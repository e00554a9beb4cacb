package lab

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf/link"
)

// ScrambleOuterIPIDs attaches the XDP program that gives VXLAN packets with
// DF=0 random outer IP IDs to the receiver's veth. It stays attached until
// the pair is closed.
func (p *Pair) ScrambleOuterIPIDs() error {
	var objs OuterIPIDObjects
	if err := LoadOuterIPIDObjects(&objs, nil); err != nil {
		return fmt.Errorf("loading the outer IP ID program: %w", err)
	}
	var l link.Link
	err := p.Receiver.Do(func() error {
		iface, err := net.InterfaceByName(p.ReceiverDev)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: objs.ScrambleOuterIpid, Interface: iface.Index})
		return err
	})
	if err != nil {
		objs.Close()
		return fmt.Errorf("attaching XDP to %s: %w", p.ReceiverDev, err)
	}
	p.undo = append(p.undo, func() error {
		l.Close()
		return objs.Close()
	})
	return nil
}
