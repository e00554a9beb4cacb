package pcap

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/skbtrace/skbtrace/internal/capture"
	"github.com/skbtrace/skbtrace/internal/packet"
)

// Options tune the analysis.
type Options struct {
	// MTU is the path's MTU; 0 infers it from the handshake's MSS (+40/+60),
	// else 1500.
	MTU int
	// Flow keeps only flows with an endpoint matching it (see ParseFilter).
	Flow *Filter
	// Graphs keeps downsampled time series for the busiest flows.
	Graphs bool
}

// Analyzer takes frames in capture order and keeps per-flow state; memory
// grows with the number of flows, not with the capture's size.
type Analyzer struct {
	opts  Options
	dirs  map[FlowKey]*Dir
	order []*Dir
	// Outer IP-ID continuity per tunnel flow (outer addresses and UDP ports).
	outer      map[FlowKey]*outerFlow
	outerOrder []*outerFlow

	Frames, NonIP, Truncated, Filtered uint64
	// Snapped counts the frames the capture kept shorter than they were
	// (its snaplen); Truncated those of them cut inside a header read.
	Snapped uint64
	// Malformed counts the frames skipped because a header contradicts
	// itself (or, in a pcapng, an interface's link type is unknown), by
	// the header at fault; MalformedFirst are the first few of them.
	Malformed      map[string]uint64
	MalformedFirst []MalformedFrame
	// UnsupportedLinks counts the frames of link types the decoder does
	// not read, by link type: not malformed, just not read.
	UnsupportedLinks map[int]uint64
	unknownLinks     uint64
	lastUnknownLink  int
	First, Last      int64
	ICMPTooBig       uint64
	ICMPMTU          uint16
	graphed          []*Dir // the directions with a series
	graphFloor       uint64 // the payload a direction needs to take one's place
	pkt              packet.Packet
	lastDir          *Dir // the direction the previous frame went to

	// Fragments counts the IP fragments of TCP and UDP datagrams (no frame
	// of theirs is in NonIP), FragDatagrams the datagrams they belong to;
	// FragOrphans are fragments no flow took, because their datagram's
	// first fragment, which holds the ports, is not in the capture.
	Fragments, FragDatagrams         uint64
	FragOrphans, FragOrphanDatagrams uint64
	frags                            []datagram // open, at most maxOpenDatagrams
	lastFrag                         int        // the one the previous fragment went to
}

type outerFlow struct {
	Key  FlowKey
	VNI  uint32
	IPID idTrack
}

// handshake times the three packets that open a connection, to tell where
// the capture was taken.
type handshake struct {
	syn, synAck, ack int64
}

// maxSeries bounds the graphs' memory: every direction that carries data
// gets a series from its first packet until maxSeries have one; past that,
// one that outgrows the smallest takes its place (drawn from then on).
const maxSeries = 64

// New returns an analyzer.
func New(opts Options) *Analyzer {
	return &Analyzer{opts: opts, dirs: map[FlowKey]*Dir{}, outer: map[FlowKey]*outerFlow{}}
}

// MalformedFrame is a frame skipped, by number, and why.
type MalformedFrame struct {
	Number uint64 `json:"frame"`
	Why    string `json:"why"`
}

// maxMalformedNamed is how many malformed frames the report names.
const maxMalformedNamed = 5

// Run reads every frame of a capture. On a damaged or truncated capture it
// returns the error (naming the packet) after analyzing everything before
// it; a malformed frame is counted and skipped. A capture whose every frame
// has a link type the decoder does not know is an error too.
//
// Reading and decoding run on a goroutine of their own, batches of frames
// ahead of the analysis: on a bulk capture the two halves cost about the
// same, and a second core takes one. Frames are still analyzed one at a
// time in capture order, so the result is the same; the batches bound the
// memory it takes.
func (a *Analyzer) Run(r *capture.Reader) error {
	full, free := make(chan *batch, batches), make(chan *batch, batches)
	for range batches {
		free <- &batch{}
	}
	go decodeBatches(r, full, free)
	var err error
	for b := range full {
		for i := range b.frames {
			d := &b.frames[i]
			a.add(&d.f, &d.p, d.err, d.snapped)
		}
		err = b.err
		free <- b
	}
	if err != nil {
		return err
	}
	if a.Frames > 0 && a.unknownLinks == a.Frames {
		return fmt.Errorf("%w %d (supported: %s)", packet.ErrLinkType, a.lastUnknownLink, packet.SupportedLinks)
	}
	return nil
}

