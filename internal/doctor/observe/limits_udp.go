package observe

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// KindUDPRcvbuf is a UDP socket's receive buffer as its application set it
// (SO_RCVBUF): UDP never autotunes, so a buffer other than the namespace's
// net.core.rmem_default was asked for.
const KindUDPRcvbuf = "so_rcvbuf"

// udpSocket is what sock_diag tells of a UDP socket's receive buffer.
type udpSocket struct {
	local netip.AddrPort
	inode uint32
	// queued is what its receive queue holds (sk_rmem_alloc), rcvbuf
	// sk_rcvbuf; drops the datagrams it refused since it was created
	// (sk_drops: a full buffer, mostly).
	queued, rcvbuf, drops uint32
}

// The inet_diag request and answer, as linux/inet_diag.h lays them out.
const (
	inetDiagReqLen   = 56 // struct inet_diag_req_v2
	inetDiagMsgLen   = 72 // struct inet_diag_msg
	inetDiagSkmem    = 7  // INET_DIAG_SKMEMINFO
	skmemRmemAlloc   = 0  // SK_MEMINFO_RMEM_ALLOC
	skmemRcvbuf      = 1  // SK_MEMINFO_RCVBUF
	skmemDrops       = 8  // SK_MEMINFO_DROPS
	allSocketStates  = 0xfff
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
)

// inetDiagReq asks for every UDP socket of a family with its memory
// (INET_DIAG_SKMEMINFO), which vishvananda/netlink's UDP dump does not
// request.
type inetDiagReq struct{ family uint8 }

func (r inetDiagReq) Len() int { return inetDiagReqLen }

func (r inetDiagReq) Serialize() []byte {
	b := make([]byte, inetDiagReqLen)
	b[0], b[1], b[2] = r.family, unix.IPPROTO_UDP, 1<<(inetDiagSkmem-1)
	binary.NativeEndian.PutUint32(b[4:], allSocketStates)
	// The socket id stays zero: a dump matches every socket.
	return b
}

// readUDPSockets dumps the UDP sockets of the calling thread's namespace.
func readUDPSockets() ([]udpSocket, error) {
	var out []udpSocket
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		req := nl.NewNetlinkRequest(sockDiagByFamily, unix.NLM_F_DUMP)
		req.AddData(inetDiagReq{family})
		msgs, err := req.Execute(unix.NETLINK_INET_DIAG, sockDiagByFamily)
		if err != nil {
			return out, fmt.Errorf("dumping UDP sockets over sock_diag: %w", err)
		}
		for _, m := range msgs {
			if s, ok := parseUDPDiag(m); ok {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// parseUDPDiag reads one inet_diag_msg and its SKMEMINFO attribute.
func parseUDPDiag(m []byte) (udpSocket, bool) {
	if len(m) < inetDiagMsgLen {
		return udpSocket{}, false
	}
	var s udpSocket
	port := binary.BigEndian.Uint16(m[4:6])
	switch m[0] {
	case unix.AF_INET:
		s.local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m[8:12])), port)
	case unix.AF_INET6:
		s.local = netip.AddrPortFrom(netip.AddrFrom16([16]byte(m[8:24])).Unmap(), port)
	default:
		return udpSocket{}, false
	}
	s.inode = binary.NativeEndian.Uint32(m[68:72])
	attrs, err := nl.ParseRouteAttr(m[inetDiagMsgLen:])
	if err != nil {
		return udpSocket{}, false
	}
	for _, a := range attrs {
		if a.Attr.Type != inetDiagSkmem || len(a.Value) < 4*(skmemDrops+1) {
			continue
		}
		s.queued = binary.NativeEndian.Uint32(a.Value[4*skmemRmemAlloc:])
		s.rcvbuf = binary.NativeEndian.Uint32(a.Value[4*skmemRcvbuf:])
		s.drops = binary.NativeEndian.Uint32(a.Value[4*skmemDrops:])
		return s, true
	}
	return udpSocket{}, false
}

// udpQueues keeps, for each UDP socket of the watched namespaces that
// held or refused datagrams, how its receive queue stood at each reading
// while the workload ran: a queue found empty while datagrams came has a
// reader with time to spare, one always full a reader slower than its
// sender. Closed sockets are forgotten, so that a host's churn of
// short-lived sockets (DNS clients) costs nothing.
type udpQueues struct {
	mu   sync.Mutex
	seen map[udpKey]*udpQueue
}

type udpKey struct {
	netns string
	inode uint32
}

// udpQueue is how a socket's queue stood while datagrams came: from the
// first reading that found it holding some to the last (before the sender
// starts and after it stops, any queue is empty). emptyTail counts the
// empty readings since the last that was not, which the last excludes.
type udpQueue struct{ reads, empty, full, emptyTail int }

