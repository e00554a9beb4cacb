package lab

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/skbtrace/skbtrace/internal/probe"
)

// RxChecksums are the packets a NIC's driver handed GRO during a run, by
// the checksum verification they came with (skb->ip_summed).
type RxChecksums struct {
	// None the stack must sum; Verified the device checked
	// (CHECKSUM_UNNECESSARY) or summed for the stack (CHECKSUM_COMPLETE).
	None, Verified uint64
}

// Packets is every packet counted.
func (r RxChecksums) Packets() uint64 { return r.None + r.Verified }

// NoneShare is the share of the packets the device did not verify.
func (r RxChecksums) NoneShare() float64 {
	if r.Packets() == 0 {
		return 0
	}
	return float64(r.None) / float64(r.Packets())
}

// rxCsumCounter counts packets by checksum state at GRO's entry
// (bpf/lab/rx_csum.bpf.c) until closed.
type rxCsumCounter struct {
	objs RxCsumObjects
	link link.Link
}

func countRxChecksums() (*rxCsumCounter, error) {
	c := &rxCsumCounter{}
	if err := LoadRxCsumObjects(&c.objs, probe.LoadOptions()); err != nil {
		return nil, fmt.Errorf("loading the receive checksum counter: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: c.objs.CountRxCsum})
	if err != nil {
		c.objs.Close()
		return nil, fmt.Errorf("attaching tp_btf/napi_gro_receive_entry for the receive checksum counter: %w", err)
	}
	c.link = l
	return c, nil
}

// device is what the counter saw of one device, by its namespace's inode
// and its index there.
func (c *rxCsumCounter) device(netns, ifindex uint32) (RxChecksums, error) {
	var per []RxCsumRxCsumCounts
	key := RxCsumRxCsumKey{Netns: netns, Ifindex: ifindex}
	var r RxChecksums
	err := c.objs.RxCsum.Lookup(&key, &per)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return r, nil // no packet of the device reached GRO
	}
	if err != nil {
		return r, fmt.Errorf("reading the receive checksum counter: %w", err)
	}
	for _, v := range per {
		// CHECKSUM_NONE, _UNNECESSARY, _COMPLETE; _PARTIAL is never a
		// received packet's before GRO.
		r.None += v.Packets[0]
		r.Verified += v.Packets[1] + v.Packets[2]
	}
	return r, nil
}

func (c *rxCsumCounter) Close() error {
	c.link.Close()
	return c.objs.Close()
}