// A batch is frames decoded ahead of the analysis. Handing one over can
// wake the other goroutine, which costs little per frame at batchLen; with
// 8 batches of 2048 (5 MB) neither goroutine waits for long. Fewer, larger
// batches were slower on the benchmark capture (docs/pcap.md).
const (
	batchLen = 2048
	batches  = 8
)

type batch struct {
	frames []decoded
	err    error // the reader's, after the frames: the last batch
}

type decoded struct {
	f       capture.Frame // without Data: the decoder's copy is p
	p       packet.Packet
	err     error
	snapped bool // the capture kept less of the frame than it was
}

// decodeBatches reads and decodes frames into the free batches until the
// capture ends, then closes full.
func decodeBatches(r *capture.Reader, full chan<- *batch, free <-chan *batch) {
	defer close(full)
	for {
		b := <-free
		b.frames = b.frames[:0]
		for len(b.frames) < batchLen {
			if len(b.frames) < cap(b.frames) {
				b.frames = b.frames[:len(b.frames)+1]
			} else {
				// Batches grow with the frames: a small capture stays small.
				b.frames = append(b.frames, decoded{})
			}
			d := &b.frames[len(b.frames)-1]
			if err := r.Next(&d.f); err != nil {
				b.frames = b.frames[:len(b.frames)-1]
				if err != io.EOF {
					b.err = err
				}
				full <- b
				return
			}
			d.err = packet.Decode(d.f.LinkType, d.f.Data, d.f.WireLen, &d.p)
			d.snapped = len(d.f.Data) < d.f.WireLen
			d.f.Data = nil // the reader's buffer moves on
		}
		full <- b
	}
}

// Add analyzes one frame; one the decoder cannot take is counted in Malformed.
func (a *Analyzer) Add(f capture.Frame) {
	err := packet.Decode(f.LinkType, f.Data, f.WireLen, &a.pkt)
	a.add(&f, &a.pkt, err, len(f.Data) < f.WireLen)
}

// add analyzes a decoded frame, or counts why it could not be decoded.
func (a *Analyzer) add(f *capture.Frame, p *packet.Packet, decodeErr error, snapped bool) {
	a.Frames++
	if snapped {
		a.Snapped++
	}
	if decodeErr != nil {
		a.malformed(f, decodeErr)
		return
	}
	if a.First == 0 || f.TimeNs < a.First {
		a.First = f.TimeNs
	}
	a.Last = max(a.Last, f.TimeNs)
	if p.Truncated {
		a.Truncated++
	}
	if p.ICMPTooBig {
		a.ICMPTooBig++
		a.ICMPMTU = p.ICMPMTU
	}
	// A fragment's IP header names its datagram's protocol even where the
	// fragment carries no transport header.
	if fi := p.Frag(); fi != nil && (fi.Proto == 6 || fi.Proto == 17) {
		a.fragment(f, p, fi)
		return
	}
	if p.NotIP || (!p.HasTCP && !p.HasUDP) {
		a.NonIP++
		return
	}
	d := a.flow(p)
	if d == nil {
		a.Filtered++
		return
	}
	ip := p.L3()
	mtu := a.mtu(d)
	a.frame(d, f, p.Direction, ip.TotalLen, p.HasTCP && p.TCP.PayloadLen > 0 || p.HasUDP)
	if int(ip.TotalLen) > mtu {
		d.OverMTU++
	}
	a.segment(d, f.TimeNs, p, mtu)
}

// flow finds the direction a packet with a transport header belongs to, or
// nil when the filter leaves it out.
func (a *Analyzer) flow(p *packet.Packet) *Dir {
	ip := p.L3()
	key := FlowKey{Proto: ip.Proto}
	if p.HasTCP {
		key.Src, key.Dst = netip.AddrPortFrom(ip.Src, p.TCP.SrcPort), netip.AddrPortFrom(ip.Dst, p.TCP.DstPort)
	} else {
		key.Src, key.Dst = netip.AddrPortFrom(ip.Src, p.UDP.SrcPort), netip.AddrPortFrom(ip.Dst, p.UDP.DstPort)
	}
	if a.opts.Flow != nil && !a.opts.Flow.Match(key) {
		return nil
	}
	return a.dir(key)
}

