package doctor

import (
	"bytes"
	"encoding/json"
	"github.com/skbtrace/skbtrace/internal/finding"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/profile"
)

// Evidence is everything the rules judge, measured over one observation. It
// is plain data (JSON) so every rule can be tested from fixtures in testdata/.
// Counters are the change over the observation, not totals.
type Evidence struct {
	Seconds  float64 `json:"seconds"`
	Kernel   string  `json:"kernel"`
	CPUCount int     `json:"cpu_count"`
	// KernelEvents says whether the eBPF recording ran (it needs root).
	KernelEvents bool              `json:"kernel_events"`
	LostEvents   uint64            `json:"lost_events,omitempty"`
	Mitigations  []host.Mitigation `json:"mitigations,omitempty"`
	CPUs         []CPUUse          `json:"cpus"`
	// CopyRate is how fast a CPU copied memory, bytes a second, measured
	// after the workload (host.CopyRate): what a stream over a virtual
	// device scales with when nothing holds it (virtualStreamRate).
	CopyRate   float64      `json:"copy_bytes_per_second,omitempty"`
	Softnet    host.Softnet `json:"softnet"`
	Namespaces []Namespace  `json:"namespaces"`
	Flows      []Flow       `json:"flows,omitempty"`
	Drops      []Drop       `json:"drops,omitempty"`
	SockIO     []SockIO     `json:"sock_io,omitempty"`
	// UDPSockets are the UDP sockets of the watched namespaces that refused
	// datagrams, their buffers full.
	UDPSockets []UDPSocket `json:"udp_sockets,omitempty"`
	// Processes are the threads' CPU time by process and CPU; ObserverPID
	// is the observer's own process among them.
	Processes   []ProcessCPU `json:"processes,omitempty"`
	ObserverPID int          `json:"observer_pid,omitempty"`
	// ProcessesSampled says the processes' shares come from CPU samples,
	// not from the threads' times.
	ProcessesSampled bool     `json:"processes_sampled,omitempty"`
	Command          *Command `json:"command,omitempty"`
	// Peers are the remote ends whose agents' evidence joined (--peer).
	Peers []Peer `json:"peers,omitempty"`
	// Profile is where the CPU went, when the observation was profiled (--profile).
	Profile *profile.Summary `json:"profile,omitempty"`
	// Limits are the settings read on the host that may hold flows back,
	// with where they are set and who set them; rules choose among them.
	Limits []finding.Limit `json:"limits,omitempty"`
	// CgroupCPU are the CPU-quota'd cgroups of the processes that owned
	// the flows' sockets, with their throttling over the observation.
	CgroupCPU []CgroupCPU `json:"cgroup_cpu,omitempty"`
	Notes     []string    `json:"notes,omitempty"`
}

