package timeline

import (
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/event"
)

// MaxCandidates bounds the flows whose bins are kept: the busiest so far.
// Every other flow keeps only its totals, so memory grows with the
// connections by a few hundred bytes each, not by their bins: a page of
// 30,000 connections kept every flow's bins and took 5.9 GB (issue 45).
const MaxCandidates = 4 * MaxFlows

// tcpClose is TCP_CLOSE: a state change from it starts a socket's life,
// one to it ends it.
const tcpClose event.TCPState = 7

// flowKey is one socket's connection. The socket (0 for the doctor's
// tcp_info readings, which have none) tells a reused address's new
// connection from the old; a socket freed and reused for the same
// addresses is told by its new life's state change (lifeChange).
type flowKey struct {
	sock        uint64
	netns       uint32
	local, peer netip.AddrPort
}

// flowAcc is one connection's life: its totals always, its bins while it
// is a candidate.
type flowAcc struct {
	key flowKey
	// The totals over the whole life, kept or not: what ranks the flows.
	sentBytes, ackedBytes float64
	limitNs               int64 // send-limit time inside the timeline
	// runNs is each reason's whole runs, as stat counts them: the bins
	// leave out what began before the timeline did, and the legend read
	// sndbuf 99 % where stat's text said 96 %.
	runNs      [event.SendlimCount]int64
	lastAcked  uint64
	lastAckedT int64
	acked      bool

	kept  bool // a candidate: bins and drops are kept
	bins  bins[flowBin]
	drops bins[uint64]
	// keptFrom is when the flow last became a candidate, partial when it
	// had moved something before: its series start there.
	keptFrom int64
	partial  bool
	undrawn  float64 // bytes moved before keptFrom
}

// score ranks the flows as Build does: bytes acknowledged where measured,
// else bytes sent.
func (f *flowAcc) score() float64 {
	if f.ackedBytes > 0 {
		return f.ackedBytes
	}
	return f.sentBytes
}

// moved: a sender, drawn or counted as left out.
func (f *flowAcc) moved() bool { return f.score() > 0 || f.limitNs > 0 }

// pairKey is a flow's two addresses in either direction, for drops: a
// dropped packet is the flow's data or its ACKs.
type pairKey [2]netip.AddrPort

func pairOf(a, b netip.AddrPort) pairKey {
	if b.Compare(a) < 0 {
		a, b = b, a
	}
	return pairKey{a, b}
}

func (b *Builder) flow(sock uint64, netns uint32, local, peer netip.AddrPort) *flowAcc {
	k := flowKey{sock, netns, unmap(local), unmap(peer)}
	f := b.flows[k]
	if f == nil {
		f = &flowAcc{key: k}
		b.flows[k] = f
		if sock != 0 {
			b.bySock[sock] = f
		}
	}
	return f
}

// lifeChange starts a socket's new life at a change from CLOSE (or an
// accepted socket leaving LISTEN): its previous one, whatever its
// addresses, was another connection, drawn or counted apart. At a change
// to CLOSE a life that is no candidate is counted and forgotten; a
// candidate's stays to take the socket's last events (tcp_stage reports
// after the close).
func (b *Builder) lifeChange(c *event.TCPConn) {
	var f *flowAcc
	switch {
	case c.Old == tcpClose || c.Old == event.TCPListen && c.New != tcpClose:
		f = b.bySock[c.Sock]
	case c.New == tcpClose:
		if f = b.bySock[c.Sock]; f != nil && f.kept {
			return
		}
	}
	if f == nil {
		return
	}
	delete(b.bySock, c.Sock)
	delete(b.flows, f.key)
	// A candidate stays one, its bins to be drawn; another is only counted.
	if !f.kept && f.moved() {
		b.otherFlows++
	}
}

// consider makes f a candidate when there is room or it now outranks the
// least of them, whose bins are dropped: the candidates are always the
// busiest flows so far, so the few drawn are among them. from is where
// the event that moved it began (its bins start there); moved says
// whether the flow had moved anything before it, before how many bytes,
// left undrawn.
func (b *Builder) consider(f *flowAcc, from int64, moved bool, before float64) {
	if f.kept {
		return
	}
	if len(b.cands) >= MaxCandidates {
		if f.score() <= b.floor {
			return
		}
		least := b.least()
		if f.score() <= b.cands[least].score() {
			b.floor = b.cands[least].score()
			return
		}
		b.evict(least)
	}
	f.kept, f.keptFrom, f.partial, f.undrawn = true, from, moved, before
	// The evicted flow's arrays: among many equal flows the candidates
	// change often, and fresh bins each time were most of the work.
	f.bins.b, f.drops.b, b.spare, b.spareDrops = b.spare, b.spareDrops, nil, nil
	b.cands = append(b.cands, f)
	p := pairOf(f.key.local, f.key.peer)
	b.byPair[p] = append(b.byPair[p], f)
	if len(b.cands) == MaxCandidates {
		b.floor = b.cands[b.least()].score()
	}
}

// least is the index of the candidate with the lowest score.
func (b *Builder) least() int {
	i := 0
	for j, c := range b.cands {
		if c.score() < b.cands[i].score() {
			i = j
		}
	}
	return i
}

func (b *Builder) evict(i int) {
	f := b.cands[i]
	b.cands[i] = b.cands[len(b.cands)-1]
	b.cands = b.cands[:len(b.cands)-1]
	p := pairOf(f.key.local, f.key.peer)
	fs := b.byPair[p]
	for j, g := range fs {
		if g == f {
			fs = append(fs[:j], fs[j+1:]...)
			break
		}
	}
	if len(fs) == 0 {
		delete(b.byPair, p)
	} else {
		b.byPair[p] = fs
	}
	b.spare, b.spareDrops = f.bins.b[:0], f.drops.b[:0]
	f.kept, f.bins, f.drops = false, bins[flowBin]{}, bins[uint64]{}
	// An ended life that lost its place is only counted; a live one is
	// counted at Build, or drawn if it comes back.
	if b.flows[f.key] != f && f.moved() {
		b.otherFlows++
	}
}

// addDrops counts dropped packets of a kept flow's data or ACKs.
func (b *Builder) addDrops(local, peer netip.AddrPort, t int64, n uint64) {
	fs := b.byPair[pairOf(unmap(local), unmap(peer))]
	if len(fs) == 0 {
		return
	}
	i := b.index(t)
	for _, f := range fs {
		*f.drops.at(i) += n
	}
}