// frame counts one frame of a direction, size its IP bytes; frameDir is
// the direction the link header gave, when the capture's record gives none.
func (a *Analyzer) frame(d *Dir, f *capture.Frame, frameDir uint8, size uint32, data bool) {
	if d.Packets == 0 {
		d.First = f.TimeNs
	}
	d.Packets++
	d.Last = f.TimeNs
	d.Sizes[sizeBucket(size)]++
	dir := f.Dir
	if dir == packet.DirUnknown {
		dir = frameDir
	}
	if data {
		switch dir {
		case packet.DirOut:
			d.DataOut++
		case packet.DirIn:
			d.DataIn++
		}
	}
}

// segment analyzes a whole TCP segment or UDP datagram: a fragmented one
// once all its fragments are in.
func (a *Analyzer) segment(d *Dir, ts int64, p *packet.Packet, mtu int) {
	d.Encap = p.Encap
	// GRO never merges fragments, so their IP IDs say nothing about merging.
	whole := p.Frag() == nil
	ip := p.L3()
	if p.HasTCP {
		a.tcp(d, p, ts, mtu, whole)
	} else {
		payload := uint32(max(int(p.UDP.Len)-8, 0))
		if payload > 0 {
			d.DataPackets++
			d.PayloadBytes += uint64(payload)
			if whole && !ip.DF && ip.Version == 4 {
				d.IPID.add(uint16(ip.ID), 1)
			}
			d.graph(ts, 0, payload, false, a)
		}
	}
	if whole && p.Encap != packet.EncapNone && p.Outer.Version == 4 && !p.Outer.DF {
		ok := FlowKey{netip.AddrPortFrom(p.Outer.Src, p.OuterUDP.SrcPort), netip.AddrPortFrom(p.Outer.Dst, p.OuterUDP.DstPort), 17}
		of := a.outer[ok]
		if of == nil {
			of = &outerFlow{Key: ok, VNI: p.VNI}
			a.outer[ok] = of
			a.outerOrder = append(a.outerOrder, of)
		}
		if p.HasTCP && p.TCP.PayloadLen > 0 || p.HasUDP {
			of.IPID.add(uint16(p.Outer.ID), segsIn(p.TCP.PayloadLen, a.segSize(d)))
		}
	}
}

// malformed counts a frame the decoder refused, by the header at fault.
func (a *Analyzer) malformed(f *capture.Frame, err error) {
	part, why := "frame", err.Error()
	var de *packet.DecodeError
	if errors.As(err, &de) {
		part = de.Part
	}
	if errors.Is(err, packet.ErrLinkType) {
		a.unknownLinks++
		a.lastUnknownLink = f.LinkType
		if a.UnsupportedLinks == nil {
			a.UnsupportedLinks = map[int]uint64{}
		}
		a.UnsupportedLinks[f.LinkType]++
		return
	}
	if a.Malformed == nil {
		a.Malformed = map[string]uint64{}
	}
	a.Malformed[part]++
	if len(a.MalformedFirst) < maxMalformedNamed {
		a.MalformedFirst = append(a.MalformedFirst, MalformedFrame{Number: f.Number, Why: why})
	}
}

// dir finds a direction, creating it with its reverse so each holds the
// other: the per-packet work looks the peer up once.
func (a *Analyzer) dir(k FlowKey) *Dir {
	// Consecutive frames mostly belong to one flow, data one way and ACKs
	// the other: comparing keys is cheaper than hashing one.
	if last := a.lastDir; last != nil {
		if last.Key == k {
			return last
		}
		if last.rev.Key == k {
			a.lastDir = last.rev
			return last.rev
		}
	}
	d := a.dirs[k]
	if d == nil {
		rev := &Dir{Key: k.Reverse(), WScale: -1}
		d = &Dir{Key: k, WScale: -1, rev: rev}
		rev.rev = d
		a.dirs[k], a.dirs[rev.Key] = d, rev
		a.order = append(a.order, d, rev)
	}
	a.lastDir = d
	return d
}

