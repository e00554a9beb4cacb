package perfetto

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// A socket reused for a new connection to the same peer (a state change
// from CLOSE) is a new thread; the old one's counters end, and the
// exporter forgets it: a thousand lives of one socket keep one connection.
func TestNewLifeIsANewThread(t *testing.T) {
	var out bytes.Buffer
	x := New(&out, analyze.NewSummary())
	sock := event.Socket{Sock: sndSock, Local: sndAddr, Peer: rcvAddr, Netns: sndNs}
	const lives = 1000
	for life := range int64(lives) {
		at := wall + life*10*ms
		for _, ev := range []*event.Event{
			{Type: event.TypeTCPConn, Time: at, Conn: event.TCPConn{Socket: sock, Old: tcpClose, New: 2}},
			{Type: event.TypeTCPRTT, Time: at + ms, Socket: sock, RTT: wire.TcpRttEvent{SrttUs: 100, Cwnd: 10}},
			{Type: event.TypeTCPRTT, Time: at + 2*ms, Socket: sock, RTT: wire.TcpRttEvent{SrttUs: 100, Cwnd: 10, BytesAcked: 1000}},
			{Type: event.TypeTCPConn, Time: at + 3*ms, Conn: event.TCPConn{Socket: sock, Old: 1, New: tcpClose}},
		} {
			if err := x.Add(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(x.conns) != 1 || len(x.connList) > 2 || len(x.byAddrs) != 1 {
		t.Errorf("%d connections, %d listed, %d by address held after %d lives of one socket; want 1, at most 2, 1",
			len(x.conns), len(x.connList), len(x.byAddrs), lives)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Ph   string
			Name string
			Tid  uint32
			Args map[string]any
		}
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	threads, zeros := map[uint32]bool{}, 0
	for _, e := range doc.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			threads[e.Tid] = true
		}
		if e.Ph == "C" && e.Args["bit/s"] == 0.0 {
			zeros++
		}
	}
	if len(threads) != lives || zeros != lives {
		t.Errorf("%d threads, %d acked rates ended; want %d of each", len(threads), zeros, lives)
	}
}
