package collect

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// mapLen counts a map's entries.
func mapLen[K comparable, V any](t *testing.T, rec *Recording, name string) int {
	t.Helper()
	n := 0
	if err := probe.EachEntry(rec.sess.Map(name), func(K, V) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// stageSamples sums the sent samples of a trace's tcp_stage events, and
// fails on one that counts more than could have been sent (a wrapped difference).
func stageSamples(t *testing.T, data []byte, most uint64) uint64 {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if !event.IsEvent(rec.Type) || event.Type(rec.Type) != event.TypeTCPStage {
			continue
		}
		var ev wire.TcpStageEvent
		if err := binary.Read(bytes.NewReader(rec.Body), binary.NativeEndian, &ev); err != nil {
			t.Fatalf("decoding a tcp_stage event: %v", err)
		}
		c := ev.Stage[wire.TcpStageSTAGE_ACK].Count
		if c > most {
			t.Fatalf("a tcp_stage event counts %d samples, more than the %d writes made", c, most)
		}
		n += c
	}
}

// Connections that close leave no entry behind in tcp_stages: their last
// samples are reported, then the entry goes; every sample is in the trace.
func TestTCPStageForgetsClosedSockets(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	fam, _ := event.ByName("tcp_stage")
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	rec, err := Start(Options{Families: []*event.Family{fam}, Interval: 50 * time.Millisecond, Filter: probe.Filter{Port: port}})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	var out lockedBuffer
	w, err := trace.NewWriter(&out, Header("tcp_stage test"))
	if err != nil {
		t.Fatal(err)
	}
	stop, ran := make(chan struct{}), make(chan error, 1)
	go func() { _, err := rec.Run(w, stop); ran <- err }()

	const conns, writes = 40, 5
	buf := make([]byte, 100)
	for range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		for range writes {
			if _, err := c.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	time.Sleep(500 * time.Millisecond) // ten intervals: reported, then idle for one
	var k wire.TcpStageKey
	var v wire.TcpStageStats
	if err := rec.sess.Map(wire.MapTcpStages).LookupAndDelete(&k, &v); errors.Is(err, ebpf.ErrNotSupported) {
		t.Log("this kernel cannot take hash entries out atomically (before 5.14): tcp_stages keeps them")
	} else if n := mapLen[wire.TcpStageKey, wire.TcpStageStats](t, rec, wire.MapTcpStages); n != 0 {
		t.Errorf("tcp_stages holds %d entries after every socket closed and was reported", n)
	}
	close(stop)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	// Both ends write, the client each message and the echo each reply;
	// each message is acked by its reply, so none of the client's is missed.
	if got := stageSamples(t, out.snapshot(), 2*writes); got < conns*writes || got > 2*conns*writes {
		t.Errorf("the trace has %d sent samples, want from the client's %d writes to both ends' %d", got, conns*writes, 2*conns*writes)
	}
}

// A process that made socket calls and exited leaves no entry in sock_io.
func TestSockIOForgetsExitedProcesses(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	if os.Getenv("SKBTRACE_SOCKIO_CHILD") != "" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		for range 10 {
			_, _ = c.WriteTo([]byte("x"), c.LocalAddr())
			_, _, _ = c.ReadFrom(make([]byte, 8))
		}
		os.Exit(0)
	}
	fam, _ := event.ByName("sock_io")
	rec, err := Start(Options{Families: []*event.Family{fam}, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	w, err := trace.NewWriter(io.Discard, Header("sock_io test"))
	if err != nil {
		t.Fatal(err)
	}
	stop, ran := make(chan struct{}), make(chan error, 1)
	go func() { _, err := rec.Run(w, stop); ran <- err }()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSockIOForgetsExitedProcesses$")
	cmd.Env = append(os.Environ(), "SKBTRACE_SOCKIO_CHILD=1")
	if err := cmd.Run(); err != nil {
		t.Fatalf("running the child that makes socket calls: %v", err)
	}
	pid := uint32(cmd.Process.Pid)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	err = perCPU(rec.sess.Map(wire.MapSockIo), func(k wire.SockIoKey, _ []wire.SockIoStats) error {
		if k.Pid == pid {
			t.Errorf("sock_io keeps the entry of exited process %d", pid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
