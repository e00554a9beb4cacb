package pcap

import (
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/capture"
	"github.com/skbtrace/skbtrace/internal/packet"
)

// IP fragments are put back together as far as the analysis needs: each
// fragment goes to its datagram by (source, destination, protocol, IP ID),
// and through the datagram's first fragment, which holds the ports, to a
// flow. The segment inside is analyzed once the datagram is whole, with its
// whole length; one never whole did not reach the receiver's TCP either.

// maxOpenDatagrams bounds the datagrams waiting for fragments: Linux holds
// 4 MB of them per namespace by default (ipfrag_high_thresh), about 64 of
// 64 KB. The one heard from longest ago gives way.
const maxOpenDatagrams = 64

// fragTimeout is when Linux gives up on an incomplete datagram
// (ipfrag_time); a fragment later than that starts a new one, as an IP ID
// that wrapped around does.
const fragTimeout = 30e9

// fragKey names a datagram. IPv6 reassembles by addresses and ID alone.
type fragKey struct {
	src, dst netip.Addr
	id       uint32
	proto    uint8
}

// datagram is a fragmented datagram still open.
type datagram struct {
	key      fragKey
	dir      *Dir // from the first fragment; nil before it
	filtered bool // the first fragment's flow is filtered out
	first    bool // the first fragment is in
	haveEnd  bool // the last fragment is in: total is known
	total    uint32
	bytes    uint32 // of the datagram's payload, in the fragments so far
	frames   uint32
	next     uint32 // the offset that continues the fragments so far
	gap      bool   // a fragment came out of that order
	last     int64  // ns, the latest fragment
	early    early
	pkt      packet.Packet // the first fragment's headers, for the segment analysis
}

// early are the fragments that came before the first, counted into its
// flow when it shows.
type early struct {
	frames, out, in uint32
	since           int64 // ns, the earliest
	sizes           [len(sizeBounds)]uint32
}

// fragStats are a direction's datagrams that came as IP fragments, counted
// by their first fragment; those whole in the capture were analyzed as
// segments.
type fragStats struct {
	Datagrams, Whole uint64
	// CutAtEnd are datagrams still open when the capture ended that took
	// fragments after the direction's last whole one: the capture stopped
	// inside them.
	CutAtEnd uint64
	// Unterminated are datagrams whose fragments ran on from the start
	// without a gap, every one marked more-to-come, and no last one came:
	// the fragmenting side never ended them (QEMU 7.2's vmxnet3 so cuts a
	// TSO packet whose payload is a whole number of fragments: 10, 26 and
	// 30 of 1448 bytes), or their last fragments were lost.
	Unterminated, unterminatedOpen uint64
	LastWhole                      int64  // ns, when the latest whole datagram's last fragment came
	DF                             uint64 // first fragments with DF set
	Frames                         uint64 // fragments of the whole datagrams
	MaxFrames                      uint32
	Payload                        uint64 // transport payload of the whole datagrams
	MaxPayload                     uint32
}

// fragment takes a fragment of a TCP or UDP datagram; ip is its fragmented
// header (the outer one of a tunnel, when that is the fragmented one).
func (a *Analyzer) fragment(f *capture.Frame, p *packet.Packet, ip *packet.IP) {
	a.Fragments++
	k := fragKey{ip.Src, ip.Dst, ip.ID, ip.Proto}
	if ip.Version == 6 {
		k.proto = 0
	}
	i := a.datagram(k, f.TimeNs, ip.FragOffset == 0)
	g := &a.frags[i]
	g.frames++
	g.bytes += ip.FragLen
	g.last = f.TimeNs
	if uint32(ip.FragOffset) != g.next {
		g.gap = true
	}
	g.next = uint32(ip.FragOffset) + ip.FragLen
	if !ip.MoreFrags {
		g.haveEnd, g.total = true, uint32(ip.FragOffset)+ip.FragLen
	}
	if ip.FragOffset == 0 {
		g.first = true
		if p.HasTCP || p.HasUDP {
			a.firstFragment(g, p, ip)
		}
	}
	switch {
	case g.dir != nil:
		a.frame(g.dir, f, p.Direction, ip.TotalLen, true)
	case g.filtered:
		a.Filtered++
	default:
		e := &g.early
		if e.frames == 0 || f.TimeNs < e.since {
			e.since = f.TimeNs
		}
		e.frames++
		e.sizes[sizeBucket(ip.TotalLen)]++
		dir := f.Dir
		if dir == packet.DirUnknown {
			dir = p.Direction
		}
		switch dir {
		case packet.DirOut:
			e.out++
		case packet.DirIn:
			e.in++
		}
	}
	if g.first && g.haveEnd && g.bytes >= g.total {
		a.whole(i)
	}
}

// firstFragment ties a datagram to its flow and counts the fragments that
// came before it there.
func (a *Analyzer) firstFragment(g *datagram, p *packet.Packet, ip *packet.IP) {
	d := a.flow(p)
	if d == nil {
		g.filtered = true
		a.Filtered += uint64(g.early.frames)
		return
	}
	g.dir, g.pkt = d, *p
	d.Frag.Datagrams++
	if ip.DF {
		d.Frag.DF++
	}
	e := &g.early
	if e.frames == 0 {
		return
	}
	if d.Packets == 0 || e.since < d.First {
		d.First = e.since
	}
	d.Packets += uint64(e.frames)
	for i, n := range e.sizes {
		d.Sizes[i] += uint64(n)
	}
	d.DataOut += uint64(e.out)
	d.DataIn += uint64(e.in)
}

