package report

import (
	"encoding/json"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/analyze/timeline"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/wire"
)

var (
	statLocal = netip.MustParseAddrPort("10.0.0.1:40000")
	statPeer  = netip.MustParseAddrPort("10.0.0.2:5201")
)

func sendlim(end, begin int64, r event.SendlimReason, cwnd uint32, busy, sndbuf uint64) *event.Event {
	return &event.Event{Type: event.TypeTCPSendlim, Time: end, Begin: begin, Sendlim: event.TCPSendlim{
		Socket: event.Socket{Sock: 0xa, Local: statLocal, Peer: statPeer}, Reason: r, Begin: begin, Cnt: 1, Cwnd: cwnd,
		BusyUs: busy, SndbufLimitedUs: sndbuf}}
}

// A trace without tcp_rtt measured no bytes and no RTT: stat says "-" and
// null, never 0, and shows the window its send-limit runs carried.
func TestStatPrintsNotMeasuredAsADash(t *testing.T) {
	st, sum := analyze.NewStat(), analyze.NewSummary()
	st.Add(&event.Event{Type: event.TypeTCPConn, Time: 1, Conn: event.TCPConn{Socket: event.Socket{Sock: 0xa, Local: statLocal, Peer: statPeer}, New: event.TCPEstablished}})
	st.Add(sendlim(2_000_000, 1_000, event.SendlimCwnd, 10, 0, 0))
	st.Add(sendlim(3_000_000, 2_000_000, event.SendlimCwnd, 14, 0, 0))
	view := NewStatView(st, sum)
	var text strings.Builder
	if err := WriteStatText(&text, view); err != nil {
		t.Fatal(err)
	}
	row := ""
	for _, line := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(line, statLocal.String()) {
			row = line
		}
	}
	fields := strings.Fields(row)
	// local peer netns seconds bytes throughput limits... retrans rtt cwnd resets
	if len(fields) < 10 || fields[4] != "-" || fields[5] != "-" || fields[len(fields)-3] != "-/-/-" || fields[len(fields)-2] != "10-14" {
		t.Errorf("the connection's row prints what was not measured as a value, or lacks the window's range:\n%s", text.String())
	}
	b, err := json.Marshal(view.Connections[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"bytes_acked":null`, `"throughput_bytes_per_s":null`, `"min_rtt_us":null`, `"srtt_avg_us":null`, `"cwnd_min":10`, `"cwnd_max":14`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
}

// Both accounts' shares are of the longer span: skbtrace's sndbuf runs
// longer than tcp_info's busy time read 146 % over the kernel's.
func TestKernelAccountingSharesStayWithinTheirAccount(t *testing.T) {
	st, sum := analyze.NewStat(), analyze.NewSummary()
	st.Add(&event.Event{Type: event.TypeTCPConn, Time: 1, Conn: event.TCPConn{Socket: event.Socket{Sock: 0xa, Local: statLocal, Peer: statPeer}, New: event.TCPEstablished}})
	// 1.46 s of sndbuf runs against 1 s of the kernel's busy time.
	st.Add(sendlim(1_460_001_000, 1_000, event.SendlimSndbuf, 10, 1_000_000, 960_000))
	k := NewStatView(st, sum).Connections[0].Kernel
	if k == nil {
		t.Fatal("no kernel accounting")
	}
	for name, v := range map[string]float64{"rwnd": k.RwndShare, "skbtrace swnd": k.SwndShare, "sndbuf": k.SndbufShare, "skbtrace sndbuf": k.SkbSndbufShare} {
		if v < 0 || v > 1 {
			t.Errorf("%s share %.2f", name, v)
		}
	}
	if math.Abs(k.SkbSndbufShare-1) > 1e-6 || math.Abs(k.SndbufShare-0.96/1.46) > 1e-6 {
		t.Errorf("sndbuf shares %.3f (skbtrace) and %.3f (tcp_info), want 1 and 0.658 of the runs' 1.46 s", k.SkbSndbufShare, k.SndbufShare)
	}
}

// stat's page sets the flow's two ends side by side: the sender's namespace
// and the receiver's, found by the connection seen from the peer, never the
// host's namespace the flow did not cross.
func TestStatPagePairsTheFlowsEnds(t *testing.T) {
	st, sum := analyze.NewStat(), analyze.NewSummary()
	sum.Names.Netns[1], sum.Names.Netns[2] = "snd", "rcv"
	dev := func(name string) host.DeviceSettings { return host.DeviceSettings{Name: name, Kind: "veth", MTU: 1500} }
	sum.Settings = &host.Settings{Kernel: "6.18", Namespaces: []host.NetnsSettings{
		{Name: "host", Devices: []host.DeviceSettings{dev("eth0")}},
		{Name: "snd", Devices: []host.DeviceSettings{dev("veth0")}},
		{Name: "rcv", Devices: []host.DeviceSettings{dev("veth1")}},
	}}
	for _, c := range []struct {
		l, p  netip.AddrPort
		netns uint32
	}{{statLocal, statPeer, 1}, {statPeer, statLocal, 2}} {
		st.Add(&event.Event{Type: event.TypeTCPConn, Time: 1, Conn: event.TCPConn{Socket: event.Socket{Sock: uint64(c.netns), Local: c.l, Peer: c.p, Netns: c.netns}, New: event.TCPEstablished}})
	}
	tl := &timeline.Timeline{Flows: []*timeline.Flow{{Netns: "snd", Local: statLocal, Peer: statPeer}}}
	var page strings.Builder
	if err := WriteStatHTML(&page, sum, st, tl, "", ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "<th>netns snd</th><th>netns rcv</th>") || strings.Contains(page.String(), "<th>netns host</th>") {
		t.Errorf("the settings table does not set snd beside rcv alone")
	}
}

// stat --json writes the connections one at a time: the document is the
// one encoding the whole view gives, with no connection and with several;
// a view that makes its rows as they are written (NewStatViewRows) writes
// the same text and JSON as one that holds them.
func TestStatJSONStreamsTheWholeDocument(t *testing.T) {
	for n := range 3 {
		st, sum := analyze.NewStat(), analyze.NewSummary()
		for i := range n {
			peer := netip.AddrPortFrom(statPeer.Addr(), uint16(5201+i))
			sock := event.Socket{Sock: uint64(0xa + i), Local: statLocal, Peer: peer}
			st.Add(&event.Event{Type: event.TypeTCPConn, Time: 1, Conn: event.TCPConn{Socket: sock, New: event.TCPEstablished}})
			ev := sendlim(2_000_000, 1_000, event.SendlimCwnd, 10, 0, 0)
			ev.Sendlim.Sock, ev.Sendlim.Peer = uint64(0xa+i), peer
			st.Add(ev)
			cong := &event.Event{Type: event.TypeTCPCong, Time: 3_000_000, Socket: sock}
			cong.Cong.State = 2
			st.Add(cong)
			stage := &event.Event{Type: event.TypeTCPStage, Time: 4_000_000, Socket: sock, Stage: &wire.TcpStageEvent{}}
			for k := range stage.Stage.Stage {
				h := &stage.Stage.Stage[k]
				h.Count, h.SumNs, h.Hist[10+k] = 3, 3_000*uint64(k+1), 3
			}
			st.Add(stage)
		}
		rows := NewStatViewRows(st, sum)
		var rowsJSON, rowsText, text strings.Builder
		if err := WriteStatJSON(&rowsJSON, rows); err != nil {
			t.Fatal(err)
		}
		if err := WriteStatText(&rowsText, rows); err != nil {
			t.Fatal(err)
		}
		view := NewStatView(st, sum)
		if err := WriteStatText(&text, view); err != nil {
			t.Fatal(err)
		}
		if rows.Connections != nil || rowsText.String() != text.String() || n > 0 && !strings.Contains(text.String(), "TIME BY STAGE") {
			t.Errorf("%d connections: the text of the view of rows made as written:\n%s\nwant (with the stages):\n%s", n, rowsText.String(), text.String())
		}
		var whole, streamed strings.Builder
		enc := json.NewEncoder(&whole)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(view); err != nil {
			t.Fatal(err)
		}
		if err := WriteStatJSON(&streamed, view); err != nil {
			t.Fatal(err)
		}
		if len(view.Connections) != n || streamed.String() != whole.String() || rowsJSON.String() != whole.String() {
			t.Errorf("%d connections (want %d); streamed:\n%s\nrows made as written:\n%s\nwhole:\n%s", len(view.Connections), n, streamed.String(), rowsJSON.String(), whole.String())
		}
	}
}
