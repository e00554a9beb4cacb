package load

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Mode is the kind of traffic.
type Mode string

// Modes.
const (
	Bulk Mode = "bulk" // TCP, the client writes as fast as it can
	RR   Mode = "rr"   // TCP request/response: a request, then wait for the response
	UDP  Mode = "udp"  // datagrams at a rate
)

// Options configure a client run.
type Options struct {
	Mode     Mode
	Addr     string        // the server, host:port
	Duration time.Duration // how long to send
	Streams  int           // parallel connections (bulk and rr)
	Size     int           // bytes per write, request or datagram
	Response int           // rr: bytes per response
	Writes   int           // rr: how many writes each request is split into (2 shows Nagle)
	NoDelay  bool          // TCP_NODELAY
	SndBuf   int           // SO_SNDBUF, 0 for the kernel's autotuning
	RcvBuf   int           // SO_RCVBUF
	// ForceBufs sets SndBuf and RcvBuf beyond net.core.wmem_max and
	// rmem_max (SO_SNDBUFFORCE, SO_RCVBUFFORCE: CAP_NET_ADMIN), as a
	// host with raised limits would.
	ForceBufs bool
	CC        string // congestion control per socket ("" for the namespace's default)
	// MaxPacingRate caps each socket's sending rate (SO_MAX_PACING_RATE,
	// bytes a second; 0 for none).
	MaxPacingRate uint64
	RateBps       float64       // udp: bits per second, 0 for as fast as possible
	Interval      time.Duration // between per-interval results
	DialNetns     string        // named network namespace to connect from ("" for the current one)
	// CPU pins each stream's thread to one CPU (-1, or unset with PinCPU false, for none).
	CPU    int
	PinCPU bool
}

// Defaults fills what the caller left zero.
func (o *Options) Defaults() {
	if o.Mode == "" {
		o.Mode = Bulk
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Streams == 0 {
		o.Streams = 1
	}
	if o.Size == 0 {
		switch o.Mode {
		case RR:
			o.Size = 100
		case UDP:
			o.Size = 1400
		default:
			o.Size = 128 << 10
		}
	}
	if o.Mode == RR && o.Response == 0 {
		o.Response = 10
	}
	if o.Writes == 0 {
		o.Writes = 1
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
}

// Check says what is wrong with the options.
func (o *Options) Check() error {
	switch o.Mode {
	case Bulk, RR, UDP:
	default:
		return fmt.Errorf("unknown mode %q (bulk, rr or udp)", o.Mode)
	}
	switch {
	case o.Addr == "":
		return errors.New("no server address")
	case o.Size <= 0 || o.Size > 64<<20:
		return fmt.Errorf("size %d is out of range (1 byte to 64 MiB)", o.Size)
	case o.Mode == UDP && o.Size > 65507:
		return fmt.Errorf("a UDP datagram of %d bytes is larger than 65507", o.Size)
	case o.Streams < 1 || o.Streams > 128:
		return fmt.Errorf("%d streams is out of range (1 to 128)", o.Streams)
	case o.Writes < 1 || o.Writes > o.Size:
		return fmt.Errorf("%d writes per request do not fit %d bytes", o.Writes, o.Size)
	case o.Duration <= 0:
		return errors.New("duration must be positive")
	case o.Interval < 10*time.Millisecond:
		return fmt.Errorf("interval %v is shorter than 10ms", o.Interval)
	}
	return nil
}

// control sets the socket options before connect, so SO_SNDBUF, SO_RCVBUF
// and the congestion control take effect from the handshake.
func (o *Options) control(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		s := int(fd)
		sndbuf, rcvbuf := syscall.SO_SNDBUF, syscall.SO_RCVBUF
		if o.ForceBufs {
			sndbuf, rcvbuf = syscall.SO_SNDBUFFORCE, syscall.SO_RCVBUFFORCE
		}
		if o.SndBuf > 0 {
			if serr = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, sndbuf, o.SndBuf); serr != nil {
				serr = fmt.Errorf("setting SO_SNDBUF: %w", serr)
				return
			}
		}
		if o.RcvBuf > 0 {
			if serr = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, rcvbuf, o.RcvBuf); serr != nil {
				serr = fmt.Errorf("setting SO_RCVBUF: %w", serr)
				return
			}
		}
		if o.MaxPacingRate > 0 {
			if serr = syscall.SetsockoptInt(s, syscall.SOL_SOCKET, unix.SO_MAX_PACING_RATE, int(o.MaxPacingRate)); serr != nil {
				serr = fmt.Errorf("setting SO_MAX_PACING_RATE: %w", serr)
				return
			}
		}
		if o.CC != "" && network[:3] == "tcp" {
			if serr = syscall.SetsockoptString(s, syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, o.CC); serr != nil {
				serr = fmt.Errorf("setting congestion control %q: %w", o.CC, serr)
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}