// MarshalJSON writes the evidence with each flow's namespace inode beside
// its name.
func (e Evidence) MarshalJSON() ([]byte, error) {
	type plain Evidence
	inodes := map[string]uint32{}
	for _, ns := range e.Namespaces {
		inodes[ns.Name] = ns.Inode
	}
	flows := make([]Flow, len(e.Flows))
	for i, f := range e.Flows {
		f.NetnsInode = inodes[f.Netns]
		flows[i] = f
	}
	e.Flows = flows
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the report's encoder does not escape either
	if err := enc.Encode(plain(e)); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// UnmarshalJSON reads a flow of this version and of versions that wrote
// the namespace's name as netns.
func (f *Flow) UnmarshalJSON(b []byte) error {
	type plain Flow
	var v struct {
		plain
		Netns json.RawMessage `json:"netns"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Flow(v.plain)
	if len(v.Netns) > 0 && v.Netns[0] == '"' {
		return json.Unmarshal(v.Netns, &f.Netns)
	}
	if len(v.Netns) > 0 {
		return json.Unmarshal(v.Netns, &f.NetnsInode)
	}
	return nil
}

// Settings are the observed host's settings, without counters.
func (e *Evidence) Settings() *host.Settings {
	s := &host.Settings{Kernel: e.Kernel, Mitigations: e.Mitigations}
	for _, ns := range e.Namespaces {
		n := host.NetnsSettings{Name: ns.Name, Sysctls: ns.Sysctls}
		for i := range ns.Devices {
			n.Devices = append(n.Devices, ns.Devices[i].Device.Settings())
		}
		s.Namespaces = append(s.Namespaces, n)
	}
	return s
}

// CPUUse is how one CPU spent the observation (/proc/stat), as shares of its
// time, and its network softirq time as the softirq family measured it.
type CPUUse struct {
	CPU     int     `json:"cpu"`
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	Softirq float64 `json:"softirq"`
	IRQ     float64 `json:"irq"`
	Steal   float64 `json:"steal"`
	Idle    float64 `json:"idle"` // idle and iowait
	NetRx   float64 `json:"net_rx,omitempty"`
	NetTx   float64 `json:"net_tx,omitempty"`
}

// Busy is the share of the CPU's time not idle.
func (c CPUUse) Busy() float64 { return 1 - c.Idle }

// Namespace is one observed network namespace.
type Namespace struct {
	Name     string            `json:"name"`
	Inode    uint32            `json:"inode,omitempty"`
	Sysctls  map[string]string `json:"sysctls,omitempty"`
	Counters host.Counters     `json:"counters,omitempty"`
	Devices  []Device          `json:"devices,omitempty"`
	// NetnsIDs are the ids this namespace gave the other observed ones (by
	// name): a veth's PeerNetnsID says in which of them its peer lives.
	NetnsIDs map[string]int `json:"netns_ids,omitempty"`
}

// vethPeer finds a veth's other end among the observed namespaces: in the
// namespace its link netnsid names, or in its own when it has none. Evidence
// without namespace ids (older recordings) pairs only an unambiguous match.
func (e *Evidence) vethPeer(ns *Namespace, d *Device) (*Namespace, *Device) {
	var candNs *Namespace
	var cand *Device
	n := 0
	for i := range e.Namespaces {
		o := &e.Namespaces[i]
		if ns.NetnsIDs != nil {
			id, known := ns.NetnsIDs[o.Name]
			if d.PeerNetnsID < 0 && o.Name != ns.Name || d.PeerNetnsID >= 0 && (!known || id != d.PeerNetnsID) {
				continue
			}
		}
		for j := range o.Devices {
			if p := &o.Devices[j]; p.Kind == "veth" && p.Index == d.PeerIndex && p.PeerIndex == d.Index && p != d {
				candNs, cand = o, p
				n++
			}
		}
	}
	if n != 1 {
		return nil, nil
	}
	return candNs, cand
}

// Device is a device's settings with its traffic over the observation: the
// kernel's counters and, from the recording, segments per skb.
type Device struct {
	host.Device
	Xmit *DirUse `json:"xmit,omitempty"`
	Recv *DirUse `json:"recv,omitempty"`
	// QdiscBacklogMax is the largest backlog any of its qdiscs reached (bytes).
	QdiscBacklogMax uint32 `json:"qdisc_backlog_max,omitempty"`
}

// DirUse is one direction of a device from the dev_xmit/dev_recv families.
type DirUse struct {
	Skbs  uint64 `json:"skbs"`
	Segs  uint64 `json:"segs"`
	Bytes uint64 `json:"bytes"`
}

// SegsPerSkb is TSO/GSO (xmit) or GRO (recv) at work when well above one.
func (d *DirUse) SegsPerSkb() float64 {
	if d == nil || d.Skbs == 0 {
		return 0
	}
	return float64(d.Segs) / float64(d.Skbs)
}

// Flow is one TCP socket seen from its own end: tcp_info over the
// observation joined with what the recording saw of it.
type Flow struct {
	// Netns names the flow's namespace; NetnsInode, its inode, is set when
	// the evidence is written (from Namespaces), as every output calls it netns.
	Netns      string         `json:"netns_name"`
	NetnsInode uint32         `json:"netns,omitempty"`
	Local      netip.AddrPort `json:"local"`
	Peer       netip.AddrPort `json:"peer"`
	// Dev is the device that holds the local address.
	Dev string `json:"dev,omitempty"`
	// FromRecording says the flow was built from the recording because
	// tcp_info could not be read: the tcp_info-only fields are zero.
	FromRecording bool    `json:"from_recording,omitempty"`
	Seconds       float64 `json:"seconds"`
	// Bytes acknowledged by the peer and received from it during the observation.
	BytesAcked    uint64 `json:"bytes_acked"`
	BytesReceived uint64 `json:"bytes_received"`
	// From the last tcp_info reading.
	RTTus    uint32 `json:"rtt_us"`
	MinRTTus uint32 `json:"min_rtt_us"`
	Cwnd     uint32 `json:"cwnd"`
	SndMSS   uint32 `json:"snd_mss"`
	AdvMSS   uint32 `json:"adv_mss"`
	PMTU     uint32 `json:"pmtu"`
	SndWnd   uint32 `json:"snd_wnd"`
	// MaxSndWnd is the largest peer window of the readings (0: not kept).
	MaxSndWnd uint32 `json:"max_snd_wnd,omitempty"`
	RcvSpace  uint32 `json:"rcv_space"`
	// MaxNotSent is the most written bytes of the readings that TCP had not
	// sent yet (tcp_info notsent): how full the send queue ran.
	MaxNotSent   uint32 `json:"max_notsent,omitempty"`
	DeliveryRate uint64 `json:"delivery_rate"` // bytes per second
	// Changes over the observation.
	SegsOut         uint32 `json:"segs_out"`
	Retrans         uint32 `json:"retrans"`
	BusyUs          uint64 `json:"busy_us"`
	RwndLimitedUs   uint64 `json:"rwnd_limited_us"`
	SndbufLimitedUs uint64 `json:"sndbuf_limited_us"`
	// DSACKDups are the retransmitted segments the peer reported as
	// duplicates (tcp_info dsack_dups), ReordSeen the reorderings the sender
	// detected (reord_seen): Linux 4.19 and later.
	DSACKDups uint32 `json:"dsack_dups,omitempty"`
	ReordSeen uint32 `json:"reord_seen,omitempty"`
	// From the recording: shares of the sender's time per tcp_sendlim reason,
	// decisions per reason, retransmitted segments, congestion states entered.
	LimitShares map[string]float64 `json:"limit_shares,omitempty"`
	LimitCounts map[string]uint64  `json:"limit_counts,omitempty"`
	// LimitMeanRunUs is how long a run of each reason lasted on average:
	// how long one stall of that kind kept the sender waiting.
	LimitMeanRunUs map[string]uint64 `json:"limit_mean_run_us,omitempty"`
	// ZeroWindowProbed counts the sender's runs that probed a closed window
	// without an answer: the receiving application stopped reading.
	ZeroWindowProbed uint64         `json:"zero_window_probed,omitempty"`
	TraceRetrans     uint64         `json:"trace_retrans,omitempty"`
	CongStates       map[string]int `json:"cong_states,omitempty"`
	Resets           int            `json:"resets,omitempty"`
	// Stages is where the socket's bytes spent their time (tcp_stage): the
	// stages of each direction it timed bytes in.
	Stages []StageTime `json:"stages,omitempty"`
}

// StageTime is one stage of a byte's way through a socket's end, over the
// bytes tcp_stage timed (event.StageNames names them).
type StageTime struct {
	Stage   string  `json:"stage"`
	Samples uint64  `json:"samples"`
	P50Us   uint64  `json:"p50_us"`
	P75Us   uint64  `json:"p75_us"`
	P99Us   uint64  `json:"p99_us"`
	MeanUs  float64 `json:"mean_us"`
	// TimeWeightedUs is the wait of a byte taken at a random moment
	// (event.TimeWeightedUs): what the rules judge.
	TimeWeightedUs float64 `json:"time_weighted_us"`
}

// Stage is the flow's timing of stage, nil when it has none.
func (f *Flow) Stage(stage string) *StageTime {
	for i := range f.Stages {
		if f.Stages[i].Stage == stage {
			return &f.Stages[i]
		}
	}
	return nil
}

// SendBps is the flow's sending rate in bits per second.
func (f *Flow) SendBps() float64 { return rate(f.BytesAcked, f.Seconds) }

// RecvBps is the flow's receiving rate in bits per second.
func (f *Flow) RecvBps() float64 { return rate(f.BytesReceived, f.Seconds) }

func rate(bytes uint64, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(bytes) * 8 / seconds
}

// Drop is the skb_drop events of one reason at one location on one device,
// for one protocol.
type Drop struct {
	Reason   string `json:"reason"`
	Location string `json:"location"`
	Dev      string `json:"dev,omitempty"`
	Protocol string `json:"protocol,omitempty"` // ipv4/tcp, ipv6/icmp, arp ...
	Count    uint64 `json:"count"`
	// Src and Dst are the last dropped packet's addresses.
	Src netip.AddrPort `json:"src,omitzero"`
	Dst netip.AddrPort `json:"dst,omitzero"`
}

// suffered says whether a flow could have suffered the drop: TCP or UDP to
// a unicast address and, for TCP, the packets of an observed flow (the last
// dropped packet's addresses, either way round). Neighbour discovery, MLD,
// ARP and multicast that an interface drops as it comes up, and the segments
// a closed connection's TIME_WAIT absorbs, throttle no flow. A drop recorded
// before protocols or addresses were (none given) counts.
func (ev *Evidence) suffered(d *Drop) bool {
	if d.Protocol == "" {
		return true
	}
	tcp := strings.HasSuffix(d.Protocol, "/tcp")
	if !tcp && !strings.HasSuffix(d.Protocol, "/udp") {
		return false
	}
	dst := d.Dst.Addr()
	if dst.IsValid() && (dst.IsMulticast() || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255})) {
		return false
	}
	if !tcp || !d.Src.IsValid() || len(ev.Flows) == 0 {
		return true
	}
	src, dstp := unmapped(d.Src), unmapped(d.Dst)
	// A fragment after the first carries no ports (an e1000e's TSO under
	// QEMU sends a segment as IP fragments, which an XDP program dropped
	// one by one): its addresses alone tie it to the flows between them.
	addressesOnly := src.Port() == 0 && dstp.Port() == 0
	for i := range ev.Flows {
		local, peer := unmapped(ev.Flows[i].Local), unmapped(ev.Flows[i].Peer)
		if addressesOnly {
			if la, pa := local.Addr(), peer.Addr(); la == src.Addr() && pa == dstp.Addr() || la == dstp.Addr() && pa == src.Addr() {
				return true
			}
			continue
		}
		if local == src && peer == dstp || local == dstp && peer == src {
			return true
		}
	}
	return false
}

// sentBy is the observed flow whose own end sent the dropped packet.
func (ev *Evidence) sentBy(d *Drop) *Flow {
	if !d.Src.IsValid() {
		return nil
	}
	src, dst := unmapped(d.Src), unmapped(d.Dst)
	for i := range ev.Flows {
		if f := &ev.Flows[i]; unmapped(f.Local) == src && unmapped(f.Peer) == dst {
			return f
		}
	}
	return nil
}

func unmapped(a netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// SockIO is one process's socket calls in one direction (sock_io family).
type SockIO struct {
	Pid   uint32 `json:"pid"`
	Comm  string `json:"comm"`
	Dir   string `json:"dir"`
	Calls uint64 `json:"calls"`
	Bytes uint64 `json:"bytes"`
}

// UDPSocket is a UDP socket that refused datagrams, as sock_diag read it
// at the end of the observation, with its receive queue as read during it.
type UDPSocket struct {
	Netns string         `json:"netns_name"`
	Local netip.AddrPort `json:"local"`
	// RcvBuf is its buffer (sk_rcvbuf); Drops the datagrams it refused
	// since it was created (sk_drops).
	RcvBuf uint32 `json:"rcvbuf"`
	Drops  uint32 `json:"drops"`
	// QueueReads is how many times its receive queue was read while the
	// workload ran; QueueEmpty and QueueFull how many of them found it
	// empty and at least half full.
	QueueReads int `json:"queue_reads"`
	QueueEmpty int `json:"queue_empty"`
	QueueFull  int `json:"queue_full"`
	// Owner is the process holding the socket, where found.
	Owner *finding.Owner `json:"owner,omitempty"`
}

// ProcessCPU is a process's CPU time on one CPU during the observation, as
// shares of that time: from samples of what each CPU ran (cpu-clock, 99 Hz),
// else from the threads' times counted on the CPU each last ran on; the
// processes' shares of a CPU never add up to more than its /proc/stat time.
type ProcessCPU struct {
	PID    int     `json:"pid"`
	Comm   string  `json:"comm"`
	CPU    int     `json:"cpu"`
	User   float64 `json:"user"`
	System float64 `json:"system"`
}

// Command is the observed command and, for iperf3, its own result.
// Program is what it ran, wrappers (ip netns exec, sudo, ...) looked
// through; Netns the namespace the doctor ran it in (--netns). ExitCode is
// 128+N for a command ended by signal N, as time(1) reports it; Stopped
// says the doctor ended it (its duration, Ctrl-C), which is no failure.
type Command struct {
	Argv     []string `json:"argv"`
	Program  string   `json:"program,omitempty"`
	Netns    string   `json:"netns_name,omitempty"`
	ExitCode int      `json:"exit_code"`
	Stopped  bool     `json:"stopped,omitempty"`
	// LastLine is the last line a failed command printed: its own error.
	LastLine string  `json:"last_line,omitempty"`
	Seconds  float64 `json:"seconds"`
	Iperf3   *Iperf3 `json:"iperf3,omitempty"`
}

// Failed says whether the command failed on its own.
func (c *Command) Failed() bool { return c != nil && c.ExitCode != 0 && !c.Stopped }

// iperf3 is the command's iperf3 result, nil for none or no command.
func (c *Command) iperf3() *Iperf3 {
	if c == nil {
		return nil
	}
	return c.Iperf3
}

// Name is the program the command ran.
func (c *Command) Name() string {
	if c.Program != "" {
		return c.Program
	}
	if len(c.Argv) == 0 {
		return "the command"
	}
	return filepath.Base(c.Argv[0])
}

// Iperf3 is what iperf3 -J reported.
type Iperf3 struct {
	Protocol    string  `json:"protocol"`
	Reverse     bool    `json:"reverse,omitempty"`
	SentBps     float64 `json:"sent_bps"`
	ReceivedBps float64 `json:"received_bps"`
	Retransmits int64   `json:"retransmits,omitempty"`
	LostPercent float64 `json:"lost_percent,omitempty"`
	SenderCPU   float64 `json:"sender_cpu_percent,omitempty"`
	ReceiverCPU float64 `json:"receiver_cpu_percent,omitempty"`
}

// NamespaceNamed finds an observed namespace by name.
func (e *Evidence) NamespaceNamed(name string) *Namespace {
	for i := range e.Namespaces {
		if e.Namespaces[i].Name == name {
			return &e.Namespaces[i]
		}
	}
	return nil
}

// DeviceNamed finds a device by namespace and name.
func (e *Evidence) DeviceNamed(netns, name string) *Device {
	ns := e.NamespaceNamed(netns)
	if ns == nil {
		return nil
	}
	for i := range ns.Devices {
		if ns.Devices[i].Name == name {
			return &ns.Devices[i]
		}
	}
	return nil
}

// devices yields every device of every observed namespace with its
// namespace, as pointers into the evidence: for ns, d := range ev.devices.
func (e *Evidence) devices(yield func(*Namespace, *Device) bool) {
	for i := range e.Namespaces {
		ns := &e.Namespaces[i]
		for j := range ns.Devices {
			if !yield(ns, &ns.Devices[j]) {
				return
			}
		}
	}
}

// peerFlow finds the other end of a flow when it was observed too.
func (e *Evidence) peerFlow(f *Flow) *Flow {
	for i := range e.Flows {
		p := &e.Flows[i]
		if p.Local == f.Peer && p.Peer == f.Local {
			return p
		}
	}
	return nil
}

// senders are the flows that moved data out, fastest first.
func (e *Evidence) senders() []*Flow {
	var out []*Flow
	for i := range e.Flows {
		if f := &e.Flows[i]; f.BytesAcked > 0 {
			out = append(out, f)
		}
	}
	sortBy(out, func(f *Flow) float64 { return -f.SendBps() })
	return out
}

// DeviceWithAddr names the device of a namespace that holds an address.
func (e *Evidence) DeviceWithAddr(netns string, a netip.AddrPort) string {
	ns := e.NamespaceNamed(netns)
	if ns == nil {
		return ""
	}
	for _, d := range ns.Devices {
		for _, p := range d.Addrs {
			if p.Addr() == a.Addr() {
				return d.Name
			}
		}
	}
	return ""
}

// Peer is a remote end whose agent's evidence joined this report.
type Peer struct {
	URL    string   `json:"url"`
	Host   string   `json:"host,omitempty"`
	Kernel string   `json:"kernel,omitempty"`
	CPUs   []CPUUse `json:"cpus,omitempty"`
	// Flows counts the local flows whose other end the peer saw.
	Flows int `json:"flows"`
}

// peerNetnsSep joins a peer's label and its namespace's name: no local
// namespace has it in its name (ip netns refuses a slash).
const peerNetnsSep = "/"

// remote says the flow was observed by a peer's agent, not on this host.
func (f *Flow) remote() bool { return strings.Contains(f.Netns, peerNetnsSep) }

// JoinPeer adds the remote ends of this evidence's flows from a peer's:
// those flows, the namespaces that hold them (named "label/name" so they
// cannot be mistaken for local ones) with their devices and settings, and
// the peer's drops. The rules then judge receiver-side causes (window,
// buffer, GRO, drops) from the receiver's own data. CPUs stay the peer's
// (Peers), since a remote CPU cannot saturate a local one.
func (e *Evidence) JoinPeer(url, label string, host string, p *Evidence) *Peer {
	peer := &Peer{URL: url, Host: host, Kernel: p.Kernel, CPUs: p.CPUs}
	rename := func(ns string) string { return label + peerNetnsSep + ns }
	held := map[string]bool{}
	local := len(e.Flows)
	for i := range p.Flows {
		f := p.Flows[i]
		for j := range local {
			l := &e.Flows[j]
			if unmapped(f.Local) == unmapped(l.Peer) && unmapped(f.Peer) == unmapped(l.Local) {
				held[f.Netns] = true
				f.Netns = rename(f.Netns)
				e.Flows = append(e.Flows, f)
				peer.Flows++
				break
			}
		}
	}
	for _, ns := range p.Namespaces {
		if !held[ns.Name] {
			continue
		}
		ns.Name = rename(ns.Name)
		ids := map[string]int{}
		for name, id := range ns.NetnsIDs {
			ids[rename(name)] = id
		}
		ns.NetnsIDs = ids
		e.Namespaces = append(e.Namespaces, ns)
	}
	if peer.Flows > 0 {
		e.Drops = append(e.Drops, p.Drops...)
		e.LostEvents += p.LostEvents
	}
	e.Peers = append(e.Peers, *peer)
	return peer
}
