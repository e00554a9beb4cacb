package observe

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
)

// poller reads tcp_info of every socket in the observed namespaces and keeps
// each socket's first and last reading; with a series, it adds the readings
// of sockets that moved data, and the CPUs' time, to it.
type poller struct {
	series  *timeline.Builder
	cpus    []host.CPUTimes
	spaces  []*watched
	every   time.Duration
	initial bool
	mu      sync.Mutex
	first   map[sockKey]host.TCPSocket
	last    map[sockKey]host.TCPSocket
	opened  map[sockKey]bool
	peaks   map[sockKey]peaks
	seen    map[sockKey][2]time.Time
	errs    map[string]error
}

// sockKey leaves the inode out: it turns 0 when the application closes the
// socket while the kernel still finishes the connection.
type sockKey struct {
	netns string
	local string
	peer  string
}

func newPoller(spaces []*watched, every time.Duration, series *timeline.Builder) *poller {
	p := &poller{series: series, spaces: spaces, every: every, initial: true, first: map[sockKey]host.TCPSocket{},
		last: map[sockKey]host.TCPSocket{}, opened: map[sockKey]bool{}, peaks: map[sockKey]peaks{}, seen: map[sockKey][2]time.Time{}, errs: map[string]error{}}
	p.poll() // sockets alive at the start count from here; later ones from zero
	p.initial = false
	return p
}

func (p *poller) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.poll()
		}
	}
}

func (p *poller) poll() {
	now := time.Now()
	if p.series != nil {
		p.sampleCPUs(now)
	}
	for _, w := range p.spaces {
		if w.gone || w.noTCPInfo != nil {
			continue
		}
		var socks []host.TCPSocket
		err := w.do(func() (err error) { socks, err = host.ReadTCPSockets(); return err })
		p.mu.Lock()
		if err != nil {
			if _, ok := p.errs[w.name]; !ok {
				p.errs[w.name] = err
			}
			p.mu.Unlock()
			continue
		}
		for _, s := range socks {
			k := sockKey{w.name, s.Local.String(), s.Peer.String()}
			if prev, ok := p.last[k]; p.series != nil && (!ok || prev.BytesAcked != s.BytesAcked) {
				p.series.AddSocketSample(now.UnixNano(), w.inode, s.Local, s.Peer, s.BytesAcked, s.SndCwnd, s.Unacked, s.RTTus)
			}
			if _, ok := p.last[k]; !ok {
				if p.initial {
					p.first[k] = s
				} else {
					p.opened[k] = true // counts from zero
				}
				p.seen[k] = [2]time.Time{now, now}
			}
			p.last[k] = s
			p.peaks[k] = p.peaks[k].add(s)
			p.seen[k] = [2]time.Time{p.seen[k][0], now}
		}
		p.mu.Unlock()
	}
}

// sampleCPUs adds each CPU's time since the previous poll to the series.
func (p *poller) sampleCPUs(now time.Time) {
	cpus, err := host.ReadCPUTimes()
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range min(len(cpus), len(p.cpus)) {
		d := cpus[i].Sub(p.cpus[i])
		p.series.AddCPUSample(now.UnixNano(), i, timeline.CPUTicks{User: float64(d.User + d.Nice), System: float64(d.System),
			Softirq: float64(d.SoftIRQ), IRQ: float64(d.IRQ), Idle: float64(d.Idle + d.IOWait)})
	}
	p.cpus = cpus
}

func (p *poller) flows(seconds float64, ev *doctor.Evidence, notes *[]string) []doctor.Flow {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []doctor.Flow
	for k, s := range p.last {
		span := seconds
		if p.opened[k] {
			// Opened during the observation: it lived between its first and
			// last reading, plus up to a poll interval before the first.
			span = min(seconds, p.seen[k][1].Sub(p.seen[k][0]).Seconds()+p.every.Seconds())
		}
		if f, moved := socketFlow(k.netns, p.first[k], s, span, p.peaks[k]); moved {
			f.Dev = ev.DeviceWithAddr(k.netns, s.Local)
			out = append(out, f)
		}
	}
	return busiestFlows(out, notes)
}

// peaks are a socket's largest readings: a closing socket's last reading
// shows a small window and an empty send queue.
type peaks struct {
	sndWnd  uint32 // the peer's window
	notSent uint32 // written bytes TCP had not sent yet
}

func (p peaks) add(s host.TCPSocket) peaks {
	return peaks{sndWnd: max(p.sndWnd, s.SndWnd), notSent: max(p.notSent, s.NotSent)}
}

