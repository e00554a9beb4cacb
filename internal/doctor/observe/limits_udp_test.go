package observe

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/skbtrace/skbtrace/internal/finding"
	"golang.org/x/sys/unix"
)

// An inet_diag_msg of an IPv4 UDP socket on port 7001 with its
// SKMEMINFO: 4608 bytes queued, rcvbuf 8192, 12 drops.
func TestParseUDPDiagReadsTheBufferAndItsDrops(t *testing.T) {
	m := make([]byte, inetDiagMsgLen+4+4*9)
	m[0] = unix.AF_INET
	binary.BigEndian.PutUint16(m[4:], 7001)
	copy(m[8:], []byte{10, 78, 0, 2})
	binary.NativeEndian.PutUint32(m[68:], 4242)
	attr := m[inetDiagMsgLen:]
	binary.NativeEndian.PutUint16(attr[0:], uint16(4+4*9))
	binary.NativeEndian.PutUint16(attr[2:], inetDiagSkmem)
	binary.NativeEndian.PutUint32(attr[4+4*skmemRmemAlloc:], 4608)
	binary.NativeEndian.PutUint32(attr[4+4*skmemRcvbuf:], 8192)
	binary.NativeEndian.PutUint32(attr[4+4*skmemDrops:], 12)
	s, ok := parseUDPDiag(m)
	if !ok || s.local != netip.MustParseAddrPort("10.78.0.2:7001") || s.inode != 4242 || s.queued != 4608 || s.rcvbuf != 8192 || s.drops != 12 {
		t.Fatalf("parsed %+v %v", s, ok)
	}
	if _, ok := parseUDPDiag(m[:inetDiagMsgLen]); ok {
		t.Error("a message without SKMEMINFO parsed")
	}
}

// Only sockets whose buffer is not the default and that refused
// datagrams are limits; one above the default is raised, not dropped.
func TestUDPLimitsAreSetBuffersThatOverflowed(t *testing.T) {
	socks := []udpSocket{
		{local: netip.MustParseAddrPort("0.0.0.0:7001"), inode: 1, rcvbuf: 8192, drops: 5},
		{local: netip.MustParseAddrPort("0.0.0.0:7002"), inode: 2, rcvbuf: 8192},
		{local: netip.MustParseAddrPort("0.0.0.0:7003"), inode: 3, rcvbuf: 212992, drops: 9},
		{local: netip.MustParseAddrPort("0.0.0.0:7004"), inode: 4, rcvbuf: 1 << 22, drops: 9},
	}
	got := udpLimits("ns", socks, 212992, 4194304, func(ino uint32) *finding.Owner { return &finding.Owner{PID: int(ino), Comm: "app"} })
	if len(got) != 2 || got[0].Where.Object != "udp 0.0.0.0:7001" || got[1].Where.Object != "udp 0.0.0.0:7004" {
		t.Fatalf("limits %+v", got)
	}
	if got[0].Undo[0].Text == got[1].Undo[0].Text || got[0].SetBy.PID != 1 {
		t.Errorf("undo %q and %q", got[0].Undo[0].Text, got[1].Undo[0].Text)
	}
}

// Each reading counts a socket's queue as empty, at least half full, or
// neither, from the first reading that found it holding datagrams to the
// last: before its sender starts and after it stops, any queue is empty.
func TestUDPQueuesCountHowEachQueueStoodWhileDatagramsCame(t *testing.T) {
	u := newUDPQueues()
	for _, queued := range []uint32{0, 0, 4096, 0, 6000, 100, 0, 0} {
		u.record("ns", []udpSocket{{inode: 9, queued: queued, rcvbuf: 8192}})
	}
	if q := u.of("ns", 9); q != (udpQueue{reads: 4, empty: 1, full: 2}) {
		t.Errorf("queue %+v", q)
	}
	if q := u.of("other", 9); q.reads != 0 {
		t.Errorf("another namespace's socket counted: %+v", q)
	}
	u.record("ns", []udpSocket{{inode: 10}})
	if q := u.of("ns", 10); q.reads != 0 {
		t.Errorf("a queue never holding datagrams counted: %+v", q)
	}
	u.record("ns", nil)
	if q := u.of("ns", 9); q.reads != 0 || len(u.seen) != 0 {
		t.Errorf("a closed socket kept: %+v, %d kept", q, len(u.seen))
	}
}
