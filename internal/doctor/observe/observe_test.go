package observe

import (
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/wire"
	"golang.org/x/sys/unix"
)

func TestProcessSharesSumThreadsByTheCPUTheyLastRanOn(t *testing.T) {
	th := func(pid, tid int, comm string, user, sys uint64, cpu int) host.ThreadTimes {
		return host.ThreadTimes{PID: pid, TID: tid, Comm: comm, User: user, System: sys, CPU: cpu}
	}
	before := map[int]host.ThreadTimes{
		10: th(10, 10, "hog", 1000, 0, 1),
		20: th(20, 20, "srv", 50, 50, 0),
		21: th(20, 21, "srv-worker", 10, 10, 0),
		30: th(30, 30, "old", 500, 0, 0), // exited; its id reused below
		40: th(40, 40, "idle", 7, 7, 0),
	}
	after := map[int]host.ThreadTimes{
		10: th(10, 10, "hog", 1100, 0, 1),       // 1 s of user on CPU 1
		20: th(20, 20, "srv", 70, 90, 0),        // 0.2 s user, 0.4 s system on CPU 0
		21: th(20, 21, "srv-worker", 40, 10, 1), // moved to CPU 1: 0.3 s user there
		22: th(20, 22, "srv-worker", 20, 0, 0),  // started since: 0.2 s user on CPU 0
		30: th(31, 30, "new", 40, 0, 1),         // another process's thread: counted from zero
		40: th(40, 40, "idle", 7, 7, 0),         // no time: left out
	}
	busy := []doctor.CPUUse{{CPU: 0, User: 0.5, System: 0.5}, {CPU: 1, User: 0.9, System: 0.1}}
	got := ProcessShares(before, after, 2, busy)
	want := []doctor.ProcessCPU{
		{PID: 10, Comm: "hog", CPU: 1, User: 0.5},
		{PID: 20, Comm: "srv", CPU: 0, User: 0.2, System: 0.2},
		{PID: 20, Comm: "srv-worker", CPU: 1, User: 0.15},
		{PID: 31, Comm: "new", CPU: 1, User: 0.2},
	}
	sort.Slice(got, func(i, j int) bool { return got[i].PID*10+got[i].CPU < got[j].PID*10+got[j].CPU })
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PID != w.PID || g.Comm != w.Comm || g.CPU != w.CPU || math.Abs(g.User-w.User) > 1e-9 || math.Abs(g.System-w.System) > 1e-9 {
			t.Errorf("%d: got %+v, want %+v", i, g, w)
		}
	}
	if ProcessShares(before, after, 0, busy) != nil {
		t.Error("no time, yet shares")
	}
}

// A thread that ran on both CPUs counts, read from its times, on the one
// it last ran on: never for more of that CPU than /proc/stat says it had
// (issue 43: "CPU 1 user 17 %" beside "qemu-system-x86 ran 60 % of CPU 1").
func TestProcessSharesNeverExceedTheirCPU(t *testing.T) {
	before := map[int]host.ThreadTimes{7: {PID: 7, TID: 7, Comm: "qemu-system-x86", User: 100, CPU: 0}}
	after := map[int]host.ThreadTimes{7: {PID: 7, TID: 7, Comm: "qemu-system-x86", User: 160, CPU: 1}}
	cpus := []doctor.CPUUse{{CPU: 0, User: 0.45, Idle: 0.55}, {CPU: 1, User: 0.17, System: 0.03, Idle: 0.8}}
	got := ProcessShares(before, after, 1, cpus)
	if len(got) != 1 || got[0].CPU != 1 || math.Abs(got[0].User-0.17) > 1e-9 {
		t.Fatalf("got %+v, want qemu-system-x86 at CPU 1's 17 %% user", got)
	}
}