// socketFlow is a socket's flow between two readings (first is zero for a
// socket opened since) with its peaks over all readings; moved says whether
// it carried anything.
func socketFlow(netns string, b, s host.TCPSocket, span float64, pk peaks) (doctor.Flow, bool) {
	pk = pk.add(s)
	f := doctor.Flow{Netns: netns, Local: s.Local, Peer: s.Peer, Seconds: span,
		BytesAcked: s.BytesAcked - b.BytesAcked, BytesReceived: s.BytesReceived - b.BytesReceived,
		RTTus: s.RTTus, MinRTTus: s.MinRTTus, Cwnd: s.SndCwnd, SndMSS: s.SndMSS, AdvMSS: s.AdvMSS, PMTU: s.PMTU,
		SndWnd: s.SndWnd, MaxSndWnd: pk.sndWnd, RcvSpace: s.RcvSpace, DeliveryRate: s.DeliveryRate,
		MaxNotSent: pk.notSent, SegsOut: s.SegsOut - b.SegsOut, Retrans: s.TotalRetrans - b.TotalRetrans,
		BusyUs: s.BusyUs - b.BusyUs, RwndLimitedUs: s.RwndLimitedUs - b.RwndLimitedUs, SndbufLimitedUs: s.SndbufLimitedUs - b.SndbufLimitedUs,
		DSACKDups: s.DSACKDups - b.DSACKDups, ReordSeen: s.ReordSeen - b.ReordSeen}
	return f, f.BytesAcked != 0 || f.BytesReceived != 0 || f.Retrans != 0
}

// maxFlows keeps the report readable on hosts with many sockets: the
// busiest flows carry the evidence.
const maxFlows = 64

// busiestFlows keeps the maxFlows flows that moved the most, busiest first.
func busiestFlows(out []doctor.Flow, notes *[]string) []doctor.Flow {
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].BytesAcked+out[i].BytesReceived > out[j].BytesAcked+out[j].BytesReceived
	})
	if len(out) > maxFlows {
		*notes = append(*notes, fmt.Sprintf("%d TCP sockets moved data; the %d busiest are judged", len(out), maxFlows))
		out = out[:maxFlows]
	}
	return out
}

func (p *poller) notes(notes *[]string) {
	for ns, err := range p.errs {
		*notes = append(*notes, fmt.Sprintf("netns %s: reading tcp_info: %v (it may have disappeared during the observation)", ns, err))
	}
}

// probeTCPInfo reads tcp_info once in every namespace and keeps why it
// could not; it says whether any namespace needs its flows recorded.
func probeTCPInfo(spaces []*watched) bool {
	unread := false
	for _, w := range spaces {
		if w.gone {
			continue
		}
		if err := w.do(func() error { _, err := host.ReadTCPSockets(); return err }); err != nil {
			w.noTCPInfo, unread = err, true
		}
	}
	return unread
}

// recordedFlows builds the flows of the namespaces whose tcp_info could not
// be read from the recording's connections: bytes, RTT and the kernel's
// busy and limited time from tcp_rtt and tcp_sendlim; a connection's
// records (its socket, then its TIME_WAIT socket) add up. What only tcp_info
// has (windows, MSS, path MTU, delivery rate) stays zero: not measured.
func recordedFlows(stat *analyze.Stat, spaces []*watched, ev *doctor.Evidence) []doctor.Flow {
	unread := map[uint32]string{}
	for _, w := range spaces {
		if w.noTCPInfo != nil {
			unread[w.inode] = w.name
		}
	}
	if len(unread) == 0 {
		return nil
	}
	type key struct{ netns, local, peer string }
	flows := map[key]*doctor.Flow{}
	var order []key
	for _, c := range stat.Connections {
		name, ok := unread[c.Netns]
		if !ok || c.Samples == 0 {
			continue
		}
		local, lerr := netip.ParseAddrPort(c.Local)
		peer, perr := netip.ParseAddrPort(c.Peer)
		if lerr != nil || perr != nil {
			continue
		}
		k := key{name, c.Local, c.Peer}
		f := flows[k]
		if f == nil {
			f = &doctor.Flow{Netns: name, Local: local, Peer: peer, FromRecording: true, MinRTTus: math.MaxUint32}
			flows[k] = f
			order = append(order, k)
		}
		f.Seconds += c.Duration()
		// The close hook's sample counts the SYN and FIN, a sequence number
		// each: a record with no more carried no data that way.
		if c.BytesAcked > 2 {
			f.BytesAcked += c.BytesAcked
		}
		if c.BytesReceived > 2 {
			f.BytesReceived += c.BytesReceived
		}
		f.RTTus = max(f.RTTus, uint32(c.AvgSRTTus()+0.5))
		if c.MinRTTus > 0 {
			f.MinRTTus = min(f.MinRTTus, c.MinRTTus)
		}
		f.BusyUs += c.KernelBusyUs
		f.RwndLimitedUs += c.KernelRwndUs
		f.SndbufLimitedUs += c.KernelSndbufUs
	}
	var out []doctor.Flow
	for _, k := range order {
		f := flows[k]
		if f.MinRTTus == math.MaxUint32 {
			f.MinRTTus = 0
		}
		if f.BytesAcked == 0 && f.BytesReceived == 0 {
			continue
		}
		f.Dev = ev.DeviceWithAddr(f.Netns, f.Local)
		out = append(out, *f)
	}
	return out
}
