package doctor

import (
	"fmt"
	"slices"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Limit kinds set by an application's own code, which no command undoes:
// the lab applies them by the workload's switch.
const (
	// KindTCPNagle is Nagle's algorithm left on (TCP_NODELAY unset) on a
	// socket whose small writes it held back.
	KindTCPNagle = "tcp_nagle"
	// KindWriteSize is the size of an application's socket calls.
	KindWriteSize = "app_write_size"
)

// socketOwner is who owns the flow's socket, as the observer read it for
// another of its settings; nil where it read none.
func socketOwner(ev *Evidence, f *Flow) *finding.Owner {
	flow := f.Local.String() + " " + f.Peer.String()
	for i := range ev.Limits {
		l := &ev.Limits[i]
		if l.SetBy != nil && l.Where.Layer == finding.LayerSocket && l.Where.Netns == f.Netns && slices.Contains(l.Applies.Flows, flow) {
			return l.SetBy
		}
	}
	return nil
}

// nagleLimit is Nagle's algorithm on a flow's socket as the limit
// nagle-delay names: on by default, so the kernel's decisions to hold a
// small segment (tcp_sendlim [nagle]) say it, not a setting read.
func nagleLimit(ev *Evidence, f *Flow, holds uint64) *finding.Limit {
	flow := f.Local.String() + " " + f.Peer.String()
	owner := socketOwner(ev, f)
	who := "the application"
	if owner != nil {
		who = owner.String()
	}
	return &finding.Limit{Kind: KindTCPNagle, Value: "on (TCP_NODELAY unset: the kernel's default)",
		Where: finding.Place{Layer: finding.LayerSocket, Netns: f.Netns, Object: flow}, SetBy: owner,
		Applies: finding.Scope{Flows: []string{flow}},
		Undo: []finding.Action{
			finding.Change("in %s: setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, 1) on the socket", who),
			finding.Change("or write each message in one call (writev, or TCP_CORK around the writes and uncork after the last)"),
		},
		Arithmetic: fmt.Sprintf("%d send decisions held a small segment for an ACK", holds),
		Source:     "tcp_sendlim [nagle] decisions"}
}

// writeSizeLimit is an application's small socket calls as the limit
// small-packet-bound names: its process and the size it writes, read by
// the sock_io family.
func writeSizeLimit(s SockIO, perCall float64) *finding.Limit {
	owner := &finding.Owner{PID: int(s.Pid), Comm: s.Comm}
	return &finding.Limit{Kind: KindWriteSize, Value: fmt.Sprintf("%.0f bytes a %s call", perCall, s.Dir),
		Where: finding.Place{Layer: finding.LayerSocket, Object: fmt.Sprintf("%s calls of %s", s.Dir, owner)}, SetBy: owner,
		Applies: finding.Scope{PIDs: []int{int(s.Pid)}},
		Undo: []finding.Action{
			finding.Change("in %s: send larger messages, batching its %.0f-byte %s calls into writes or datagrams of at least %d bytes", owner, perCall, s.Dir, smallPacketTarget),
			finding.Change("or amortize the system calls: sendmmsg/recvmmsg, UDP GSO (setsockopt UDP_SEGMENT) and UDP GRO on receive"),
		},
		Arithmetic: fmt.Sprintf("%d calls moving %d bytes: %.0f bytes each", s.Calls, s.Bytes, perCall),
		Source:     "sock_io events"}
}

// smallPacketTarget is a message that fills a 1500-byte MTU's datagram.
const smallPacketTarget = 1472
