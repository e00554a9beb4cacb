package tcppeer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/testenv"
)

// openPeer opens a peer closed at the end of the test, whose packets are
// logged if the test failed.
func openPeer(t *testing.T, opts Options) *Peer {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, tun devices")
	p, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("packets through %s:\n%s", p.Dev(), p.Dump())
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func counters(t *testing.T, p *Peer) host.Counters {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wantDelta checks counters that must have moved by exactly n.
func wantDelta(t *testing.T, before, after host.Counters, want map[string]int64) {
	t.Helper()
	d := after.Sub(before)
	for k, n := range want {
		if _, ok := after[k]; !ok {
			t.Errorf("no counter %s in the namespace", k)
		} else if d[k] != n {
			t.Errorf("%s moved by %d, want %d", k, d[k], n)
		}
	}
}

// established is a kernel listener's accepted socket and the peer's Conn to it.
func established(t *testing.T, p *Peer, port uint16, h Handshake) (*Conn, *Socket) {
	t.Helper()
	l, err := p.ListenInKernel(port)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Connect(port, h, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, ks
}

// TestZeroWindowProbes: the kernel connects, the peer's SYN-ACK shuts the
// window, the kernel probes with backoff, and data flows once it opens.
func TestZeroWindowProbes(t *testing.T) {
	p := openPeer(t, Options{})
	ks, err := p.DialFromKernel(80, SockOpt{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1})
	if err != nil {
		t.Fatal(err)
	}
	h := DefaultHandshake()
	h.Window = 0
	c, err := p.Accept(80, h, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := counters(t, p)
	wrote := time.Now()
	if _, err := ks.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	var probes []*Segment
	for len(probes) < 2 {
		s, err := c.Next(2 * time.Second)
		if err != nil {
			t.Fatalf("waiting for zero-window probe %d: %v", len(probes)+1, err)
		}
		// Linux probes with an old sequence number (snd_una-1) and no data.
		if seq, _ := c.Rel(s); len(s.Payload) != 0 || seq != ^uint32(0) || s.Flags != ACK {
			t.Fatalf("want a zero-window probe at offset -1, got %v (offset %d)", s, int32(seq))
		}
		probes = append(probes, s)
	}
	info, err := ks.TCPInfo()
	if err != nil {
		t.Fatal(err)
	}
	if info.Probes != 2 || info.Backoff != 2 {
		t.Errorf("tcp_info probes %d backoff %d, want 2 and 2", info.Probes, info.Backoff)
	}
	// The probe timer starts at the RTO and doubles; timers fire late, not
	// early, so only the reader's delay in stamping the first probe eats
	// into the margin.
	rto := time.Duration(info.Rto) * time.Microsecond
	first, second := probes[0].At.Sub(wrote), probes[1].At.Sub(probes[0].At)
	t.Logf("rto %v; probes %v after the write, then %v later", rto, first, second)
	if first < rto*9/10 || second < 2*rto*9/10 {
		t.Errorf("probes %v after the write, then %v later; want the RTO (%v), then twice it", first, second, rto)
	}
	wantDelta(t, before, counters(t, p), map[string]int64{"TcpExt.TCPWinProbe": 2})

	if err := c.Ack(0, 100); err != nil {
		t.Fatal(err)
	}
	s, err := c.ExpectData(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq, _ := c.Rel(s); seq != 0 || string(s.Payload) != "hello" {
		t.Fatalf("after the window opened got %q at offset %d, want \"hello\" at 0", s.Payload, seq)
	}
	if err := c.AckAll(100); err != nil {
		t.Fatal(err)
	}
	if info, err = ks.TCPInfo(); err != nil {
		t.Fatal(err)
	}
	// bytes_acked counts the SYN on the side that connected.
	if info.Probes != 0 || info.Bytes_acked != 1+5 || info.Snd_wnd != 100<<7 {
		t.Errorf("tcp_info probes %d bytes_acked %d snd_wnd %d, want 0, 6 and %d", info.Probes, info.Bytes_acked, info.Snd_wnd, 100<<7)
	}
}

// TestCountersMatchTheWire: the kernel sends to a peer that connected; its
// OutSegs and RetransSegs match the segments seen on the tun, first with
// prompt ACKs, then with an ACK held until the kernel retransmits.
func TestCountersMatchTheWire(t *testing.T) {
	p := openPeer(t, Options{})
	c, ks := established(t, p, 8080, DefaultHandshake())

	// sendAndCount has the kernel send data, lets hold decide when to ACK
	// all of it, and returns the new and retransmitted segments seen.
	sendAndCount := func(data []byte, hold func(got []byte, s *Segment) bool) (fresh, retrans int64) {
		t.Helper()
		before := counters(t, p)
		mark, start := len(p.Received()), c.BytesReceived()
		if _, err := ks.Write(data); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for {
			s, err := c.ExpectData(2 * time.Second)
			if err != nil {
				t.Fatalf("%d of %d bytes arrived: %v", len(got), len(data), err)
			}
			if seq, _ := c.Rel(s); seq == start+uint32(len(got)) {
				got = append(got, s.Payload...)
			}
			if len(got) >= len(data) && !hold(got, s) {
				break
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("the kernel sent %d bytes that differ from the %d written", len(got), len(data))
		}
		if err := c.AckAll(c.Window); err != nil {
			t.Fatal(err)
		}
		after := counters(t, p)
		if err := p.Flush(time.Second); err != nil {
			t.Fatal(err)
		}
		seen := map[uint32]bool{}
		for _, s := range p.Received()[mark:] {
			if !c.mine(s) {
				continue
			}
			if seen[s.Seq] {
				retrans++
			} else {
				fresh++
			}
			seen[s.Seq] = true
		}
		wantDelta(t, before, after, map[string]int64{"Tcp.OutSegs": fresh, "Tcp.RetransSegs": retrans, "Tcp.InSegs": 1})
		return fresh, retrans
	}

	data := make([]byte, 3000)
	for i := range data {
		data[i] = byte(i)
	}
	fresh, _ := sendAndCount(data, func([]byte, *Segment) bool { return false })
	// MSS 1460 less 12 bytes of timestamps: 1448 + 1448 + 104.
	if fresh != 3 {
		t.Errorf("3000 bytes went out in %d segments, want 3", fresh)
	}

	// Hold the ACK until the kernel sends the data a second time.
	copies := 0
	_, retrans := sendAndCount(data[:1000], func(_ []byte, s *Segment) bool {
		copies++
		return copies < 2
	})
	if retrans == 0 {
		t.Error("the kernel did not retransmit unacknowledged data")
	}
	info, err := ks.TCPInfo()
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.Total_retrans) < retrans || info.Bytes_acked != 4000 || info.Unacked != 0 {
		t.Errorf("tcp_info total_retrans %d bytes_acked %d unacked %d, want >= %d, 4000 and 0",
			info.Total_retrans, info.Bytes_acked, info.Unacked, retrans)
	}
}

// TestPeerReset: a RST one byte off draws a challenge ACK and leaves the
// connection up; a RST at the right sequence number resets it.
func TestPeerReset(t *testing.T) {
	p := openPeer(t, Options{})
	c, ks := established(t, p, 8080, DefaultHandshake())
	if err := ks.SetTimeout(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before := counters(t, p)

	off := c.Build(RST|ACK, nil)
	off.Seq++
	if err := c.Write(off); err != nil {
		t.Fatal(err)
	}
	ack, err := c.Next(time.Second)
	if err != nil {
		t.Fatalf("no challenge ACK: %v", err)
	}
	if seq, acked := c.Rel(ack); ack.Flags != ACK || seq != 0 || acked != 0 {
		t.Errorf("want a challenge ACK at offsets 0/0, got %v", ack)
	}
	if _, err := ks.Read(make([]byte, 10)); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("after an out-of-place RST, read gave %v, want EAGAIN (connection still up)", err)
	}

	if err := c.Rst(); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Read(make([]byte, 10)); !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("after the RST, read gave %v, want ECONNRESET", err)
	}
	wantDelta(t, before, counters(t, p), map[string]int64{"TcpExt.TCPChallengeACK": 1, "Tcp.EstabResets": 1, "Tcp.OutRsts": 0})
}

// TestClosedPort: a SYN to a port nobody listens on draws the kernel's RST.
func TestClosedPort(t *testing.T) {
	p := openPeer(t, Options{})
	before := counters(t, p)
	h := DefaultHandshake()
	h.ISN = 1000
	if _, err := p.Connect(9, h, time.Second); !errors.Is(err, ErrReset) {
		t.Fatalf("connecting to a closed port gave %v, want ErrReset", err)
	}
	after := counters(t, p)
	got := p.Received()
	if len(got) != 1 {
		t.Fatalf("the kernel sent %d packets, want 1 RST", len(got))
	}
	if rst := got[0]; rst.Flags != RST|ACK || rst.Seq != 0 || rst.Ack != 1001 || rst.SrcPort != 9 || rst.DstPort != 40001 {
		t.Errorf("want RST|ACK 9 > 40001 seq 0 ack 1001, got %v", rst)
	}
	wantDelta(t, before, after, map[string]int64{"Tcp.OutRsts": 1, "Tcp.OutSegs": 1, "Tcp.InSegs": 1})
}

// TestTCPInfo: tcp_info of a kernel socket reflects what the peer offered
// and how long it took to acknowledge.
func TestTCPInfo(t *testing.T) {
	p := openPeer(t, Options{})
	ks, err := p.DialFromKernel(80, SockOpt{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1})
	if err != nil {
		t.Fatal(err)
	}
	h := DefaultHandshake()
	h.MSS, h.Window = 1000, 1000
	c, err := p.Accept(80, h, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if s, err := c.ExpectData(time.Second); err != nil || len(s.Payload) != 100 {
		t.Fatalf("want 100 bytes from the kernel, got %v, %v", s, err)
	}
	const delay = 50 * time.Millisecond
	time.Sleep(delay)
	if err := c.AckAll(1000); err != nil {
		t.Fatal(err)
	}
	info, err := ks.TCPInfo()
	if err != nil {
		t.Fatal(err)
	}
	const established = 1     // TCP_ESTABLISHED
	const allOpts = 1 | 2 | 4 // TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE
	if info.State != established || info.Options&allOpts != allOpts {
		t.Errorf("tcp_info state %d options %#x, want %d with %#x", info.State, info.Options, established, allOpts)
	}
	// The MSS offered less the timestamps option; the window scaled by 7;
	// the data and the SYN acknowledged.
	if info.Snd_mss != 988 || info.Snd_wnd != 1000<<7 || info.Bytes_acked != 1+100 || info.Unacked != 0 {
		t.Errorf("tcp_info snd_mss %d snd_wnd %d bytes_acked %d unacked %d, want 988, %d, 101 and 0",
			info.Snd_mss, info.Snd_wnd, info.Bytes_acked, info.Unacked, 1000<<7)
	}
	// srtt moves an eighth of the way to each sample: one sample of at
	// least the delay after a near-zero handshake.
	if lo := uint32(delay.Microseconds() / 8); info.Rtt < lo || info.Rtt >= uint32(delay.Microseconds()) {
		t.Errorf("tcp_info rtt %dus, want within [%d, %d)", info.Rtt, lo, delay.Microseconds())
	}
}

// TestCloseRemovesEverything: no namespace or socket survives Close.
func TestCloseRemovesEverything(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces, tun devices")
	p, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	name := p.Name()
	l, err := p.ListenInKernel(80)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(l.FD, &st); err != nil {
		t.Fatal(err)
	}
	sock := fmt.Sprintf("socket:[%d]", st.Ino)
	if !listed(t, name) {
		t.Fatalf("namespace %s is not listed while open", name)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if listed(t, name) {
		t.Errorf("namespace %s is still listed after Close", name)
	}
	for _, dir := range host.NetnsDirs {
		if _, err := os.Stat(dir + "/" + name); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/%s: %v, want it gone", dir, name, err)
		}
	}
	if link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", l.FD)); link == sock {
		t.Errorf("the listener's descriptor %d is still open", l.FD)
	}
	if err := p.Write(&Segment{Flags: SYN}); err == nil {
		t.Error("writing after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func listed(t *testing.T, name string) bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// TestOptions: sysctls and the MTU are the namespace's, seen in the
// kernel's SYN; a sysctl outside net.* is refused.
func TestOptions(t *testing.T) {
	p := openPeer(t, Options{MTU: 1280, Sysctls: map[string]string{
		"net.ipv4.tcp_timestamps": "0", "net.ipv4.tcp_window_scaling": "0"}})
	if _, err := p.DialFromKernel(80); err != nil {
		t.Fatal(err)
	}
	syn, err := p.ExpectSYN(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if o := syn.Opts; o.HasTS || o.HasWScale || !o.SACKPermitted || o.MSS != 1240 {
		t.Errorf("want a SYN with mss 1240 and sackOK only, got %v", syn)
	}
	if syn.Src != p.KernelAddr() || syn.Dst != p.PeerAddr() || syn.BadChecksum {
		t.Errorf("want a SYN %s > %s with a good checksum, got %v", p.KernelAddr(), p.PeerAddr(), syn)
	}
	if q, err := Open(Options{Sysctls: map[string]string{"kernel.panic": "0"}}); err == nil {
		q.Close()
		t.Error("Open accepted a sysctl outside net.*")
	}
}

// TestBadChecksum: a corrupt segment is counted and dropped; the same data
// with a good checksum is delivered.
func TestBadChecksum(t *testing.T) {
	p := openPeer(t, Options{})
	c, ks := established(t, p, 8080, DefaultHandshake())
	if err := ks.SetTimeout(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	before := counters(t, p)
	bad := c.Build(PSH|ACK, []byte("data"))
	bad.BadChecksum = true
	if err := p.Write(bad); err != nil {
		t.Fatal(err)
	}
	after := counters(t, p)
	if _, err := ks.Read(make([]byte, 10)); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("after a corrupt segment, read gave %v, want EAGAIN", err)
	}
	// Counted in InSegs as well: tcp_v4_rcv counts before it checks.
	wantDelta(t, before, after, map[string]int64{"Tcp.InCsumErrors": 1, "Tcp.InErrs": 1, "Tcp.InSegs": 1})

	if err := c.Send([]byte("data")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, err := ks.Read(buf); err != nil || string(buf[:n]) != "data" {
		t.Fatalf("after a good segment, read gave %q, %v", buf[:n], err)
	}
	if s, err := c.Next(time.Second); err != nil || s.Flags != ACK || s.Ack != c.PeerISN+1+4 {
		t.Errorf("want the kernel to ACK 4 bytes, got %v, %v", s, err)
	}
}

// TestNonTCPPackets: packets other than TCP are recorded, found by
// ExpectPacket and passed over by the TCP helpers.
func TestNonTCPPackets(t *testing.T) {
	p := openPeer(t, Options{})
	if err := p.WriteRaw(icmpEcho(p.PeerAddr(), p.KernelAddr(), 7)); err != nil {
		t.Fatal(err)
	}
	reply, err := p.ExpectPacket(time.Second, func(s *Segment) bool { return isEchoReply(s, 7) })
	if err != nil {
		t.Fatal(err)
	}
	if reply.IsTCP() || reply.Src != p.KernelAddr() {
		t.Errorf("want an ICMP echo reply from %s, got %v", p.KernelAddr(), reply)
	}
	// A second reply queues before the SYN; ExpectSYN must pass over it.
	if err := p.WriteRaw(icmpEcho(p.PeerAddr(), p.KernelAddr(), 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DialFromKernel(80); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ExpectSYN(time.Second); err != nil {
		t.Fatal(err)
	}
	got := p.Received()
	if len(got) < 3 || !isEchoReply(got[1], 8) || !got[2].IsTCP() || got[2].Flags != SYN {
		t.Fatalf("want echo reply, echo reply, SYN; got %v", got)
	}
}
