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

// KindReadPace is how an application drains a socket: late reads, or
// pauses that leave the window shut. Its own code sets it; the lab applies
// its remedy by restarting the reader as the control reads.
const KindReadPace = "app_read_pace"

// readerOwner is who reads a receiving flow: the socket's owner as the
// observer read it, else the process that received the most bytes
// (sock_io records no socket); nil where neither is known.
func readerOwner(ev *Evidence, f *Flow) *finding.Owner {
	if f != nil {
		if o := socketOwner(ev, f); o != nil {
			return o
		}
	}
	var top *SockIO
	for i := range ev.SockIO {
		if s := &ev.SockIO[i]; s.Dir == "recv" && s.Bytes > 0 && (top == nil || s.Bytes > top.Bytes) {
			top = s
		}
	}
	if top == nil {
		return nil
	}
	return &finding.Owner{PID: int(top.Pid), Comm: top.Comm}
}

// readPaceLimit is a receiving flow's reader as the limit reader-late and
// a stopped reader's rwnd-limited name: what it does (how), what to change
// (fix), with the measurement in the arithmetic.
func readPaceLimit(ev *Evidence, f *Flow, value, fix, arithmetic string) *finding.Limit {
	owner := readerOwner(ev, f)
	who := "the receiving application"
	if owner != nil {
		who = owner.String()
	}
	var where finding.Place
	var applies finding.Scope
	if f != nil {
		flow := f.Local.String() + " " + f.Peer.String()
		where, applies = finding.Place{Layer: finding.LayerSocket, Netns: f.Netns, Object: flow}, finding.Scope{Flows: []string{flow}}
	} else {
		where = finding.Place{Layer: finding.LayerProcess, Object: "recv calls of " + who}
	}
	if owner != nil {
		applies.PIDs = []int{owner.PID}
	}
	return &finding.Limit{Kind: KindReadPace, Value: value, Where: where, SetBy: owner, Applies: applies,
		Undo: []finding.Action{
			finding.Change("in %s: %s", who, fix),
			finding.Change("move slow processing off the reading thread, so reads are never held behind it"),
		},
		Arithmetic: arithmetic, Source: "tcp_stage, tcp_sendlim and sock_io events"}
}
