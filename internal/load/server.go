package load

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
)

// The first byte a client sends on a TCP connection says what it wants.
const (
	opBulk     = 'B' // then bytes to drain until EOF
	opRR       = 'R' // then u32 request size, u32 response size, then requests
	opUDPStats = 'U' // then length-prefixed UDP source addresses, each answered with u64 datagrams, u64 bytes
)

// Server accepts TCP connections and counts UDP datagrams on the same port.
type Server struct {
	tcp net.Listener
	udp net.PacketConn

	mu       sync.Mutex
	received map[string]*udpCount // by datagram source address

	pin bool
	cpu int
}

// PinTo runs the server's connection handlers on one CPU, as a receiving
// host's application would; call before Serve.
func (s *Server) PinTo(cpu int) { s.pin, s.cpu = true, cpu }

type udpCount struct{ datagrams, bytes uint64 }

// Listen opens the TCP listener and the UDP socket on addr (port 0 picks one,
// the same for both when it can).
func Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on tcp %s: %w", addr, err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("listening on udp %s: %w", ln.Addr(), err)
	}
	return &Server{tcp: ln, udp: pc, received: map[string]*udpCount{}}, nil
}

// Addr is where clients connect.
func (s *Server) Addr() net.Addr { return s.tcp.Addr() }

// Serve runs until ctx ends, then closes the sockets.
func (s *Server) Serve(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.tcp.Close()
		s.udp.Close()
	}()
	go s.countUDP()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting: %w", err)
		}
		go s.handle(c)
	}
}

func (s *Server) countUDP() {
	buf := make([]byte, 65536)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		s.mu.Lock()
		c := s.received[from.String()]
		if c == nil {
			c = &udpCount{}
			s.received[from.String()] = c
		}
		c.datagrams++
		c.bytes += uint64(n)
		s.mu.Unlock()
	}
}

func (s *Server) handle(c net.Conn) {
	defer c.Close()
	if s.pin {
		if pinThread(s.cpu) != nil {
			return
		}
	}
	var op [1]byte
	if _, err := io.ReadFull(c, op[:]); err != nil {
		return
	}
	switch op[0] {
	case opBulk:
		drainBlocking(c)
	case opRR:
		var sizes [8]byte
		if _, err := io.ReadFull(c, sizes[:]); err != nil {
			return
		}
		req, resp := binary.BigEndian.Uint32(sizes[:]), binary.BigEndian.Uint32(sizes[4:])
		if req == 0 || req > 64<<20 || resp > 64<<20 {
			return
		}
		in, out := make([]byte, req), make([]byte, resp)
		for {
			if _, err := io.ReadFull(c, in); err != nil {
				return
			}
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	case opUDPStats:
		for {
			var n [1]byte
			if _, err := io.ReadFull(c, n[:]); err != nil {
				return
			}
			from := make([]byte, n[0])
			if _, err := io.ReadFull(c, from); err != nil {
				return
			}
			s.mu.Lock()
			var got udpCount
			if cnt := s.received[string(from)]; cnt != nil {
				got = *cnt
			}
			s.mu.Unlock()
			var reply [16]byte
			binary.BigEndian.PutUint64(reply[:], got.datagrams)
			binary.BigEndian.PutUint64(reply[8:], got.bytes)
			if _, err := c.Write(reply[:]); err != nil {
				return
			}
		}
	}
}

// queryUDP asks a server how much arrived from one UDP source, on a control
// connection that has sent opUDPStats.
func queryUDP(ctl net.Conn, from string) (datagrams, bytes uint64, err error) {
	if len(from) > 255 {
		return 0, 0, errors.New("source address too long")
	}
	msg := append([]byte{byte(len(from))}, from...)
	if _, err := ctl.Write(msg); err != nil {
		return 0, 0, fmt.Errorf("asking the server for UDP counts: %w", err)
	}
	var reply [16]byte
	if _, err := io.ReadFull(ctl, reply[:]); err != nil {
		return 0, 0, fmt.Errorf("reading the server's UDP counts: %w", err)
	}
	return binary.BigEndian.Uint64(reply[:]), binary.BigEndian.Uint64(reply[8:]), nil
}

// drainBlocking reads until EOF with blocking read(2) calls, as iperf3's
// server does: non-blocking reads that park on EAGAIN make the receiver the
// slower end of a saturated stream.
func drainBlocking(c net.Conn) {
	buf := make([]byte, 1<<20)
	tc, ok := c.(*net.TCPConn)
	if !ok {
		io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, buf)
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		s := int(fd)
		if syscall.SetNonblock(s, false) != nil {
			return
		}
		defer syscall.SetNonblock(s, true)
		for {
			n, err := syscall.Read(s, buf)
			if n <= 0 && err != syscall.EINTR {
				return
			}
		}
	})
}