// tcp analyzes a TCP segment; whole is false for one that came as IP
// fragments, which is no offload's frame and no GRO candidate.
func (a *Analyzer) tcp(d *Dir, p *packet.Packet, ts int64, mtu int, whole bool) {
	t := &p.TCP
	ip := p.L3()
	rev := d.rev
	if t.Flags&packet.SYN != 0 {
		d.sawSYN, d.SYNTime, d.isn = true, ts, t.Seq
		d.MSS, d.WScale, d.SACKOK = t.MSS, t.WScale, t.SACKOK
		client := d
		if t.Flags&packet.ACK != 0 {
			client = rev
		}
		if client.handshake == nil {
			client.handshake = &handshake{}
		}
		if t.Flags&packet.ACK != 0 {
			client.handshake.synAck = ts
		} else {
			client.handshake.syn = ts
		}
	} else if h := d.handshake; h != nil && h.synAck != 0 && h.ack == 0 && t.Flags&packet.ACK != 0 {
		h.ack = ts
	}
	segSize := a.segSize(d)
	if !d.sawSYN && !d.haveData && t.PayloadLen > 0 {
		d.isn = t.Seq // no handshake: sequence numbers relative to the first data
	}
	if t.PayloadLen > 0 {
		d.DataPackets++
		d.PayloadBytes += uint64(t.PayloadLen)
		segs := segsIn(t.PayloadLen, segSize)
		if whole && int(ip.TotalLen) > mtu {
			d.OverMTUSegs += uint64(segs)
		}
		if d.ackSeen != 0 {
			d.AckToData.add(float64(ts-d.ackSeen) / 1e3)
			d.ackSeen = 0
		}
		retrans := d.tcpData(t.Seq, t.PayloadLen, segSize)
		if !retrans {
			d.remember(t.Seq, t.Seq+t.PayloadLen, ts)
		}
		if whole && ip.Version == 4 && !ip.DF {
			d.IPID.add(uint16(ip.ID), segs)
		}
		a.windowLimited(d, rev, ts, segSize)
		d.graph(ts, t.Seq+t.PayloadLen-d.isn, t.PayloadLen, retrans, a)
	}
	if t.Flags&packet.FIN != 0 {
		d.sawFIN, d.finEnd = true, t.Seq+t.PayloadLen+1
	}
	if t.Flags&packet.ACK != 0 {
		d.ack(t.Ack, t.Window, t.PayloadLen > 0 || t.Flags&(packet.SYN|packet.FIN|packet.RST) != 0, ts, rev)
		if rev.series != nil {
			rev.series.ackAt(ts, t.Ack-rev.isn, uint32(t.Window)<<a.scale(d), t.SACKBlocks > 0)
		}
	}
}

// windowLimited counts the time this direction's unacknowledged data fills
// the window the peer last advertised.
func (a *Analyzer) windowLimited(d, peer *Dir, ts int64, mss uint32) {
	if d.limitedSince != 0 {
		d.WindowLimitedNs += min(ts-d.limitedSince, int64(1e9))
		d.limitedSince = 0
	}
	if !peer.haveAck {
		return
	}
	window := uint32(peer.lastWin) << a.scale(peer)
	inFlight := d.maxEnd - peer.lastAck
	if window > 0 && inFlight+mss >= window {
		d.limitedSince = ts
	}
}

// scale is the window scale a direction's advertised windows carry: only
// when both SYNs offered it.
func (a *Analyzer) scale(d *Dir) uint8 {
	if d.WScale < 0 || d.rev.WScale < 0 {
		return 0
	}
	return uint8(d.WScale)
}

// segSize is the payload of one wire segment in a direction: the peer's
// MSS from its SYN, less the timestamp option's 12 bytes that Linux sends.
func (a *Analyzer) segSize(d *Dir) uint32 {
	if d.rev.MSS > 0 {
		return uint32(d.rev.MSS) - 12
	}
	hdr := 40
	if d.Key.Src.Addr().Is6() {
		hdr = 60
	}
	return uint32(a.mtu(d) - hdr - 12)
}

// mtu is the MTU frames are judged against.
func (a *Analyzer) mtu(d *Dir) int {
	if a.opts.MTU > 0 {
		return a.opts.MTU
	}
	hdr := 40
	if d.Key.Src.Addr().Is6() {
		hdr = 60
	}
	if d.MSS > 0 {
		return int(d.MSS) + hdr
	}
	if d.rev.MSS > 0 {
		return int(d.rev.MSS) + hdr
	}
	return 1500
}