func newUDPQueues() *udpQueues { return &udpQueues{seen: map[udpKey]*udpQueue{}} }

// sample reads the UDP sockets of the calling thread's namespace: call it
// inside watched.do.
func (u *udpQueues) sample(netns string) error {
	if u == nil {
		return nil
	}
	socks, err := readUDPSockets()
	if err != nil {
		return err
	}
	u.record(netns, socks)
	return nil
}

func (u *udpQueues) record(netns string, socks []udpSocket) {
	u.mu.Lock()
	defer u.mu.Unlock()
	open := map[uint32]bool{}
	for _, s := range socks {
		open[s.inode] = true
		k := udpKey{netns, s.inode}
		q := u.seen[k]
		if q == nil {
			if s.queued == 0 {
				continue // nothing held yet: its readings start with the first datagrams
			}
			q = &udpQueue{}
			u.seen[k] = q
		}
		q.reads++
		switch {
		case s.queued == 0:
			q.empty++
			q.emptyTail++
		case s.queued*2 >= s.rcvbuf:
			q.full++
			q.emptyTail = 0
		default:
			q.emptyTail = 0
		}
	}
	for k := range u.seen {
		if k.netns == netns && !open[k.inode] {
			delete(u.seen, k)
		}
	}
}

func (u *udpQueues) of(netns string, inode uint32) udpQueue {
	if u == nil {
		return udpQueue{}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	q := u.seen[udpKey{netns, inode}]
	if q == nil {
		return udpQueue{}
	}
	return udpQueue{reads: q.reads - q.emptyTail, empty: q.empty - q.emptyTail, full: q.full}
}

// udpBufferLimits reads the UDP sockets of the calling thread's namespace
// at the end of the observation: those that refused datagrams, as
// evidence with their queues' readings, and the buffers their
// applications set on them, as limits. Call it inside watched.do.
func udpBufferLimits(netns string, queues *udpQueues) ([]doctor.UDPSocket, []finding.Limit, error) {
	socks, err := readUDPSockets()
	if err != nil {
		return nil, nil, err
	}
	var refused []doctor.UDPSocket
	for _, s := range socks {
		if s.drops > 0 {
			q := queues.of(netns, s.inode)
			refused = append(refused, doctor.UDPSocket{Netns: netns, Local: s.local, RcvBuf: s.rcvbuf, Drops: s.drops,
				QueueReads: q.reads, QueueEmpty: q.empty, QueueFull: q.full, Owner: socketOwner(uint64(s.inode))})
		}
	}
	def, rmax := procInt("/proc/sys/net/core/rmem_default"), procInt("/proc/sys/net/core/rmem_max")
	return refused, udpLimits(netns, socks, def, rmax, func(ino uint32) *finding.Owner { return socketOwner(uint64(ino)) }), nil
}

// udpLimits chooses the sockets whose buffer was set (not the default
// rmem) and that refused datagrams.
func udpLimits(netns string, socks []udpSocket, rmemDefault, rmemMax int, owner func(uint32) *finding.Owner) []finding.Limit {
	var out []finding.Limit
	for _, s := range socks {
		if s.drops == 0 || rmemDefault <= 0 || int(s.rcvbuf) == rmemDefault {
			continue
		}
		o := owner(s.inode)
		app := "the application"
		if o != nil {
			app = o.String()
		}
		asked := s.rcvbuf / 2
		bound := fmt.Sprintf("udp %s", s.local)
		undo := []finding.Action{finding.Change("in %s: drop its setsockopt(SO_RCVBUF, %d): the default, net.core.rmem_default, is %d bytes; "+
			"or ask for more, up to net.core.rmem_max (%d)", app, asked, rmemDefault, rmemMax)}
		if int(s.rcvbuf) > rmemDefault {
			undo = []finding.Action{finding.Change("in %s: raise its SO_RCVBUF of %d bytes, up to net.core.rmem_max (%d)", app, asked, rmemMax)}
		}
		out = append(out, finding.Limit{Kind: KindUDPRcvbuf,
			Value:      fmt.Sprintf("%d bytes (sk_rcvbuf %d: the kernel doubles what is asked)", asked, s.rcvbuf),
			Where:      finding.Place{Layer: finding.LayerSocket, Netns: netns, Object: bound},
			SetBy:      o,
			Applies:    finding.Scope{Flows: []string{bound}},
			Undo:       undo,
			Arithmetic: fmt.Sprintf("%d datagrams refused by the full buffer since the socket was created (sk_drops); net.core.rmem_default %d", s.drops, rmemDefault),
			Source:     "sock_diag INET_DIAG_SKMEMINFO, /proc/sys/net/core/rmem_default"})
	}
	return out
}

func procInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}
