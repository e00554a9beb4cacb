package observe

import (
	"fmt"
	"io"
	"time"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/host"
)

// Watch is a long-running observation, the agent's: Sample reads what
// Observe reads around a workload, and Evidence judges any two samples as
// Observe judges its before and after. Namespaces are looked up again at
// every sample, so ones that come and go are followed.
type Watch struct {
	netns  []string // as asked; empty: this process's and every named one
	spaces map[string]*watched
}

// Sample is the host at one moment.
type Sample struct {
	Time       time.Time
	CPUs       []host.CPUTimes
	Softnet    []host.Softnet
	Namespaces map[string]*NetnsSample
	Notes      []string
}

// NetnsSample is one namespace at one moment; Sockets is nil when the
// sample did not read them.
type NetnsSample struct {
	Inode   uint32
	snap    *snapshot
	Sockets map[[2]string]host.TCPSocket
}

// NewWatch starts watching the named namespaces (empty: this process's own
// and every named one, also those created later).
func NewWatch(netns []string) *Watch {
	return &Watch{netns: netns, spaces: map[string]*watched{}}
}

// Close releases the namespaces' handles.
func (w *Watch) Close() {
	for _, s := range w.spaces {
		if s.ns != nil {
			s.ns.Close()
		}
	}
	w.spaces = map[string]*watched{}
}

// refresh opens namespaces that appeared and forgets those that are gone.
func (w *Watch) refresh(notes *[]string) {
	present := map[string]bool{}
	for _, n := range watchedNames(w.netns) {
		present[n] = true
		if _, ok := w.spaces[n]; ok {
			continue
		}
		s, err := openWatched(n)
		if err != nil {
			*notes = append(*notes, err.Error())
			continue
		}
		w.spaces[n] = s
	}
	for n, s := range w.spaces {
		if !present[n] || s.gone {
			if s.ns != nil {
				s.ns.Close()
			}
			delete(w.spaces, n)
		}
	}
}

func (w *Watch) spaceList() []*watched {
	out := make([]*watched, 0, len(w.spaces))
	for _, s := range w.spaces {
		out = append(out, s)
	}
	return out
}

// Sample reads the CPUs, the softnet counters and each namespace's
// counters, devices and settings, and its TCP sockets when sockets is set.
func (w *Watch) Sample(sockets bool) *Sample {
	s := &Sample{Time: time.Now(), Namespaces: map[string]*NetnsSample{}}
	w.refresh(&s.Notes)
	s.CPUs, _ = host.ReadCPUTimes()
	s.Softnet, _ = host.ReadSoftnet()
	for name, sp := range w.spaces {
		snap, err := takeSnapshot(sp)
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("netns %s: %v", name, err))
			sp.gone = true
			continue
		}
		ns := &NetnsSample{Inode: sp.inode, snap: snap}
		if sockets {
			var socks []host.TCPSocket
			if err := sp.do(func() (err error) { socks, err = host.ReadTCPSockets(); return err }); err != nil {
				s.Notes = append(s.Notes, fmt.Sprintf("netns %s: reading tcp_info: %v", name, err))
			}
			ns.Sockets = make(map[[2]string]host.TCPSocket, len(socks))
			for _, k := range socks {
				ns.Sockets[[2]string{k.Local.String(), k.Peer.String()}] = k
			}
		}
		s.Namespaces[name] = ns
	}
	return s
}

// Evidence judges the span of samples, oldest first, whose first and last
// read sockets; a socket's last reading is the newest sample that still
// had it, so connections that closed within the span count. recording is
// the trace of the same span (nil: no kernel events).
func (w *Watch) Evidence(span []*Sample, recording io.Reader) *doctor.Evidence {
	before, after := span[0], span[len(span)-1]
	seconds := after.Time.Sub(before.Time).Seconds()
	notes := append([]string(nil), after.Notes...)
	ev := hostEvidence(seconds, recording != nil, before.CPUs, after.CPUs, before.Softnet, after.Softnet)
	var spaces []*watched
	for name, a := range after.Namespaces {
		b := before.Namespaces[name]
		sp := &watched{name: name, inode: a.Inode}
		if live := w.spaces[name]; live != nil {
			sp = live
		}
		spaces = append(spaces, sp)
		if b == nil {
			notes = append(notes, fmt.Sprintf("netns %s appeared during the window; its counters are left out", name))
			continue
		}
		ev.Namespaces = append(ev.Namespaces, namespaceEvidence(sp, b.snap, a.snap))
	}
	netnsIDs(w.spaceList(), ev)
	type key struct {
		netns string
		sock  [2]string
	}
	last := map[key]host.TCPSocket{}
	peak := map[key]peaks{}
	for _, s := range span[1:] {
		for name, ns := range s.Namespaces {
			for k, sock := range ns.Sockets {
				last[key{name, k}] = sock
				peak[key{name, k}] = peak[key{name, k}].add(sock)
			}
		}
	}
	var flows []doctor.Flow
	for k, s := range last {
		// A socket not in the first sample opened during the window and
		// counts from zero.
		var first host.TCPSocket
		if b := before.Namespaces[k.netns]; b != nil {
			first = b.Sockets[k.sock]
		}
		if f, moved := socketFlow(k.netns, first, s, seconds, peak[k]); moved {
			f.Dev = ev.DeviceWithAddr(k.netns, s.Local)
			flows = append(flows, f)
		}
	}
	ev.Flows = busiestFlows(flows, &notes)
	if recording != nil {
		obs := &Observation{Evidence: ev}
		if err := joinRecording(obs, recording, spaces, nil, &notes); err != nil {
			notes = append(notes, "reading back the recording: "+err.Error())
		}
	}
	ev.Notes = append(ev.Notes, notes...)
	return ev
}
