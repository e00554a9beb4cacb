package probe

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/skbtrace/skbtrace/internal/wire"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Filter restricts what the kernel side emits; the zero value passes everything.
type Filter struct {
	Port       uint16
	Addr       netip.Addr
	NetnsInode uint32
	// NetnsAddrs are the namespace's addresses: an event whose namespace the
	// kernel cannot say passes when one of its addresses is among them.
	NetnsAddrs []netip.Addr
	Dev        string // device name, for device-level families
	Pid        uint32 // process (thread group), for sock_io
	// CPUs keeps only events written on these CPUs; empty keeps every CPU.
	CPUs []int
	// Contexts is a mask of wire.ContextFilter: only events written in
	// these contexts; zero keeps every context.
	Contexts wire.ContextFilter
	// Packets is a classic BPF program over a packet from its IP header
	// (pktfilter.Compile): the per-packet families count only the packets
	// it keeps. Nil keeps every packet.
	Packets []bpf.Instruction
}

// maxFilterCPUs is CPU_FILTER_WORDS*64 in bpf/common.bpf.h.
const maxFilterCPUs = 16 * 64

func setFilter(spec *ebpf.CollectionSpec, f Filter) error {
	set := func(name string, v any) error {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting filter %s: %w", name, err)
		}
		return nil
	}
	if err := set(SkbtraceVarFilterPort, f.Port); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterNetns, f.NetnsInode); err != nil {
		return err
	}
	if err := setNetnsAddrs(set, f.NetnsAddrs); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterPid, f.Pid); err != nil {
		return err
	}
	if len(f.Dev) > 15 {
		return fmt.Errorf("device name %q is longer than the kernel's 15 characters", f.Dev)
	}
	var dev [16]byte
	copy(dev[:], f.Dev)
	if err := set(SkbtraceVarFilterDev, dev); err != nil {
		return err
	}
	if err := setCPUs(set, f.CPUs); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterContexts, uint8(f.Contexts)); err != nil {
		return err
	}
	if err := set(SkbtraceVarFilterPackets, f.Packets != nil); err != nil {
		return err
	}
	if !f.Addr.IsValid() {
		return nil
	}
	var family uint16 = unix.AF_INET6
	var addr [16]byte
	if f.Addr.Unmap().Is4() {
		family = unix.AF_INET
		a4 := f.Addr.Unmap().As4()
		copy(addr[:], a4[:])
	} else {
		addr = f.Addr.As16()
	}
	if err := set(SkbtraceVarFilterFamily, family); err != nil {
		return err
	}
	return set(SkbtraceVarFilterAddr, addr)
}

// setCPUs sets the kernel's CPU mask, one bit a CPU.
func setCPUs(set func(string, any) error, cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var words [maxFilterCPUs / 64]uint64
	for _, c := range cpus {
		if c < 0 || c >= maxFilterCPUs {
			return fmt.Errorf("CPU %d is beyond the %d the CPU filter holds", c, maxFilterCPUs)
		}
		words[c/64] |= 1 << (c % 64)
	}
	if err := set(SkbtraceVarFilterCpus, words); err != nil {
		return err
	}
	return set(SkbtraceVarFilterCpusOn, true)
}

// filterNetnsAddrs is FILTER_NETNS_ADDRS in bpf/common.bpf.h.
const filterNetnsAddrs = 16

// setNetnsAddrs lays the addresses out as struct sock_addrs holds them
// (IPv4 in the first 4 bytes), as two native-endian words each.
func setNetnsAddrs(set func(string, any) error, addrs []netip.Addr) error {
	var words [filterNetnsAddrs][2]uint64
	n := 0
	for _, a := range addrs {
		if n == filterNetnsAddrs {
			break
		}
		var b [16]byte
		if a = a.Unmap(); a.Is4() {
			a4 := a.As4()
			copy(b[:], a4[:])
		} else {
			b = a.As16()
		}
		words[n] = [2]uint64{binary.NativeEndian.Uint64(b[:8]), binary.NativeEndian.Uint64(b[8:])}
		n++
	}
	if err := set(SkbtraceVarFilterNetnsAddrs, words); err != nil {
		return err
	}
	return set(SkbtraceVarFilterNetnsNaddrs, uint32(n))
}
