// Package pcap analyzes packet captures per flow: throughput, retransmissions
// counted the way tcptrace counts them, out-of-order segments, duplicate
// ACKs, zero-window and window-limited time, RTT at the capture point, the
// handshake's options, where the capture was taken, and the offload
// evidence Wireshark leaves to the reader: frames larger than the MTU and
// who made them (sender TSO or receiver GRO), the IP-ID continuity that
// decides whether GRO can merge DF=0 packets, outer and inner, and the
// segments that came as IP fragments, put back into their datagrams.
package pcap

import (
	"math"
	"net/netip"
)

// FlowKey is one direction of a flow.
type FlowKey struct {
	Src, Dst netip.AddrPort
	Proto    uint8
}

// Reverse is the other direction.
func (k FlowKey) Reverse() FlowKey { return FlowKey{k.Dst, k.Src, k.Proto} }

// sizeBounds are the upper bounds of the packet-size histogram (IP bytes).
var sizeBounds = [...]uint32{64, 128, 256, 512, 1024, 1500, 9000, 16384, 32768, 65535, 131072, 262144, math.MaxUint32}

// Dir is one direction of a flow.
type Dir struct {
	Key                  FlowKey
	rev                  *Dir // the other direction
	Packets, DataPackets uint64
	PayloadBytes         uint64
	First, Last          int64 // ns
	Sizes                [len(sizeBounds)]uint64
	OverMTU              uint64 // frames larger than the MTU
	OverMTUSegs          uint64 // segments those frames carry
	Encap                uint8

	// TCP, from this direction's SYN.
	SYNTime  int64
	MSS      uint16
	WScale   int8
	SACKOK   bool
	sawSYN   bool
	isn      uint32
	maxEnd   uint32
	haveData bool
	holes    []hole
	// holesForgotten is the bytes of holes dropped past maxHoles, counted
	// as missed: a flow with that many gaps lost the capture's packets.
	holesForgotten uint64
	// finEnd is the sequence after this direction's FIN, which an ACK
	// covers without any data.
	finEnd    uint32
	sawFIN    bool
	maxAck    uint32 // the highest ACK this direction sent
	Retrans   uint64 // retransmitted packets
	RetransSg uint64 // retransmitted segments (MSS units, as the kernel counts them)
	OutOfOrd  uint64
	DupAcks   uint64
	lastAck   uint32
	lastWin   uint16
	haveAck   bool
	// Zero-window episodes this direction advertised.
	ZeroWindows  uint64
	ZeroWindowNs int64
	zeroSince    int64
	// Window-limited: time this direction's data filled the peer's window.
	WindowLimitedNs int64
	limitedSince    int64
	// RTT samples measured from this direction's data to the peer's ACKs,
	// and the time from a peer's ACK to the next data this direction sends:
	// near the sender the first is the whole RTT and the second tiny, near
	// the receiver the other way round.
	RTT       histogram
	AckToData histogram
	ackSeen   int64 // when the peer's last new ACK passed, until data follows
	// ACKs from the peer that end exactly at a captured segment's end, and
	// ACKs that fall inside one: segments split after the capture point
	// (TSO/GSO at the sender) draw ACKs inside the captured frames;
	// frames merged before it (GRO at the receiver) are acknowledged whole.
	AcksAligned, AcksInside uint64
	// Data frames the capture marks as sent by or received at the capturing host.
	DataOut, DataIn uint64
	pending         []sent
	// IP-ID continuity of this direction's DF=0 data packets (the innermost header).
	IPID idTrack
	// Datagrams that came as IP fragments.
	Frag fragStats

	series *series
	// The handshake this direction opened, by its SYN (the peer's SYN-ACK
	// may come first): held here so no packet hashes its key to find it.
	handshake *handshake
}

type hole struct{ from, to uint32 }

type sent struct {
	start, end uint32
	ts         int64
}

// maxHoles and maxPending bound a flow's memory whatever the capture holds.
const (
	maxHoles   = 64
	maxPending = 256
)

// Duration is from the first to the last packet, in seconds.
func (d *Dir) Duration() float64 { return float64(d.Last-d.First) / 1e9 }

// Throughput is payload bits per second over the direction's duration.
func (d *Dir) Throughput() float64 {
	if d.Last <= d.First {
		return 0
	}
	return float64(d.PayloadBytes) * 8 / d.Duration()
}

