package agent

import (
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/doctor/observe"
	"github.com/skbtrace/skbtrace/internal/host"
)

// The kept samples' sockets are most of what the agent holds besides its
// trace: every socket of the host in every sample of the window. They are
// kept as readings without pointers (the collector need not scan them),
// their addresses named once in a table whatever the number of samples
// holding them, and within maxSocketBytes: beyond it the sample whose
// loss leaves the smallest gap for its age gives up its readings, so the
// window keeps its reach and its recent samples, and only old windows
// start less precisely. Readings given up are counted.
const maxSocketBytes = 48 << 20

var maxSocketReadings = maxSocketBytes / int(unsafe.Sizeof(reading{}))

// reading is a host.TCPSocket with its addresses replaced by their id.
type reading struct {
	id, inode                                        uint32
	state, caState                                   uint8
	rtt, rttVar, minRTT, cwnd, ssthresh              uint32
	sndMSS, rcvMSS, advMSS, pmtu, sndWnd             uint32
	rcvSpace, unacked, notSent, segsOut, retrans     uint32
	dsackDups, reordSeen                             uint32
	acked, received, sent, bytesRetrans              uint64
	busyUs, rwndLimitedUs, sndbufLimitedUs, delivery uint64
}

type addrPair struct{ local, peer netip.AddrPort }

// sockTable holds the addresses of the sockets the kept readings refer to;
// an entry goes with the last reading of it.
type sockTable struct {
	ids   map[addrPair]uint32
	pairs []addrPair
	refs  []uint32
	free  []uint32
	held  int // readings held
	// Copies of held and the readings given up to stay within
	// maxSocketReadings, for /metrics, which must not wait on the agent's
	// lock (an evidence request holds it while it replays the trace).
	heldNow, lost atomic.Int64
}

func newSockTable() *sockTable { return &sockTable{ids: map[addrPair]uint32{}} }

func (t *sockTable) id(p addrPair) uint32 {
	id, ok := t.ids[p]
	if !ok {
		if n := len(t.free); n > 0 {
			id, t.free = t.free[n-1], t.free[:n-1]
			t.pairs[id], t.refs[id] = p, 0
		} else {
			id = uint32(len(t.pairs))
			t.pairs, t.refs = append(t.pairs, p), append(t.refs, 0)
		}
		t.ids[p] = id
	}
	t.refs[id]++
	return id
}

// keep takes a sample's sockets out of it, as readings per namespace.
func (t *sockTable) keep(s *observe.Sample) map[string][]reading {
	out := make(map[string][]reading, len(s.Namespaces))
	for name, ns := range s.Namespaces {
		rs := make([]reading, 0, len(ns.Sockets))
		for _, k := range ns.Sockets {
			rs = append(rs, reading{id: t.id(addrPair{k.Local, k.Peer}), inode: k.Inode, state: k.State, caState: k.CAState,
				rtt: k.RTTus, rttVar: k.RTTVarus, minRTT: k.MinRTTus, cwnd: k.SndCwnd, ssthresh: k.SndSsthresh,
				sndMSS: k.SndMSS, rcvMSS: k.RcvMSS, advMSS: k.AdvMSS, pmtu: k.PMTU, sndWnd: k.SndWnd,
				rcvSpace: k.RcvSpace, unacked: k.Unacked, notSent: k.NotSent, segsOut: k.SegsOut, retrans: k.TotalRetrans,
				dsackDups: k.DSACKDups, reordSeen: k.ReordSeen,
				acked: k.BytesAcked, received: k.BytesReceived, sent: k.BytesSent, bytesRetrans: k.BytesRetrans,
				busyUs: k.BusyUs, rwndLimitedUs: k.RwndLimitedUs, sndbufLimitedUs: k.SndbufLimitedUs, delivery: k.DeliveryRate})
		}
		out[name] = rs
		t.held += len(rs)
		ns.Sockets = nil
	}
	t.heldNow.Store(int64(t.held))
	return out
}

func (t *sockTable) socket(r reading) host.TCPSocket {
	p := t.pairs[r.id]
	return host.TCPSocket{Local: p.local, Peer: p.peer, Inode: r.inode, State: r.state, CAState: r.caState,
		RTTus: r.rtt, RTTVarus: r.rttVar, MinRTTus: r.minRTT, SndCwnd: r.cwnd, SndSsthresh: r.ssthresh,
		SndMSS: r.sndMSS, RcvMSS: r.rcvMSS, AdvMSS: r.advMSS, PMTU: r.pmtu, SndWnd: r.sndWnd,
		RcvSpace: r.rcvSpace, Unacked: r.unacked, NotSent: r.notSent, SegsOut: r.segsOut, TotalRetrans: r.retrans,
		DSACKDups: r.dsackDups, ReordSeen: r.reordSeen,
		BytesAcked: r.acked, BytesReceived: r.received, BytesSent: r.sent, BytesRetrans: r.bytesRetrans,
		BusyUs: r.busyUs, RwndLimitedUs: r.rwndLimitedUs, SndbufLimitedUs: r.sndbufLimitedUs, DeliveryRate: r.delivery}
}

