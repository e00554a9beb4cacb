package collect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/trace"
)

// lockedBuffer is a trace written by Run's goroutine and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) snapshot() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// loopbackSkbs is how many skbs dev_recv counted on lo in a trace so far.
func loopbackSkbs(t *testing.T, data []byte) uint64 {
	t.Helper()
	r, err := trace.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	dec := event.NewDecoder(&r.Header)
	var ev event.Event
	var skbs uint64
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return skbs
		}
		if err != nil {
			t.Fatal(err)
		}
		if !event.IsEvent(rec.Type) || event.Type(rec.Type) != event.TypeDevRecv {
			continue
		}
		if ok, err := dec.Decode(rec, &ev); err != nil || !ok {
			t.Fatalf("decoding dev_recv: ok %v, %v", ok, err)
		}
		if string(event.CString(ev.Dev.Name[:])) == "lo" {
			skbs += ev.Dev.Skbs
		}
	}
}

// An agent answers for a window that ends now: Flush writes the counts an
// aggregated family holds before its interval ends.
func TestFlushWritesTheAggregatedCountsBeforeTheInterval(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	recv, _ := event.ByName("dev_recv")
	rec, err := Start(Options{Families: []*event.Family{recv}, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if err := rec.Flush(); err != nil {
		t.Fatalf("flush before Run: %v", err)
	}
	var out lockedBuffer
	w, err := trace.NewWriter(&out, Header("flush test"))
	if err != nil {
		t.Fatal(err)
	}
	stop, ran := make(chan struct{}), make(chan error, 1)
	go func() { _, err := rec.Run(w, stop); ran <- err }()

	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const datagrams = 200
	for range datagrams {
		if _, err := conn.WriteTo([]byte("skbtrace"), conn.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	// Flushed every 200 ms, the writer holds no count of the hour yet.
	time.Sleep(300 * time.Millisecond)
	if n := loopbackSkbs(t, out.snapshot()); n != 0 {
		t.Fatalf("dev_recv wrote %d skbs of lo before its interval ended: the test shows nothing", n)
	}
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := loopbackSkbs(t, out.snapshot()); n < datagrams {
		t.Errorf("after Flush the trace counts %d skbs received on lo, want at least the %d datagrams sent", n, datagrams)
	}
	close(stop)
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if err := rec.Flush(); err != nil {
		t.Fatalf("flush after Run: %v", err)
	}
}

// Sampled says what the recording samples, so that counts scale by what
// was done: the per-packet families at the share asked, the others never.
func TestSampledIsWhatTheRecordingSamples(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	recv, _ := event.ByName("dev_recv")
	conn, _ := event.ByName("tcp_conn")
	for _, c := range []struct {
		sample float64
		want   []string
		share  float64
	}{{DefaultSample, []string{"dev_recv"}, DefaultSample}, {1, nil, 1}} {
		rec, err := Start(Options{Families: []*event.Family{recv, conn}, Sample: c.sample})
		if err != nil {
			t.Fatal(err)
		}
		fams, share := rec.Sampled()
		rec.Close()
		if !slices.Equal(fams, c.want) || share != c.share {
			t.Errorf("sample %v: Sampled() = %v, %v; want %v, %v", c.sample, fams, share, c.want, c.share)
		}
	}
}