// seqLess compares sequence numbers modulo 2^32.
func seqLess(a, b uint32) bool { return int32(a-b) < 0 }

// tcpData follows the sequence space of this direction's data.
func (d *Dir) tcpData(seq, length, mss uint32) (retransmitted bool) {
	end := seq + length
	if !d.haveData {
		d.haveData, d.maxEnd = true, end
		return false
	}
	switch {
	case !seqLess(seq, d.maxEnd): // new data, maybe past a gap
		if seqLess(d.maxEnd, seq) {
			d.addHole(d.maxEnd, seq)
		}
		d.maxEnd = end
		return false
	case d.fillsHole(seq, end):
		d.OutOfOrd++
		if seqLess(d.maxEnd, end) {
			d.maxEnd = end
		}
		return false
	}
	d.Retrans++
	d.RetransSg += uint64((length + mss - 1) / mss)
	if seqLess(d.maxEnd, end) {
		d.maxEnd = end
	}
	d.pending = d.pending[:0] // Karn: no RTT samples across a retransmission
	return true
}

func (d *Dir) addHole(from, to uint32) {
	if len(d.holes) == maxHoles {
		d.holesForgotten += uint64(d.holes[0].to - d.holes[0].from)
		copy(d.holes, d.holes[1:])
		d.holes = d.holes[:maxHoles-1]
	}
	d.holes = append(d.holes, hole{from, to})
}

// missed is the data the peer acknowledged that the capture never held:
// what its highest ACK covers beyond the highest data seen, and the gaps
// below it never filled (tcptrace's "missed data"). A capture that dropped
// packets (tcpdump's "dropped by kernel") shows it.
func (d *Dir) missed() uint64 {
	if !d.haveData || d.rev == nil || !d.rev.haveAck {
		return 0
	}
	acked := d.rev.maxAck
	if d.sawFIN && !seqLess(acked, d.finEnd) {
		acked = d.finEnd - 1 // the FIN's sequence number holds no data
	}
	n := d.holesForgotten
	if seqLess(d.maxEnd, acked) {
		n += uint64(acked - d.maxEnd)
	}
	for _, h := range d.holes {
		switch {
		case !seqLess(acked, h.to):
			n += uint64(h.to - h.from)
		case seqLess(h.from, acked):
			n += uint64(acked - h.from)
		}
	}
	return n
}

// fillsHole says whether [seq, end) lies in a gap never seen before, and
// shrinks the gap.
func (d *Dir) fillsHole(seq, end uint32) bool {
	for i, h := range d.holes {
		if seqLess(seq, h.from) || seqLess(h.to, end) {
			continue
		}
		switch {
		case seq == h.from && end == h.to:
			d.holes = append(d.holes[:i], d.holes[i+1:]...)
		case seq == h.from:
			d.holes[i].from = end
		case end == h.to:
			d.holes[i].to = seq
		default:
			d.holes[i].to = seq
			d.addHole(end, h.to)
		}
		return true
	}
	return false
}

// ackFrom takes an ACK this direction sends about the peer's data.
func (d *Dir) ack(ack uint32, win uint16, hasData bool, ts int64, peer *Dir) {
	if d.haveAck && ack == d.lastAck && win == d.lastWin && !hasData {
		d.DupAcks++
	}
	if win == 0 && d.zeroSince == 0 {
		d.ZeroWindows++
		d.zeroSince = ts
	} else if win != 0 && d.zeroSince != 0 {
		d.ZeroWindowNs += ts - d.zeroSince
		d.zeroSince = 0
	}
	if !d.haveAck || seqLess(d.lastAck, ack) {
		peer.sample(ack, ts)
		peer.ackSeen = ts
	}
	if !d.haveAck || seqLess(d.maxAck, ack) {
		d.maxAck = ack
	}
	d.haveAck, d.lastAck, d.lastWin = true, ack, win
}

// sample takes an RTT sample from the newest of this direction's segments
// the ACK covers.
func (d *Dir) sample(ack uint32, ts int64) {
	n := 0
	var newest int64
	for n < len(d.pending) && !seqLess(ack, d.pending[n].end) {
		newest = d.pending[n].ts
		n++
	}
	switch {
	case n < len(d.pending) && seqLess(d.pending[n].start, ack):
		d.AcksInside++
	case n > 0 && d.pending[n-1].end == ack:
		d.AcksAligned++
	}
	if n == 0 {
		return
	}
	us := float64(ts-newest) / 1e3
	d.RTT.add(us)
	if d.series != nil {
		b := d.series.at(ts)
		b.rttSum += us
		b.rttN++
	}
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
}