// perfRecord encodes one record as the kernel writes it to a sample ring.
func perfRecord(typ uint32, misc uint16, body ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint16(b, misc)
	b = binary.LittleEndian.AppendUint16(b, uint16(8+4*len(body)))
	for _, v := range body {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// The samples charge a process on each CPU for the time it ran there: a
// busy loop that moved from CPU 0 to CPU 1 halfway, and a compiler that
// started and ended within the observation (issue 43: "CPU 0 60 % user"
// beside only skbtrace at 2 %).
func TestSampledSharesChargeEachCPUItsOwnSamples(t *testing.T) {
	const user, kernel = unix.PERF_RECORD_MISC_USER, unix.PERF_RECORD_MISC_KERNEL
	sample := func(misc uint16, pid, cpu uint32) []byte {
		return perfRecord(unix.PERF_RECORD_SAMPLE, misc, pid, pid, cpu, 0)
	}
	var ring []byte
	comm := perfRecord(unix.PERF_RECORD_COMM, 0, 77, 77)
	comm = append(comm, []byte("cc1\x00\x00\x00\x00\x00")...)
	binary.LittleEndian.PutUint16(comm[6:], uint16(len(comm)))
	ring = append(ring, comm...)
	for i := range 100 {
		switch {
		case i < 50:
			ring = append(ring, sample(user, 10, 0)...) // the loop on CPU 0
		default:
			ring = append(ring, sample(user, 10, 1)...) // then on CPU 1
		}
		switch {
		case i < 30:
			ring = append(ring, sample(user, 77, 1)...) // cc1 on CPU 1, 30 %
		case i < 40:
			ring = append(ring, sample(kernel, 77, 1)...)
		case i < 50:
			ring = append(ring, sample(kernel, 0, 1)...) // idle task
		default:
			ring = append(ring, sample(kernel, 0, 0)...)
		}
	}
	ring = append(ring, perfRecord(unix.PERF_RECORD_LOST, 0, 1, 0, 3, 0)...)
	s := newCPUSamples()
	s.Comms[10] = "loop"
	if err := s.ParsePerfRecords(ring); err != nil {
		t.Fatal(err)
	}
	if s.Lost != 3 || s.Total[0] != 100 || s.Total[1] != 100 {
		t.Fatalf("lost %d, totals %v", s.Lost, s.Total)
	}
	cpus := []doctor.CPUUse{{CPU: 0, User: 0.5, Idle: 0.5}, {CPU: 1, User: 0.8, System: 0.1, Idle: 0.1}}
	got := SampledShares(s, cpus)
	want := []doctor.ProcessCPU{
		{PID: 10, Comm: "loop", CPU: 0, User: 0.5},
		{PID: 10, Comm: "loop", CPU: 1, User: 0.5},
		{PID: 77, Comm: "cc1", CPU: 1, User: 0.3, System: 0.1},
	}
	sort.Slice(got, func(i, j int) bool { return got[i].PID*10+got[i].CPU < got[j].PID*10+got[j].CPU })
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.PID != w.PID || g.Comm != w.Comm || g.CPU != w.CPU || math.Abs(g.User-w.User) > 1e-9 || math.Abs(g.System-w.System) > 1e-9 {
			t.Errorf("%d: got %+v, want %+v", i, g, w)
		}
	}
	if err := s.ParsePerfRecords(perfRecord(unix.PERF_RECORD_SAMPLE, user, 1)); err == nil {
		t.Error("a cut sample read without error")
	}
}

// Where tcp_info cannot be read (sock_diag's modules missing), a namespace's
// flows come from the recording: a connection's records add up, a socket
// without tcp_rtt samples or bytes is no flow, other namespaces keep theirs.
func TestRecordedFlowsStandInWhereTCPInfoCannotBeRead(t *testing.T) {
	local, peer := netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("127.0.0.1:5201")
	sock := func(s uint64, netns uint32) event.Socket {
		return event.Socket{Sock: s, Local: local, Peer: peer, Netns: netns}
	}
	rtt := func(t int64, s event.Socket, acked uint64, srtt uint32) *event.Event {
		return &event.Event{Type: event.TypeTCPRTT, Time: t, Socket: s,
			RTT: wire.TcpRttEvent{SrttUs: srtt, MinRttUs: 40, Cwnd: 10, BytesAcked: acked}}
	}
	const sec = int64(time.Second)
	st := analyze.NewStat()
	bare, other := sock(0xa, 1), sock(0xb, 2)
	st.Add(&event.Event{Type: event.TypeTCPConn, Time: 0, Conn: event.TCPConn{Socket: bare, New: event.TCPEstablished}})
	st.Add(rtt(sec, bare, 1000, 300))
	st.Add(rtt(4*sec, bare, 3_001_000, 500))
	st.Add(&event.Event{Type: event.TypeTCPSendlim, Time: 4 * sec, Begin: sec, Sendlim: event.TCPSendlim{Socket: bare,
		Reason: event.SendlimSndbuf, Begin: sec, Cnt: 9, BusyUs: 1_000_000, SndbufLimitedUs: 3_000_000}})
	// The server's side of it only saw its FIN acknowledged.
	server := event.Socket{Sock: 0xc, Local: peer, Peer: local, Netns: 1}
	st.Add(rtt(sec, server, 0, 300))
	st.Add(rtt(4*sec, server, 1, 300))
	st.Add(rtt(sec, other, 1000, 300))
	st.Add(rtt(2*sec, other, 9_001_000, 300))
	spaces := []*watched{{name: "host", inode: 1, noTCPInfo: errors.New("reading tcp_info over sock_diag: no such file or directory")}, {name: "b", inode: 2}}
	flows := recordedFlows(st, spaces, &doctor.Evidence{})
	if len(flows) != 1 {
		t.Fatalf("flows %+v, want the client's of netns host", flows)
	}
	f := flows[0]
	if f.Netns != "host" || f.Local != local || f.Peer != peer || !f.FromRecording || f.BytesAcked != 3_000_000 ||
		f.RTTus != 400 || f.MinRTTus != 40 || f.BusyUs != 1_000_000 || f.SndbufLimitedUs != 3_000_000 || f.Seconds != 4 {
		t.Fatalf("flow %+v, want 3 MB acknowledged in 4 s, srtt 400 us, busy 1 s and sndbuf-limited 3 s", f)
	}
	if f.SndWnd != 0 || f.SndMSS != 0 || f.DeliveryRate != 0 {
		t.Fatalf("flow %+v carries tcp_info-only figures the recording does not have", f)
	}
}

// A server on a dual-stack listener sees IPv4 peers IPv4-mapped in the
// recording and plain in tcp_info: its send limits must still join.
func TestRecordedIPv4MappedEndpointsMatchTCPInfo(t *testing.T) {
	if !sameEndpoint("[::ffff:10.200.0.1]:5301", netip.MustParseAddrPort("10.200.0.1:5301")) {
		t.Error("an IPv4-mapped endpoint does not match its IPv4 form")
	}
	if sameEndpoint("10.200.0.1:5301", netip.MustParseAddrPort("10.200.0.1:5302")) {
		t.Error("different ports match")
	}
}

// Run under ip netns exec, the doctor's own namespace is also a named one:
// it is watched once, by its name.
func TestAppendWatchedKeepsOneNamespacePerInode(t *testing.T) {
	spaces := appendWatched(nil, &watched{name: host.SelfNetnsName, inode: 7})
	spaces = appendWatched(spaces, &watched{name: "other", inode: 8})
	spaces = appendWatched(spaces, &watched{name: "mine", inode: 7})
	spaces = appendWatched(spaces, &watched{name: "alias", inode: 8})
	spaces = appendWatched(spaces, &watched{name: "unread-a"})
	spaces = appendWatched(spaces, &watched{name: "unread-b"})
	var names []string
	for _, w := range spaces {
		names = append(names, w.name)
	}
	if got := strings.Join(names, " "); got != "mine other unread-a unread-b" {
		t.Errorf("watched %q, want mine other unread-a unread-b", got)
	}
}