// whole analyzes the segment of a datagram all of whose fragments are in,
// and closes it.
func (a *Analyzer) whole(i int) {
	g := &a.frags[i]
	if d := g.dir; d != nil && fullLength(&g.pkt, g.total) {
		fs := &d.Frag
		fs.Whole++
		fs.LastWhole = max(fs.LastWhole, g.last)
		fs.Frames += uint64(g.frames)
		fs.MaxFrames = max(fs.MaxFrames, g.frames)
		payload := uint32(max(int(g.pkt.UDP.Len)-8, 0))
		if g.pkt.HasTCP {
			payload = g.pkt.TCP.PayloadLen
		}
		fs.Payload += uint64(payload)
		fs.MaxPayload = max(fs.MaxPayload, payload)
		a.segment(d, g.last, &g.pkt, a.mtu(d))
	}
	a.closeDatagram(i)
}

// fullLength gives a TCP segment in a fragmented datagram the datagram's
// length, total bytes after the fragment header; false when the lengths
// contradict each other. A tunnel's inner packet, and a UDP header, say
// the whole length already.
func fullLength(p *packet.Packet, total uint32) bool {
	ip := p.L3()
	if !ip.Fragment || !p.HasTCP {
		return true
	}
	// Between the fragment header and the transport: IPv6 extension
	// headers of the fragmentable part, in the first fragment only.
	between := ip.FragLen - (ip.TotalLen - uint32(ip.HdrLen))
	if total < between+uint32(p.TCP.HdrLen) {
		return false
	}
	l4 := total - between
	ip.TotalLen, p.TCP.PayloadLen = uint32(ip.HdrLen)+l4, l4-uint32(p.TCP.HdrLen)
	return true
}

// datagram finds the open datagram of a fragment, or opens one, and
// returns its index. A second first fragment, or one past fragTimeout,
// begins a new datagram under the same key.
func (a *Analyzer) datagram(k fragKey, ts int64, first bool) int {
	if a.frags == nil {
		a.frags = make([]datagram, 0, maxOpenDatagrams)
	}
	// A datagram's fragments mostly come one after another.
	i := a.lastFrag
	if i >= len(a.frags) || a.frags[i].key != k {
		for i = 0; i < len(a.frags) && a.frags[i].key != k; i++ {
		}
	}
	if i < len(a.frags) {
		g := &a.frags[i]
		if ts-g.last <= fragTimeout && !(first && g.first) {
			a.lastFrag = i
			return i
		}
		a.closeDatagram(i)
	}
	if len(a.frags) == maxOpenDatagrams {
		oldest := 0
		for j := range a.frags {
			if a.frags[j].last < a.frags[oldest].last {
				oldest = j
			}
		}
		a.closeDatagram(oldest)
	}
	a.frags = append(a.frags, datagram{key: k, last: ts})
	a.FragDatagrams++
	a.lastFrag = len(a.frags) - 1
	return a.lastFrag
}

// closeDatagram forgets an open datagram; its fragments stay counted where
// they went, and those no flow took are counted as such.
func (a *Analyzer) closeDatagram(i int) {
	if g := &a.frags[i]; g.dir != nil && g.unterminated() {
		g.dir.Frag.Unterminated++
	}
	if g := &a.frags[i]; g.dir == nil && !g.filtered {
		a.FragOrphans += uint64(g.frames)
		a.FragOrphanDatagrams++
	}
	last := len(a.frags) - 1
	a.frags[i] = a.frags[last]
	a.frags = a.frags[:last]
}

// markCutAtEnd counts, in their flows, the datagrams still open at the end
// of the capture that took fragments after their direction's last whole
// datagram: cut by the capture's end, not missing a fragment. One missing
// a fragment mid-capture stays open too, but whole ones follow it.
func (a *Analyzer) markCutAtEnd() {
	for _, d := range a.dirs {
		d.Frag.CutAtEnd, d.Frag.unterminatedOpen = 0, 0 // a report may be asked for again
	}
	for i := range a.frags {
		// Without a whole datagram in its direction, none tells a cut one
		// from one missing a fragment.
		g := &a.frags[i]
		switch {
		case g.dir == nil:
		case g.dir.Frag.Whole > 0 && g.last >= g.dir.Frag.LastWhole:
			g.dir.Frag.CutAtEnd++
		case g.unterminated():
			g.dir.Frag.unterminatedOpen++
		}
	}
}

// openOrphans counts the fragments of the datagrams still open that no
// flow took, for the report.
func (a *Analyzer) openOrphans() (frames, datagrams uint64) {
	for i := range a.frags {
		if g := &a.frags[i]; g.dir == nil && !g.filtered {
			frames += uint64(g.frames)
			datagrams++
		}
	}
	return frames, datagrams
}

// unterminated says an incomplete datagram's fragments ran on from its
// start without a gap and none said it was the last.
func (g *datagram) unterminated() bool {
	return g.first && !g.haveEnd && !g.gap
}