// sockets is a namespace's readings as observe keeps them.
func (t *sockTable) sockets(rs []reading) map[[2]string]host.TCPSocket {
	m := make(map[[2]string]host.TCPSocket, len(rs))
	for _, r := range rs {
		k := t.socket(r)
		m[[2]string{k.Local.String(), k.Peer.String()}] = k
	}
	return m
}

// release forgets a sample's readings.
func (t *sockTable) release(socks map[string][]reading) {
	for _, rs := range socks {
		for _, r := range rs {
			if t.refs[r.id]--; t.refs[r.id] == 0 {
				delete(t.ids, t.pairs[r.id])
				t.pairs[r.id] = addrPair{}
				t.free = append(t.free, r.id)
			}
		}
		t.held -= len(rs)
	}
	t.heldNow.Store(int64(t.held))
}

// thin gives up readings, a sample's at a time, until those held fit
// maxSocketReadings or only the oldest and newest samples with sockets are
// left (a window needs both). The sample given up is the one whose loss
// leaves the smallest gap between its neighbours for its age: recent
// samples stay close together, old ones are spaced out evenly.
func (t *sockTable) thin(samples []held, now time.Time) {
	for t.held > maxSocketReadings {
		victim, best, prev := -1, 0.0, -1
		for i := range samples {
			if samples[i].socks == nil {
				continue
			}
			if prev >= 0 {
				next := -1
				for j := i + 1; j < len(samples); j++ {
					if samples[j].socks != nil {
						next = j
						break
					}
				}
				if next < 0 {
					break // i is the newest
				}
				gap := samples[next].Time.Sub(samples[prev].Time).Seconds()
				score := gap / max(now.Sub(samples[i].Time).Seconds(), 1e-3)
				if victim < 0 || score < best {
					victim, best = i, score
				}
			}
			prev = i
		}
		if victim < 0 {
			return
		}
		before := t.held
		t.release(samples[victim].socks)
		t.lost.Add(int64(before - t.held))
		samples[victim].socks = nil
	}
}

// span is the samples of a window, oldest first, as observe.Evidence
// judges them: it reads a socket's first reading from the first sample,
// its last from the newest sample that had it, and its peaks from all but
// the first. The samples between the first and the newest are folded into
// two: one with each socket's peaks, then one with its last reading. So
// an evidence request rebuilds four samples' sockets, not the window's.
func (t *sockTable) span(hs []held) []*observe.Sample {
	full := func(h held) *observe.Sample {
		c := *h.Sample
		c.Namespaces = make(map[string]*observe.NetnsSample, len(h.Namespaces))
		for name, ns := range h.Namespaces {
			n := *ns
			n.Sockets = t.sockets(h.socks[name])
			c.Namespaces[name] = &n
		}
		return &c
	}
	first, newest := hs[0], hs[len(hs)-1]
	type key struct {
		netns string
		id    uint32
	}
	last := map[key]reading{}
	peak := map[key]reading{}
	for _, h := range hs[1 : len(hs)-1] {
		for name, rs := range h.socks {
			for _, r := range rs {
				k := key{name, r.id}
				last[k] = r
				p, ok := peak[k]
				if !ok {
					p = r
				}
				p.sndWnd, p.notSent = max(p.sndWnd, r.sndWnd), max(p.notSent, r.notSent)
				peak[k] = p
			}
		}
	}
	out := []*observe.Sample{full(first)}
	if len(last) > 0 {
		fold := func(m map[key]reading) *observe.Sample {
			s := &observe.Sample{Time: newest.Time, Namespaces: map[string]*observe.NetnsSample{}}
			for k, r := range m {
				ns := s.Namespaces[k.netns]
				if ns == nil {
					ns = &observe.NetnsSample{Sockets: map[[2]string]host.TCPSocket{}}
					s.Namespaces[k.netns] = ns
				}
				sock := t.socket(r)
				ns.Sockets[[2]string{sock.Local.String(), sock.Peer.String()}] = sock
			}
			return s
		}
		out = append(out, fold(peak), fold(last))
	}
	return append(out, full(newest))
}
