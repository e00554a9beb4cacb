package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TCPSocket is one TCP socket's tcp_info, read over sock_diag netlink.
// Times are microseconds, sizes bytes unless named otherwise.
type TCPSocket struct {
	Local, Peer netip.AddrPort
	Inode       uint32
	State       uint8
	CAState     uint8
	RTTus       uint32
	RTTVarus    uint32
	MinRTTus    uint32
	SndCwnd     uint32 // segments
	SndSsthresh uint32
	SndMSS      uint32
	RcvMSS      uint32
	AdvMSS      uint32
	PMTU        uint32
	SndWnd      uint32
	RcvSpace    uint32
	Unacked     uint32
	NotSent     uint32
	// Cumulative counters: subtract an earlier reading for a run's share.
	BytesAcked, BytesReceived, BytesSent, BytesRetrans uint64
	SegsOut, TotalRetrans                              uint32
	BusyUs, RwndLimitedUs, SndbufLimitedUs             uint64
	// DSACKDups are the segments the peer reported received twice
	// (retransmissions it did not need), ReordSeen the reorderings the
	// sender detected: both cumulative, both zero before Linux 4.19.
	DSACKDups, ReordSeen uint32
	// DeliveryRate is bytes per second. (The app-limited bit is not read:
	// netlink v1.3.1 decodes that bitfield from the wrong end on little-endian.)
	DeliveryRate uint64
}

// ReadTCPSockets dumps the TCP sockets of the calling thread's namespace
// (run it in Netns.Do for another), IPv4 and IPv6.
func ReadTCPSockets() ([]TCPSocket, error) {
	h, err := netlink.NewHandle(unix.NETLINK_INET_DIAG)
	if err != nil {
		return nil, fmt.Errorf("opening sock_diag netlink: %w", err)
	}
	defer h.Close()
	var out []TCPSocket
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		resps, err := h.SocketDiagTCPInfo(family)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			if errors.Is(err, unix.ENOENT) {
				// sock_diag answers so when no handler for TCP is registered.
				err = fmt.Errorf("%w (the kernel has no tcp_diag: load the inet_diag and tcp_diag modules)", err)
			}
			return nil, fmt.Errorf("reading tcp_info over sock_diag: %w", err)
		}
		for _, r := range resps {
			if r.InetDiagMsg == nil || r.TCPInfo == nil {
				continue
			}
			out = append(out, tcpSocket(r.InetDiagMsg, r.TCPInfo))
		}
	}
	return out, nil
}

func tcpSocket(m *netlink.Socket, i *netlink.TCPInfo) TCPSocket {
	return TCPSocket{
		Local: addrPort(m.ID.Source, m.ID.SourcePort), Peer: addrPort(m.ID.Destination, m.ID.DestinationPort),
		Inode: m.INode, State: i.State, CAState: i.Ca_state,
		RTTus: i.Rtt, RTTVarus: i.Rttvar, MinRTTus: i.Min_rtt, SndCwnd: i.Snd_cwnd, SndSsthresh: i.Snd_ssthresh,
		SndMSS: i.Snd_mss, RcvMSS: i.Rcv_mss, AdvMSS: i.Advmss, PMTU: i.Pmtu, SndWnd: i.Snd_wnd,
		RcvSpace: i.Rcv_space, Unacked: i.Unacked, NotSent: i.Notsent_bytes,
		BytesAcked: i.Bytes_acked, BytesReceived: i.Bytes_received, BytesSent: i.Bytes_sent, BytesRetrans: i.Bytes_retrans,
		SegsOut: i.Segs_out, TotalRetrans: i.Total_retrans,
		BusyUs: i.Busy_time, RwndLimitedUs: i.Rwnd_limited, SndbufLimitedUs: i.Sndbuf_limited,
		DSACKDups: i.Dsack_dups, ReordSeen: i.Reord_seen,
		DeliveryRate: i.Delivery_rate,
	}
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}
