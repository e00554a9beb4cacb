package e2e

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/lab"
)

// serve accepts one connection and hands it to handle, in the background.
// The returned channel is closed when handle returns.
func serve(t testing.TB, ln net.Listener, handle func(net.Conn)) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c)
	}()
	return done
}

// drain reads everything in reads of up to 1 MiB, so the reader is never what
// limits the sender. Both ends are wrapped: io.Discard's ReadFrom would
// otherwise read in 8 KiB pieces, and the receiver spend its CPU on syscalls.
func drain(c net.Conn) {
	io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{c}, make([]byte, 1<<20))
}

// bulk writes 128 KiB chunks (as iperf3 does) for d (or until the peer stops reading and the
// write deadline passes), then closes.
func bulk(t testing.TB, c net.Conn, d time.Duration) int64 {
	t.Helper()
	buf := make([]byte, 128<<10)
	var n int64
	end := time.Now().Add(d)
	if err := c.SetWriteDeadline(end); err != nil {
		t.Errorf("bulk: %v", err)
		c.Close()
		return 0
	}
	for time.Now().Before(end) {
		m, err := c.Write(buf)
		n += int64(m)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Errorf("bulk write: %v", err)
			break
		}
	}
	c.Close()
	return n
}

// dialer returns a dialer that uses CUBIC, whatever the host's default (BBR
// here, whose pacing adds limits of its own), and sets SO_SNDBUF when sndbuf > 0.
func dialer(sndbuf int) *net.Dialer {
	return &net.Dialer{Control: func(network, address string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, "cubic")
			if serr == nil && sndbuf > 0 {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, sndbuf)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
}

// vethStream runs one TCP stream (CUBIC, 128 KiB writes) from the sender to
// the receiver namespace for d and returns the bytes per second the sender
// wrote, as iperf3 reports it. sndbuf > 0 sets SO_SNDBUF.
func vethStream(t testing.TB, pair *lab.Pair, d time.Duration, sndbuf int) float64 {
	t.Helper()
	ln := listenIn(t, pair.Receiver, "tcp", lab.ReceiverAddr.Addr().String()+":5201")
	defer ln.Close()
	done := serve(t, ln, drain)
	c := dialFrom(t, pair.Sender, dialer(sndbuf), "tcp", ln.Addr().String())
	start := time.Now()
	n := bulk(t, c, d)
	rate := float64(n) / time.Since(start).Seconds()
	<-done
	return rate
}

// listenIn listens on addr inside a namespace.
func listenIn(t testing.TB, ns *host.Netns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln
}

// dialFrom connects from inside a namespace.
func dialFrom(t testing.TB, ns *host.Netns, d *net.Dialer, network, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = d.Dial(network, addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// churnFrom opens connections from ns to addr in a loop, each writing size
// bytes and closing, until stop closes; the count comes back on the channel
// it returns. A dial that fails (ports in TIME_WAIT, a full backlog) is
// retried after a pause, never fatal: the caller waits for the count.
func churnFrom(ns *host.Netns, addr string, size int, stop <-chan struct{}) <-chan int {
	done := make(chan int, 1)
	go func() {
		n, payload := 0, make([]byte, size)
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			var c net.Conn
			if err := ns.Do(func() (err error) { c, err = net.DialTimeout("tcp", addr, time.Second); return err }); err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			c.Write(payload)
			c.Close()
			n++
		}
	}()
	return done
}
