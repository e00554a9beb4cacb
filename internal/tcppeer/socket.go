package tcppeer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// SocketTimeout bounds every blocking call on a kernel socket the peer
// opens (SO_RCVTIMEO, SO_SNDTIMEO), so a script whose peer never answers
// fails instead of hanging; Socket.SetTimeout changes it per socket.
const SocketTimeout = 5 * time.Second

// SockOpt is an integer socket option set before connect or listen, e.g.
// {unix.IPPROTO_TCP, unix.TCP_NODELAY, 1} or {unix.SOL_SOCKET, unix.SO_RCVBUF, 4096}.
type SockOpt struct{ Level, Name, Value int }

// Socket is a kernel TCP socket in the peer's namespace, a raw descriptor
// for precise control (MSG_MORE, corking, exact buffer sizes). The peer
// closes it on Close if the script has not.
type Socket struct {
	FD int

	p      *Peer
	mu     sync.Mutex
	closed bool
}

// DialFromKernel starts a kernel connect() to the peer's port and returns
// without waiting: the script answers the SYN (Peer.Accept), and the first
// write blocks until the connection is established.
func (p *Peer) DialFromKernel(port uint16, opts ...SockOpt) (*Socket, error) {
	s, err := p.socket(opts)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: int(port), Addr: p.peerAddr.As4()}
	err = unix.SetNonblock(s.FD, true)
	if err == nil {
		if err = unix.Connect(s.FD, sa); errors.Is(err, unix.EINPROGRESS) {
			err = nil
		}
	}
	if err == nil {
		err = unix.SetNonblock(s.FD, false)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("connecting to %s:%d in %s: %w", p.peerAddr, port, p.ns.Name, err)
	}
	return s, nil
}

// ListenInKernel listens on the kernel's address and port; options set on
// the listener (buffer sizes) are inherited by the sockets it accepts.
func (p *Peer) ListenInKernel(port uint16, opts ...SockOpt) (*Socket, error) {
	s, err := p.socket(opts)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: int(port), Addr: p.kernelAddr.Addr().As4()}
	err = unix.SetsockoptInt(s.FD, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err == nil {
		err = unix.Bind(s.FD, sa)
	}
	if err == nil {
		err = unix.Listen(s.FD, 16)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("listening on %s:%d in %s: %w", p.kernelAddr.Addr(), port, p.ns.Name, err)
	}
	return s, nil
}

// socket creates a TCP socket inside the namespace, with the options and
// timeouts set, and tracks it for Close.
func (p *Peer) socket(opts []SockOpt) (*Socket, error) {
	var fd int
	err := p.ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating a socket in %s: %w", p.ns.Name, err)
	}
	s := &Socket{FD: fd, p: p}
	for _, o := range opts {
		if err = s.Set(o); err != nil {
			break
		}
	}
	if err == nil {
		err = s.SetTimeout(SocketTimeout)
	}
	if err == nil {
		err = p.track(s)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (p *Peer) track(s *Socket) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("opening a socket in %s: %w", p.ns.Name, errClosed)
	}
	p.sockets = append(p.sockets, s)
	return nil
}

// Accept takes a connection from a listener (blocking, within the timeout).
func (s *Socket) Accept() (*Socket, error) {
	fd, err := retry(func() (int, error) {
		fd, _, err := unix.Accept4(s.FD, unix.SOCK_CLOEXEC)
		return fd, err
	})
	if err != nil {
		return nil, fmt.Errorf("accepting on socket %d: %w", s.FD, err)
	}
	c := &Socket{FD: fd, p: s.p}
	if err := s.p.track(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Set sets an integer socket option.
func (s *Socket) Set(o SockOpt) error {
	if err := unix.SetsockoptInt(s.FD, o.Level, o.Name, o.Value); err != nil {
		return fmt.Errorf("setting socket option %d/%d=%d: %w", o.Level, o.Name, o.Value, err)
	}
	return nil
}

// SetTimeout bounds the socket's blocking calls.
func (s *Socket) SetTimeout(d time.Duration) error {
	tv := unix.NsecToTimeval(d.Nanoseconds())
	for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
		if err := unix.SetsockoptTimeval(s.FD, unix.SOL_SOCKET, opt, &tv); err != nil {
			return fmt.Errorf("setting the timeout of socket %d: %w", s.FD, err)
		}
	}
	return nil
}

// Write writes b, blocking (within the timeout) while the buffer is full
// or the connection is not yet established.
func (s *Socket) Write(b []byte) (int, error) { return s.Send(b, 0) }

// Send writes b with send flags (unix.MSG_MORE, ...).
func (s *Socket) Send(b []byte, flags int) (int, error) {
	n, err := retry(func() (int, error) { return unix.SendmsgN(s.FD, b, nil, nil, flags|unix.MSG_NOSIGNAL) })
	if err != nil {
		return n, fmt.Errorf("sending on socket %d: %w", s.FD, err)
	}
	return n, nil
}

// Read reads into b, blocking within the timeout; 0 bytes and no error is
// the end of the stream.
func (s *Socket) Read(b []byte) (int, error) {
	n, err := retry(func() (int, error) { return unix.Read(s.FD, b) })
	if err != nil {
		return 0, fmt.Errorf("reading socket %d: %w", s.FD, err)
	}
	return n, nil
}

// TCPInfo is the kernel's tcp_info for the socket.
func (s *Socket) TCPInfo() (*unix.TCPInfo, error) {
	info, err := unix.GetsockoptTCPInfo(s.FD, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return nil, fmt.Errorf("reading tcp_info of socket %d: %w", s.FD, err)
	}
	return info, nil
}

// Close closes the descriptor once; later calls do nothing, so a
// descriptor number reused since is never closed by mistake.
func (s *Socket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := unix.Close(s.FD); err != nil {
		return fmt.Errorf("closing socket %d: %w", s.FD, err)
	}
	return nil
}

// retry repeats a call interrupted by a signal: with a socket timeout set,
// the kernel returns EINTR instead of restarting it (signal(7)), and the Go
// runtime sends signals.
func retry(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}
