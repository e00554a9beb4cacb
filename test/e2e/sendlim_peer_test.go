package e2e

import (
	"errors"
	"fmt"
	"math"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/tcppeer"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// Send-limit reasons against scripted peers: each scenario forces one stall
// from the far end (a zero window, no ACKs, a slow ACK clock) or the local
// stack (a cork, a dropping qdisc), and the stall's reason must hold at
// least 80 % of its time, with the kernel's own rwnd- and sndbuf-limited
// clocks agreeing with swnd and sndbuf within 5 % of its busy time.

const peerPort = 5000

// peerScenario is a scripted peer in its own namespace, a kernel socket
// connected to it, and a recording of that namespace.
type peerScenario struct {
	t     *testing.T
	peer  *tcppeer.Peer
	sock  *tcppeer.Socket
	conn  *tcppeer.Conn
	rec   *recorder
	local string // the kernel socket's address, as events print it
	// stalls are the spans the scenario forced, as wall-clock ns.
	stalls [][2]int64
	info   *unix.TCPInfo
}

// startPeerScenario records the peer's namespace and connects a kernel
// socket, with opts set before connect, to the peer offering h.
func startPeerScenario(t *testing.T, h tcppeer.Handshake, opts ...tcppeer.SockOpt) *peerScenario {
	return startPeerScenarioAfter(t, nil, "cubic", h, opts...)
}

// startPeerScenarioAfter is startPeerScenario with setup run on the peer's
// namespace before the kernel connects, and congestion control cc.
func startPeerScenarioAfter(t *testing.T, setup func(*tcppeer.Peer), cc string, h tcppeer.Handshake, opts ...tcppeer.SockOpt) *peerScenario {
	t.Helper()
	requireFamilies(t, "tcp_sendlim")
	peer, err := tcppeer.Open(tcppeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := peer.Close(); err != nil {
			t.Errorf("removing the peer: %v", err)
		}
	})
	if setup != nil {
		setup(peer)
	}
	s := &peerScenario{t: t, peer: peer}
	s.rec = startRecord(t, "-e", "tcp_sendlim,tcp_conn", "--filter-netns", peer.Name())
	if s.sock, err = peer.DialFromKernel(peerPort, opts...); err != nil {
		t.Fatal(err)
	}
	// CUBIC (Debian's default) unless the scenario needs another: a pacing
	// one (BBR, this VM's) ends send attempts on its pacing timer before
	// the window test, which stops the kernel's own rwnd-limited clock
	// (docs/events.md).
	if err := unix.SetsockoptString(s.sock.FD, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc); err != nil {
		t.Fatalf("choosing %s: %v", cc, err)
	}
	if s.conn, err = peer.Accept(peerPort, h, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	s.local = fmt.Sprintf("%s:%d", peer.KernelAddr(), s.conn.KernelPort)
	return s
}

// stall runs f, which forces a stall, and remembers its span.
func (s *peerScenario) stall(f func()) {
	begin := time.Now().UnixNano()
	f()
	s.stalls = append(s.stalls, [2]int64{begin, time.Now().UnixNano()})
}

// ackUntil acknowledges everything the kernel sends, at once, until it has
// sent want bytes.
func (s *peerScenario) ackUntil(want uint32, window uint16) {
	s.t.Helper()
	for s.conn.BytesReceived() < want {
		if _, err := s.conn.ExpectData(10 * time.Second); err != nil {
			s.t.Fatalf("waiting for data (%d of %d bytes): %v\n%s", s.conn.BytesReceived(), want, err, s.peer.Dump())
		}
		if err := s.conn.AckAll(window); err != nil {
			s.t.Fatal(err)
		}
	}
}

// ackEach answers every segment of data delay later with an ACK of all the
// kernel sent, offering window, until done says the scenario is over.
func (s *peerScenario) ackEach(delay time.Duration, window uint16, done func() bool) {
	s.t.Helper()
	for {
		if _, err := s.conn.ExpectData(10 * time.Second); err != nil {
			s.t.Fatalf("waiting for data (%d bytes so far): %v\n%s", s.conn.BytesReceived(), err, s.peer.Dump())
		}
		time.Sleep(delay)
		if err := s.conn.AckAll(window); err != nil {
			s.t.Fatal(err)
		}
		if done() {
			return
		}
	}
}

// received is done once the kernel has sent total bytes.
func (s *peerScenario) received(total uint32) func() bool {
	return func() bool { return s.conn.BytesReceived() >= total }
}

// nothingUnsent is done once an ACK has been taken and the kernel holds
// no unsent byte (it sends inside the tun write of the ACK): what is left
// is in flight or below TCP.
func (s *peerScenario) nothingUnsent() bool {
	info, err := s.sock.TCPInfo()
	if err != nil {
		s.t.Fatal(err)
	}
	return info.Notsent_bytes == 0 && info.Bytes_acked > 1
}

func (s *peerScenario) write(b []byte, flags int) {
	s.t.Helper()
	if _, err := s.sock.Send(b, flags); err != nil {
		s.t.Fatalf("kernel socket write: %v", err)
	}
}

func (s *peerScenario) set(level, name, value int) {
	s.t.Helper()
	if err := s.sock.Set(tcppeer.SockOpt{Level: level, Name: name, Value: value}); err != nil {
		s.t.Fatal(err)
	}
}

// finish reads tcp_info, closes the kernel socket with a reset from the
// peer (which destroys it at once, ending its last run), stops the
// recording and returns the kernel socket's send-limit runs.
func (s *peerScenario) finish() []sendlimRun {
	s.t.Helper()
	info, err := s.sock.TCPInfo()
	if err != nil {
		s.t.Fatal(err)
	}
	s.info = info
	if err := s.conn.Rst(); err != nil {
		s.t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s.sock.Close()
	return s.stop()
}

// stop stops the recording and returns the kernel socket's send-limit runs.
func (s *peerScenario) stop() []sendlimRun {
	s.t.Helper()
	s.rec.stop(s.t, syscall.SIGINT)
	events, summary, err := parseJSON(s.t, s.rec.file)
	if err != nil {
		s.t.Fatalf("parse: %v: %s", err, summary)
	}
	var runs []sendlimRun
	for _, ev := range events {
		if ev["action"] != "tcp_sendlim" || ev["local"] != s.local {
			continue
		}
		runs = append(runs, sendlimRun{reason: ev["reason"].(string), begin: wallNs(s.t, ev["begin"]),
			end: wallNs(s.t, ev["time"]), probes: int(ev["probes"].(float64)), cnt: int(ev["cnt"].(float64)),
			state: fmt.Sprintf("cwnd=%v inflight=%v snd_wnd=%v unsent=%v queued=%v sndbuf=%v",
				ev["cwnd"], ev["inflight"], ev["snd_wnd"], ev["unsent"], ev["queued"], ev["sndbuf"])})
	}
	if len(runs) == 0 {
		s.t.Fatalf("no tcp_sendlim runs of %s in %d events; record said:\n%s", s.local, len(events), s.rec.stderr)
	}
	return runs
}

type sendlimRun struct {
	reason     string
	begin, end int64
	probes     int
	cnt        int
	state      string // at the run's last decision, for the log
}

func (r sendlimRun) String() string {
	return fmt.Sprintf("[%s] %.1f ms cnt=%d probes=%d %s", r.reason, float64(r.end-r.begin)/1e6, r.cnt, r.probes, r.state)
}

func wallNs(t *testing.T, v any) int64 {
	secs, ok := v.(float64) // SEC.NSEC, read as a float64 to about 0.25 us
	if !ok {
		t.Fatalf("bad time %v", v)
	}
	return int64(math.Round(secs * 1e9))
}

// requireStallReason checks that reason holds at least 80 % of the forced
// stalls' time.
func (s *peerScenario) requireStallReason(runs []sendlimRun, reason string) {
	s.t.Helper()
	s.requireStallReasonWithin(runs, reason, math.MinInt64, math.MaxInt64)
}

// requireStallReasonWithin checks that reason holds at least 80 % of the
// forced stalls' time between from and to (wall-clock ns).
func (s *peerScenario) requireStallReasonWithin(runs []sendlimRun, reason string, from, to int64) {
	s.t.Helper()
	var total, held int64
	for _, st := range s.stalls {
		b, e := max(st[0], from), min(st[1], to)
		if e <= b {
			continue
		}
		total += e - b
		for _, r := range runs {
			if r.reason == reason {
				held += max(0, min(r.end, e)-max(r.begin, b))
			}
		}
	}
	share := float64(held) / float64(max(total, 1))
	s.t.Logf("%s holds %.0f %% of %.0f ms of stalls; runs: %v", reason, share*100, float64(total)/1e6, runs)
	if share < 0.8 {
		s.t.Errorf("%s holds %.2f of the stalls' time, want at least 0.8", reason, share)
	}
}

// requireKernelAgreement compares swnd and sndbuf time with the kernel's
// rwnd- and sndbuf-limited clocks (tcp_info, µs, in jiffies): within 5 % of
// its busy time, or two jiffies of Debian's HZ=250.
func (s *peerScenario) requireKernelAgreement(runs []sendlimRun) {
	s.t.Helper()
	s.compareKernel(runs, true)
}

// logKernel logs both accounts without comparing them.
func (s *peerScenario) logKernel(runs []sendlimRun) {
	s.t.Helper()
	s.compareKernel(runs, false)
}

func (s *peerScenario) compareKernel(runs []sendlimRun, check bool) {
	s.t.Helper()
	var swnd, sndbuf int64
	for _, r := range runs {
		switch r.reason {
		case "swnd":
			swnd += (r.end - r.begin) / 1000
		case "sndbuf":
			sndbuf += (r.end - r.begin) / 1000
		}
	}
	busy := float64(s.info.Busy_time)
	slack := max(0.05*busy, 8000)
	s.t.Logf("kernel: busy %d µs, rwnd-limited %d, sndbuf-limited %d; skbtrace: swnd %d µs, sndbuf %d",
		s.info.Busy_time, s.info.Rwnd_limited, s.info.Sndbuf_limited, swnd, sndbuf)
	if d := float64(swnd) - float64(s.info.Rwnd_limited); check && max(d, -d) > slack {
		s.t.Errorf("swnd %d µs against the kernel's rwnd-limited %d µs (busy %d µs)", swnd, s.info.Rwnd_limited, s.info.Busy_time)
	}
	if d := float64(sndbuf) - float64(s.info.Sndbuf_limited); check && max(d, -d) > slack {
		s.t.Errorf("sndbuf %d µs against the kernel's sndbuf-limited %d µs (busy %d µs)", sndbuf, s.info.Sndbuf_limited, s.info.Busy_time)
	}
}

// noScale offers no window scaling, so a raw window is the window in bytes.
func noScale() tcppeer.Handshake {
	h := tcppeer.DefaultHandshake()
	h.WScale = -1
	return h
}

// A peer that opens with a zero window, answers the probes and then offers
// 10 bytes: the stall from the write to the opening is swnd, with probes.
func TestSendlimPeerZeroWindowWithProbes(t *testing.T) {
	h := noScale()
	h.Window = 0
	s := startPeerScenario(t, h)
	probes := 0
	s.stall(func() {
		s.write(make([]byte, 1000), 0)
		deadline := time.Now().Add(700 * time.Millisecond)
		for {
			seg, err := s.conn.Next(time.Until(deadline))
			if errors.Is(err, tcppeer.ErrTimeout) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if len(seg.Payload) == 0 {
				probes++
				if err := s.conn.Ack(0, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	if probes == 0 {
		t.Fatalf("the kernel sent no zero-window probe in 700 ms:\n%s", s.peer.Dump())
	}
	if err := s.conn.Ack(0, 10); err != nil {
		t.Fatal(err)
	}
	s.ackUntil(10, 10)
	if err := s.conn.AckAll(65535); err != nil {
		t.Fatal(err)
	}
	s.ackUntil(1000, 65535)
	runs := s.finish()
	s.requireStallReason(runs, "swnd")
	s.requireKernelAgreement(runs)
	seen := 0
	for _, r := range runs {
		if r.reason == "swnd" {
			seen = max(seen, r.probes)
		}
	}
	if seen == 0 {
		t.Errorf("no swnd run counted the %d probes: %v", probes, runs)
	}
}

// A peer that ACKs at once but offers 2000 bytes: every flight is the window.
func TestSendlimPeerSmallWindow(t *testing.T) {
	h := noScale()
	h.Window = 2000
	s := startPeerScenario(t, h)
	s.stall(func() {
		go s.sock.Write(make([]byte, 60000))
		// An RTT of 5 ms, so the window is what paces the sender.
		s.ackEach(5*time.Millisecond, 2000, s.received(60000))
	})
	runs := s.finish()
	s.requireStallReason(runs, "swnd")
	s.requireKernelAgreement(runs)
}

// TCP_CORK holds 80 written bytes three times for 55 ms.
func TestSendlimPeerCork(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	s.set(unix.IPPROTO_TCP, unix.TCP_CORK, 1)
	for i := 1; i <= 3; i++ {
		s.stall(func() {
			s.write(make([]byte, 80), 0)
			time.Sleep(55 * time.Millisecond)
		})
		s.set(unix.IPPROTO_TCP, unix.TCP_CORK, 0)
		s.ackUntil(uint32(80*i), 65535)
		s.set(unix.IPPROTO_TCP, unix.TCP_CORK, 1)
	}
	runs := s.finish()
	s.requireStallReason(runs, "cork")
}

// MSG_MORE holds a write's 80 bytes until the next write, 55 ms later.
func TestSendlimPeerMsgMore(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	for i := 1; i <= 3; i++ {
		s.stall(func() {
			s.write(make([]byte, 80), unix.MSG_MORE)
			time.Sleep(55 * time.Millisecond)
		})
		s.write(make([]byte, 10), 0)
		s.ackUntil(uint32(90*i), 65535)
	}
	runs := s.finish()
	s.requireStallReason(runs, "cork")
}

// With a small segment unacknowledged, Nagle holds the next small write
// until the peer's (delayed) ACK.
func TestSendlimPeerNagleWithDataOutstanding(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	for i := 1; i <= 3; i++ {
		s.write(make([]byte, 100), 0)
		if _, err := s.conn.ExpectData(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		s.stall(func() {
			s.write(make([]byte, 100), 0)
			time.Sleep(100 * time.Millisecond) // the peer's delayed ACK
		})
		s.ackUntil(uint32(200*i), 65535)
	}
	runs := s.finish()
	s.requireStallReason(runs, "nagle")
}

// A small send buffer, a peer that ACKs every flight 10 ms later: the
// buffer caps the bytes in flight. A write fills one skb of up to half the
// peer's largest window beyond the buffer's size (only a new skb checks
// it), so the peer offers 32 kB: enough room that the buffer, not the
// window, is the limit, and skbs small enough that it stays so; and an
// initial congestion window of 64 (a route metric) keeps that window out of
// the way, which HyStart would otherwise stop at about twice the flight.
func TestSendlimPeerSendBufferFull(t *testing.T) {
	h := noScale()
	h.Window = 32000
	bigInitcwnd := func(p *tcppeer.Peer) {
		if out, err := p.NS().Run("ip", "route", "replace", p.PeerAddr().String()+"/32", "dev", p.Dev(), "initcwnd", "64"); err != nil {
			t.Fatalf("ip route: %v: %s", err, out)
		}
	}
	s := startPeerScenarioAfter(t, bigInitcwnd, "cubic", h, tcppeer.SockOpt{Level: unix.SOL_SOCKET, Name: unix.SO_SNDBUF, Value: 4096})
	const total = 300_000
	s.stall(func() {
		go s.sock.Write(make([]byte, total))
		s.ackEach(10*time.Millisecond, 32000, s.received(total))
	})
	runs := s.finish()
	s.requireStallReason(runs, "sndbuf")
	// Not compared with the kernel: its sndbuf-limited clock starts only
	// in tcp_cwnd_validate() with the write queue empty, which a writer
	// refilling a partial skb keeps from happening (measured: 0 µs here).
	s.logKernel(runs)
}

// A peer that ACKs each flight 30 ms after its first segment, with room in
// its window and the sender's buffer: the congestion window is the limit.
func TestSendlimPeerCwndFull(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake(), tcppeer.SockOpt{Level: unix.SOL_SOCKET, Name: unix.SO_SNDBUF, Value: 4 << 20})
	const total = 300_000
	// The stall ends when nothing is left unsent (the kernel sends inside
	// the tun write of the ACK): then the sender waits for nothing but ACKs.
	s.stall(func() {
		go s.sock.Write(make([]byte, total))
		s.ackEach(30*time.Millisecond, 65535, s.nothingUnsent)
	})
	s.ackUntil(total, 65535)
	runs := s.finish()
	s.requireStallReason(runs, "cwnd")
}

// SO_MAX_PACING_RATE at 100 kB/s, a peer that ACKs at once: the kernel's
// own pacing timer spaces the segments.
func TestSendlimPeerPacing(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake(), tcppeer.SockOpt{Level: unix.SOL_SOCKET, Name: unix.SO_MAX_PACING_RATE, Value: 100_000})
	const total = 60_000
	s.stall(func() {
		go s.sock.Write(make([]byte, total)) // blocks while the buffer is full
		s.ackUntil(total, 65535)
	})
	runs := s.finish()
	s.requireStallReason(runs, "pacing")
}

// A qdisc that drops every data segment: nothing goes out, nothing is
// outstanding, yet the data stays unsent.
func TestSendlimPeerQdiscDrops(t *testing.T) {
	testenv.Tool(t, "tc")
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	// tbf drops every packet longer than its bucket; ACKs and probes pass.
	if out, err := s.peer.NS().Run("tc", "qdisc", "add", "dev", s.peer.Dev(), "root", "tbf", "rate", "10mbit", "burst", "100", "limit", "10000"); err != nil {
		t.Fatalf("tc: %v: %s", err, out)
	}
	s.stall(func() {
		s.write(make([]byte, 5000), 0)
		time.Sleep(1500 * time.Millisecond)
	})
	if out, err := s.peer.NS().Run("tc", "qdisc", "del", "dev", s.peer.Dev(), "root"); err != nil {
		t.Fatalf("tc: %v: %s", err, out)
	}
	s.ackUntil(5000, 65535)
	runs := s.finish()
	s.requireStallReason(runs, "xmit_fail")
}

// A peer that stops ACKing for 1.5 s: the sender waits with its window
// full until its retransmission timer fires (cwnd: 220 ms here, 300 ms on
// an emulated CPU, whose round trips are longer), then times out, backs off
// and resends (rto) until the ACKs come back.
func TestSendlimPeerRTOBackoff(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	s.stall(func() {
		s.write(make([]byte, 20000), 0)
		time.Sleep(1500 * time.Millisecond)
	})
	s.ackUntil(20000, 65535)
	runs := s.finish()
	timeout := int64(math.MaxInt64)
	for _, r := range runs {
		if r.reason == "rto" {
			timeout = min(timeout, r.begin)
		}
	}
	if timeout == math.MaxInt64 {
		t.Fatalf("no [rto] run in a 1.5 s stall without ACKs: %v", runs)
	}
	s.requireStallReasonWithin(runs, "cwnd", math.MinInt64, timeout)
	s.requireStallReasonWithin(runs, "rto", timeout, math.MaxInt64)
}

// Everything written is acknowledged and the application waits 300 ms.
func TestSendlimPeerAppIdle(t *testing.T) {
	s := startPeerScenario(t, tcppeer.DefaultHandshake())
	for i := 1; i <= 2; i++ {
		s.write(make([]byte, 1000), 0)
		s.ackUntil(uint32(1000*i), 65535)
		s.stall(func() { time.Sleep(300 * time.Millisecond) })
	}
	runs := s.finish()
	s.requireStallReason(runs, "app")
}

// A slow qdisc on the way out (tbf at 2 Mbit/s) and TCP small queues' limit
// at 4 kB (net.ipv4.tcp_limit_output_bytes), a large congestion window and a
// peer that ACKs at once: the socket's bytes wait below TCP and TSQ holds
// the rest until the qdisc drains.
func TestSendlimPeerTSQ(t *testing.T) {
	testenv.Tool(t, "tc")
	slowQdisc := func(p *tcppeer.Peer) {
		for _, args := range [][]string{
			{"tc", "qdisc", "add", "dev", p.Dev(), "root", "tbf", "rate", "2mbit", "burst", "3000", "limit", "1000000"},
			{"ip", "route", "replace", p.PeerAddr().String() + "/32", "dev", p.Dev(), "initcwnd", "64"},
			{"sysctl", "-qw", "net.ipv4.tcp_limit_output_bytes=4096"},
		} {
			if out, err := p.NS().Run(args[0], args[1:]...); err != nil {
				t.Fatalf("%v: %v: %s", args, err, out)
			}
		}
	}
	s := startPeerScenarioAfter(t, slowQdisc, "cubic", tcppeer.DefaultHandshake())
	const total = 400_000
	// The stall lasts while TCP holds unsent data; the qdisc drains after.
	s.stall(func() {
		go s.sock.Write(make([]byte, total))
		s.ackEach(0, 65535, s.nothingUnsent)
	})
	s.ackUntil(total, 65535)
	runs := s.finish()
	s.requireStallReason(runs, "tsq")
}