func (d *Dir) remember(start, end uint32, ts int64) {
	if len(d.pending) == maxPending {
		return // a window of samples is enough; the rest wait for ACKs
	}
	d.pending = append(d.pending, sent{start, end, ts})
}

// minAcks is the fewest ACKs matched to captured frames that tell whether
// the frames were segmented after the capture point.
const minAcks = 20

// takenWhole says the receiver's TCP took the captured frames as they are:
// of enough ACKs, all but 1 % end exactly at a frame's end, so nothing
// segmented them after the capture point.
func (d *Dir) takenWhole() bool {
	total := d.AcksAligned + d.AcksInside
	return total >= minAcks && d.AcksInside*100 <= total
}

// splitAfterCapture says whether the captured frames were segmented after
// the capture point; ok is false when the ACKs cannot tell.
func (d *Dir) splitAfterCapture() (split, ok bool) {
	total := d.AcksAligned + d.AcksInside
	if total < minAcks {
		return false, false
	}
	// ACKs aligned with the frames prove nothing: a path that never
	// segments (veth, loopback) draws them too.
	if float64(d.AcksInside) >= 0.2*float64(total) {
		return true, true
	}
	return false, false
}

// idTrack follows the IP IDs of DF=0 data packets in one flow: GRO merges a
// packet with the previous one only if its ID continues the sequence (the
// previous ID plus the segments that frame carried) or repeats a fixed ID.
type idTrack struct {
	Packets             uint64 // DF=0 data packets
	Pairs               uint64 // consecutive pairs of them
	Unmergeable         uint64
	Incrementing, Fixed uint64
	have                bool
	last, lastSegs      uint16
	Examples            [4][2]uint16 // first jumps seen: previous ID, this ID
	examples            int
}

func (t *idTrack) add(id uint16, segs uint16) {
	t.Packets++
	if t.have {
		t.Pairs++
		switch id {
		case t.last + t.lastSegs:
			t.Incrementing++
		case t.last:
			t.Fixed++
		default:
			t.Unmergeable++
			if t.examples < len(t.Examples) {
				t.Examples[t.examples] = [2]uint16{t.last, id}
				t.examples++
			}
		}
	}
	t.have, t.last, t.lastSegs = true, id, segs
}

// UnmergeableShare is the share of consecutive pairs GRO could not merge.
func (t *idTrack) UnmergeableShare() float64 {
	if t.Pairs == 0 {
		return 0
	}
	return float64(t.Unmergeable) / float64(t.Pairs)
}

// histogram keeps RTT samples in logarithmic buckets (a quarter octave
// each), for percentiles within about 19 % in constant memory.
type histogram struct {
	Count         uint64
	Min, Max, Sum float64 // microseconds
	buckets       [128]uint64
}

func (h *histogram) add(us float64) {
	if us < 0 {
		return
	}
	if h.Count == 0 || us < h.Min {
		h.Min = us
	}
	h.Max = max(h.Max, us)
	h.Count++
	h.Sum += us
	h.buckets[bucket(us)]++
}

func bucket(us float64) int {
	return min(int(4*math.Log2(us+1)), 127)
}

// Quantile is the upper bound of the bucket holding the q-th sample.
func (h *histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.Count)))
	var seen uint64
	for i, n := range h.buckets {
		seen += n
		if seen >= rank {
			return min(math.Exp2(float64(i+1)/4)-1, h.Max)
		}
	}
	return h.Max
}

// Avg is the mean sample.
func (h *histogram) Avg() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.Sum / float64(h.Count)
}

func sizeBucket(n uint32) int {
	for i, b := range sizeBounds {
		if n <= b {
			return i
		}
	}
	return len(sizeBounds) - 1
}

// segsIn estimates how many wire segments a frame's payload carries.
func segsIn(payload, mss uint32) uint16 {
	if mss == 0 || payload <= mss {
		return 1
	}
	return uint16(min((payload+mss-1)/mss, 65535))
}