// location says where a direction's data was captured. From the frames'
// direction when the capture records it (Linux cooked, pcapng flags); from the handshake
// when it is in the capture: the side whose packet is answered at once is
// near. Else from the data: near the sender, data waits a whole RTT for its
// ACK and new data follows an ACK at once; near the receiver, the reverse.
func (a *Analyzer) location(d *Dir) string {
	// Best of all, the capture says which way each frame went.
	if known := d.DataOut + d.DataIn; known >= 10 {
		switch {
		case d.DataOut*10 >= known*9:
			return LocationSender
		case d.DataIn*10 >= known*9:
			return LocationReceiver
		}
	}
	// The handshake is one sample, the medians many: a guest descheduled
	// between a SYN-ACK and its ACK (a CI host under load, 2026-11-28)
	// made the handshake place a capture on the sender's NIC at the
	// receiver while the medians, 13 to 1, placed it at the sender. Where
	// the two disagree the capture is placed nowhere.
	byHandshake, byMedians := handshakeLocation(d), medianLocation(d)
	switch {
	case byHandshake == "":
		return cmp.Or(byMedians, LocationBetween)
	case byMedians == "" || byMedians == byHandshake:
		return byHandshake
	}
	return LocationBetween
}

// handshakeLocation places the capture by the handshake's two gaps: the
// far end's answer takes the path's round trip, the near end's a moment.
func handshakeLocation(d *Dir) string {
	client := d
	if client.handshake == nil {
		client = d.rev
	}
	if h := client.handshake; h != nil && h.syn != 0 && h.synAck != 0 && h.ack != 0 {
		toServer, toClient := h.synAck-h.syn, h.ack-h.synAck
		senderIsClient := d == client
		switch {
		case toServer > 2*toClient:
			return nearIf(senderIsClient)
		case toClient > 2*toServer:
			return nearIf(!senderIsClient)
		}
	}
	return ""
}

// medianLocation places the capture by the data's own gaps: near the
// sender the ACKs take the round trip and the data answers them at once.
func medianLocation(d *Dir) string {
	if d.RTT.Count < 10 || d.AckToData.Count < 10 {
		return ""
	}
	dataToAck, ackToData := d.RTT.Quantile(0.5), d.AckToData.Quantile(0.5)
	switch {
	case dataToAck > 2*ackToData:
		return LocationSender
	case ackToData > 2*dataToAck:
		return LocationReceiver
	}
	return ""
}

func nearIf(sender bool) string {
	if sender {
		return LocationSender
	}
	return LocationReceiver
}

// Where a capture was taken, for one direction's data.
const (
	LocationSender   = "near the sender"
	LocationReceiver = "near the receiver"
	LocationBetween  = "between the ends, or both ends on one host"
)

// Filter selects flows by an endpoint: ADDR, ADDR:PORT, [V6]:PORT or :PORT.
type Filter struct {
	addr netip.Addr
	port uint16
}

// ParseFilter reads a --flow value.
func ParseFilter(s string) (*Filter, error) {
	// An address alone, bare or bracketed: "::1" is an address, not port ":1".
	if ad, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return &Filter{addr: ad.Unmap()}, nil
	}
	var f *Filter
	if ap, err := netip.ParseAddrPort(s); err == nil {
		f = &Filter{addr: ap.Addr().Unmap(), port: ap.Port()}
	} else if p, ok := strings.CutPrefix(s, ":"); ok {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("flow filter %q: %q is not a port (1-65535)", s, p)
		}
		f = &Filter{port: uint16(n)}
	} else {
		return nil, fmt.Errorf("flow filter %q: want ADDR, ADDR:PORT, [IPv6]:PORT or :PORT", s)
	}
	// Port 0 would match every port: no flow uses it.
	if f.port == 0 {
		return nil, fmt.Errorf("flow filter %q: port 0 is no flow's port (1-65535)", s)
	}
	return f, nil
}

// Match says whether either endpoint matches.
func (f *Filter) Match(k FlowKey) bool {
	return f.end(k.Src) || f.end(k.Dst)
}

func (f *Filter) end(ap netip.AddrPort) bool {
	return (!f.addr.IsValid() || ap.Addr().Unmap() == f.addr) && (f.port == 0 || ap.Port() == f.port)
}

// Flows returns the directions that carried data, busiest first.
func (a *Analyzer) Flows() []*Dir {
	var out []*Dir
	for _, d := range a.order {
		if d.Packets > 0 {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PayloadBytes > out[j].PayloadBytes })
	return out
}
