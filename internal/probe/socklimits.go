package probe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// SockSettings are one TCP socket's settings that tcp_info does not carry,
// read from the kernel's own socket by the sock_limits iterator.
type SockSettings struct {
	Local, Peer netip.AddrPort
	State       uint8
	// WindowClamp is tp->window_clamp: the largest window the socket
	// advertises (TCP_WINDOW_CLAMP, a route's window metric, or the
	// kernel's own from the buffer).
	WindowClamp uint32
	RcvSsthresh uint32
	// ScalingRatio is tp->scaling_ratio (6.5 on), 0 before: the share of
	// the receive buffer, in 256ths, the kernel offers as window.
	ScalingRatio uint8
	// RcvBuf and SndBuf are sk_rcvbuf and sk_sndbuf; RcvBufLocked and
	// SndBufLocked say the application set them (SO_RCVBUF, SO_SNDBUF),
	// which turns their autotuning off.
	RcvBuf, SndBuf             int
	RcvBufLocked, SndBufLocked bool
	// MaxPacingRate is SO_MAX_PACING_RATE in bytes a second; 0: none.
	MaxPacingRate uint64
	// NotSentLowat is TCP_NOTSENT_LOWAT; 0: the namespace's sysctl.
	NotSentLowat uint32
	// NoDelay is TCP_NODELAY, Cork TCP_CORK.
	NoDelay, Cork bool
	CongControl   string
	Inode         uint64
	UID           uint32
}

// Values of sk_userlocks and tp->nonagle (include/net/sock.h, tcp.h).
const (
	sockSndbufLock = 1
	sockRcvbufLock = 2
	tcpNagleOff    = 1
	tcpNagleCork   = 2
)

// SockLimitsReader reads the settings of the TCP sockets of the network
// namespace the calling thread is in.
type SockLimitsReader struct {
	objs SockLimitsObjects
	iter *link.Iter
}

// OpenSockLimits loads and attaches the iterator; Read opens it anew each
// time, in the caller's namespace.
func OpenSockLimits() (*SockLimitsReader, error) {
	if err := rlimit.RemoveMemlock(); err != nil && !errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("raising the memlock limit: %w", err)
	}
	r := &SockLimitsReader{}
	if err := LoadSockLimitsObjects(&r.objs, &ebpf.CollectionOptions{Cache: kernelTypes}); err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("loading the socket settings iterator: %w", ErrPermission)
		}
		return nil, fmt.Errorf("loading the socket settings iterator: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: r.objs.SockLimits})
	if err != nil {
		r.objs.Close()
		return nil, fmt.Errorf("attaching the socket settings iterator: %w", err)
	}
	r.iter = it
	return r, nil
}

// Read walks the TCP sockets of the calling thread's network namespace
// (the kernel takes it when the iterator is opened): run it on a thread
// locked in the namespace, as host.Netns.Do does.
func (r *SockLimitsReader) Read() ([]SockSettings, error) {
	rd, err := r.iter.Open()
	if err != nil {
		return nil, fmt.Errorf("opening the socket settings iterator: %w", err)
	}
	defer rd.Close()
	raw, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("reading the socket settings iterator: %w", err)
	}
	return decodeSockSettings(raw)
}

// Close detaches and unloads the iterator.
func (r *SockLimitsReader) Close() error {
	err := r.iter.Close()
	return errors.Join(err, r.objs.Close())
}

func decodeSockSettings(raw []byte) ([]SockSettings, error) {
	var rec SockLimitsSockLimitsRec
	size := binary.Size(rec)
	if len(raw)%size != 0 {
		return nil, fmt.Errorf("socket settings: %d bytes are not whole records of %d", len(raw), size)
	}
	out := make([]SockSettings, 0, len(raw)/size)
	for off := 0; off < len(raw); off += size {
		if err := binary.Read(bytes.NewReader(raw[off:off+size]), binary.NativeEndian, &rec); err != nil {
			return nil, fmt.Errorf("decoding socket settings: %w", err)
		}
		out = append(out, settingsOf(&rec))
	}
	return out, nil
}

func settingsOf(r *SockLimitsSockLimitsRec) SockSettings {
	s := SockSettings{State: r.State, WindowClamp: r.WindowClamp, RcvSsthresh: r.RcvSsthresh, ScalingRatio: r.ScalingRatio,
		RcvBuf: int(r.Rcvbuf), SndBuf: int(r.Sndbuf), RcvBufLocked: r.Userlocks&sockRcvbufLock != 0, SndBufLocked: r.Userlocks&sockSndbufLock != 0,
		NoDelay: r.Nonagle&tcpNagleOff != 0, Cork: r.Nonagle&tcpNagleCork != 0,
		Inode: r.Ino, UID: r.Uid}
	if r.MaxPacingRate != ^uint64(0) && r.MaxPacingRate != uint64(^uint32(0)) {
		s.MaxPacingRate = r.MaxPacingRate
	}
	if r.NotsentLowat != ^uint32(0) { // UINT_MAX is the sysctl's own "none"
		s.NotSentLowat = r.NotsentLowat
	}
	var ca []byte
	for _, c := range r.Ca {
		if c == 0 {
			break
		}
		ca = append(ca, byte(c))
	}
	s.CongControl = string(ca)
	var local, peer netip.Addr
	if r.Family == unix.AF_INET6 {
		local, peer = netip.AddrFrom16(r.Saddr).Unmap(), netip.AddrFrom16(r.Daddr).Unmap()
	} else {
		local, peer = netip.AddrFrom4([4]byte(r.Saddr[:4])), netip.AddrFrom4([4]byte(r.Daddr[:4]))
	}
	s.Local, s.Peer = netip.AddrPortFrom(local, r.Sport), netip.AddrPortFrom(peer, r.Dport)
	return s
}
