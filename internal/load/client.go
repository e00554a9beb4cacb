package load

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
)

// Result is what a run measured, on the client's side (as iperf3's sender does).
type Result struct {
	Mode      Mode       `json:"mode"`
	Streams   int        `json:"streams"`
	Seconds   float64    `json:"seconds"`
	Bytes     uint64     `json:"bytes"`
	Ops       uint64     `json:"ops"` // writes (bulk), transactions (rr), datagrams (udp)
	Bps       float64    `json:"bits_per_second"`
	OpsPerSec float64    `json:"ops_per_second"`
	AvgRTTus  float64    `json:"avg_transaction_us,omitempty"` // rr
	Received  uint64     `json:"received_datagrams,omitempty"` // udp, as the server counted
	Lost      uint64     `json:"lost_datagrams,omitempty"`
	Intervals []Interval `json:"intervals"`
}

// Interval is one reporting period.
type Interval struct {
	Start     float64 `json:"start"`
	End       float64 `json:"end"`
	Bytes     uint64  `json:"bytes"`
	Ops       uint64  `json:"ops"`
	Bps       float64 `json:"bits_per_second"`
	OpsPerSec float64 `json:"ops_per_second"`
}

type counters struct {
	bytes, ops, busyNs atomic.Uint64
}

// Run generates traffic as o says until its duration ends or ctx does.
// progress, if not nil, receives each interval as it ends.
func Run(ctx context.Context, o Options, progress func(Interval)) (*Result, error) {
	o.Defaults()
	if err := o.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var c counters
	var wg sync.WaitGroup
	errs := make(chan error, o.Streams)
	start := time.Now()
	var udpConns []net.Conn
	for i := 0; i < o.Streams; i++ {
		conn, err := dial(&o)
		if err != nil {
			return nil, err
		}
		if o.Mode == UDP {
			udpConns = append(udpConns, conn)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if o.Mode != UDP {
				defer conn.Close()
			}
			if err := stream(ctx, &o, conn, &c); err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
	}
	res := &Result{Mode: o.Mode, Streams: o.Streams}
	closeInterval := report(ctx, &o, &c, start, res, progress)
	wg.Wait()
	closeInterval(time.Now()) // after the streams stopped, so the intervals add up to the total
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Bytes, res.Ops = c.bytes.Load(), c.ops.Load()
	res.Bps = float64(res.Bytes) * 8 / res.Seconds
	res.OpsPerSec = float64(res.Ops) / res.Seconds
	if o.Mode == RR && res.Ops > 0 {
		res.AvgRTTus = float64(c.busyNs.Load()) / float64(res.Ops) / 1e3
	}
	if o.Mode == UDP {
		if err := countUDP(&o, udpConns, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// report closes an interval every o.Interval until ctx ends; the caller
// closes the last one with the returned function.
func report(ctx context.Context, o *Options, c *counters, start time.Time, res *Result, progress func(Interval)) func(time.Time) {
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var lastBytes, lastOps uint64
	last := start
	closeInterval := func(now time.Time) {
		b, n := c.bytes.Load(), c.ops.Load()
		if k := len(res.Intervals); k > 0 && now.Sub(last) < o.Interval/10 {
			// A sliver at the end joins the interval before it rather than printing alone.
			iv := &res.Intervals[k-1]
			iv.End, iv.Bytes, iv.Ops = now.Sub(start).Seconds(), iv.Bytes+b-lastBytes, iv.Ops+n-lastOps
			if secs := iv.End - iv.Start; secs > 0 {
				iv.Bps, iv.OpsPerSec = float64(iv.Bytes)*8/secs, float64(iv.Ops)/secs
			}
			return
		}
		secs := now.Sub(last).Seconds()
		iv := Interval{Start: last.Sub(start).Seconds(), End: now.Sub(start).Seconds(), Bytes: b - lastBytes, Ops: n - lastOps}
		if secs > 0 {
			iv.Bps, iv.OpsPerSec = float64(iv.Bytes)*8/secs, float64(iv.Ops)/secs
		}
		res.Intervals = append(res.Intervals, iv)
		if progress != nil {
			progress(iv)
		}
		lastBytes, lastOps, last = b, n, now
	}
	for {
		select {
		case now := <-tick.C:
			closeInterval(now)
		case <-ctx.Done():
			return closeInterval
		}
	}
}

func dial(o *Options) (net.Conn, error) {
	network := "tcp"
	if o.Mode == UDP {
		network = "udp"
	}
	d := &net.Dialer{Control: o.control, Timeout: 5 * time.Second}
	var conn net.Conn
	connect := func() (err error) {
		conn, err = d.Dial(network, o.Addr)
		return err
	}
	var err error
	if o.DialNetns != "" {
		ns, nerr := host.OpenNetns(o.DialNetns)
		if nerr != nil {
			return nil, nerr
		}
		defer ns.Close()
		err = ns.Do(connect)
	} else {
		err = connect()
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s %s: %w", network, o.Addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(o.NoDelay); err != nil {
			conn.Close()
			return nil, fmt.Errorf("setting TCP_NODELAY: %w", err)
		}
	}
	return conn, nil
}

func stream(ctx context.Context, o *Options, conn net.Conn, c *counters) error {
	if o.PinCPU {
		if err := pinThread(o.CPU); err != nil {
			return err
		}
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	switch o.Mode {
	case Bulk:
		return bulk(ctx, o, conn, c)
	case RR:
		return requestResponse(ctx, o, conn, c)
	default:
		return datagrams(ctx, o, conn, c)
	}
}

func timedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// bulk writes as iperf3 does: blocking write(2) calls on the socket. Go's
// non-blocking writes park on EAGAIN and wait for epoll, which costs a
// saturated sender about a tenth of its throughput. SO_SNDTIMEO bounds each
// write so the end of the run is noticed.
func bulk(ctx context.Context, o *Options, conn net.Conn, c *counters) error {
	if _, err := conn.Write([]byte{opBulk}); err != nil {
		return fmt.Errorf("starting a bulk stream: %w", err)
	}
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		return fmt.Errorf("reaching the socket: %w", err)
	}
	buf := make([]byte, o.Size)
	var werr error
	cerr := rc.Control(func(fd uintptr) {
		s := int(fd)
		tv := syscall.NsecToTimeval(int64(100 * time.Millisecond))
		if werr = syscall.SetsockoptTimeval(s, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); werr != nil {
			werr = fmt.Errorf("setting SO_SNDTIMEO: %w", werr)
			return
		}
		if werr = syscall.SetNonblock(s, false); werr != nil {
			werr = fmt.Errorf("making the socket blocking: %w", werr)
			return
		}
		defer syscall.SetNonblock(s, true) // the net package expects its own mode back
		for ctx.Err() == nil {
			n, err := syscall.Write(s, buf)
			if n > 0 {
				c.bytes.Add(uint64(n))
				c.ops.Add(1)
			}
			if err != nil && err != syscall.EAGAIN && err != syscall.EINTR {
				werr = fmt.Errorf("writing: %w", err)
				return
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("reaching the socket: %w", cerr)
	}
	return werr
}

func requestResponse(ctx context.Context, o *Options, conn net.Conn, c *counters) error {
	hdr := []byte{opRR, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(hdr[1:], uint32(o.Size))
	binary.BigEndian.PutUint32(hdr[5:], uint32(o.Response))
	if _, err := conn.Write(hdr); err != nil {
		return fmt.Errorf("starting request/response: %w", err)
	}
	req, resp := make([]byte, o.Size), make([]byte, o.Response)
	part := o.Size / o.Writes
	for ctx.Err() == nil {
		t0 := time.Now()
		// A request split into writes: with Nagle on, the second waits for the first's ACK.
		for off := 0; off < o.Size; {
			end := min(off+part, o.Size)
			if o.Size-end < part {
				end = o.Size
			}
			if _, err := conn.Write(req[off:end]); err != nil {
				if timedOut(err) {
					return nil
				}
				return fmt.Errorf("writing a request: %w", err)
			}
			off = end
		}
		if _, err := io.ReadFull(conn, resp); err != nil {
			if timedOut(err) {
				return nil
			}
			return fmt.Errorf("reading a response: %w", err)
		}
		c.busyNs.Add(uint64(time.Since(t0)))
		c.bytes.Add(uint64(o.Size))
		c.ops.Add(1)
	}
	return nil
}

func datagrams(ctx context.Context, o *Options, conn net.Conn, c *counters) error {
	buf := make([]byte, o.Size)
	// Pacing by catching up with a schedule: sleeps are too coarse to space
	// single datagrams, so send what the rate allows by now, then nap.
	perSecond := o.RateBps / float64(o.Size*8*o.Streams)
	start := time.Now()
	var sent float64
	for ctx.Err() == nil {
		if perSecond > 0 && sent >= time.Since(start).Seconds()*perSecond {
			time.Sleep(time.Millisecond)
			continue
		}
		sent++
		n, err := conn.Write(buf)
		if err != nil {
			if timedOut(err) {
				return nil
			}
			// A full queue below UDP reports ENOBUFS: the datagram is lost, the run goes on.
			continue
		}
		c.bytes.Add(uint64(n))
		c.ops.Add(1)
	}
	return nil
}

// countUDP asks the server how many datagrams arrived from each stream.
func countUDP(o *Options, conns []net.Conn, res *Result) error {
	time.Sleep(200 * time.Millisecond) // let the last datagrams arrive
	ctlOpts := *o
	ctlOpts.Mode, ctlOpts.SndBuf, ctlOpts.RcvBuf = Bulk, 0, 0
	ctl, err := dial(&ctlOpts)
	if err != nil {
		return err
	}
	defer ctl.Close()
	if _, err := ctl.Write([]byte{opUDPStats}); err != nil {
		return fmt.Errorf("asking the server for UDP counts: %w", err)
	}
	for _, conn := range conns {
		got, _, err := queryUDP(ctl, conn.LocalAddr().String())
		conn.Close()
		if err != nil {
			return err
		}
		res.Received += got
	}
	if res.Ops > res.Received {
		res.Lost = res.Ops - res.Received
	}
	return nil
}
