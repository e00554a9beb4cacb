package probe

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSockLimitsReadsSettings sets on a loopback connection each setting
// the iterator reads and finds them on the kernel's socket.
func TestSockLimitsReadsSettings(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading BPF needs root")
	}
	r, err := OpenSockLimits()
	if errors.Is(err, ErrPermission) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	set := func(conn net.Conn, level, opt, v int) {
		raw, _ := conn.(*net.TCPConn).SyscallConn()
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), level, opt, v) }); err != nil || serr != nil {
			t.Fatalf("setsockopt %d: %v %v", opt, err, serr)
		}
	}
	set(s, unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP, 20000)
	set(s, unix.SOL_SOCKET, unix.SO_RCVBUF, 65536)
	set(s, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, 16384)
	set(s, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE, 1000000)
	set(c, unix.IPPROTO_TCP, unix.TCP_CORK, 1)
	got, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	var server, client *SockSettings
	for i := range got {
		switch {
		case got[i].Local.String() == s.LocalAddr().String() && got[i].Peer.String() == s.RemoteAddr().String():
			server = &got[i]
		case got[i].Local.String() == c.LocalAddr().String() && got[i].Peer.String() == c.RemoteAddr().String():
			client = &got[i]
		}
	}
	if server == nil || client == nil {
		t.Fatalf("the connection's sockets are not among %d read: %+v", len(got), got)
	}
	if server.WindowClamp != 20000 || !server.RcvBufLocked || server.RcvBuf != 2*65536 || server.SndBufLocked ||
		server.NotSentLowat != 16384 || server.MaxPacingRate != 1000000 || server.Cork || server.Inode == 0 || server.CongControl == "" {
		t.Errorf("server socket read as %+v", *server)
	}
	if !client.Cork || client.RcvBufLocked || client.MaxPacingRate != 0 || client.NotSentLowat != 0 {
		t.Errorf("client socket read as %+v", *client)
	}
}
