package cli

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/trace"
	"github.com/skbtrace/skbtrace/internal/tracetest"
	"github.com/skbtrace/skbtrace/internal/wire"
)

func name16(s string) (out [16]int8) {
	for i := 0; i < len(s) && i < 15; i++ {
		out[i] = int8(s[i])
	}
	return out
}

// catalogFixture has one event of every family after tcp_conn and
// tcp_sendlim, with the name tables a recording writes for them.
func catalogFixture(t *testing.T, o trace.ByteOrder) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := tracetest.NewWriter(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	const netns = 4026532000
	a := tracetest.Addrs(netip.MustParseAddrPort("10.200.0.1:40000"), netip.MustParseAddrPort("10.200.0.2:5201"), netns)
	hdr := func(seq uint64, ts uint64, cpu uint32, typ event.Type) wire.EventHeader {
		return wire.EventHeader{Seq: seq, TsNs: ts, Cpu: cpu, Type: uint16(typ)}
	}
	const sock = 0xffff888100001000
	must(w.AppendNetns(trace.Netns{Inode: netns, Name: "lab-snd"}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumDropReason, Names: map[uint32]string{2: "NOT_SPECIFIED", 23: "NETFILTER_DROP"}}))
	must(w.AppendEnum(trace.Enum{Kind: trace.EnumResetReason, Names: map[uint32]string{1: "NO_SOCKET"}}))
	must(w.AppendSymbol(trace.Symbol{Addr: 0xffffffff81a00010, Name: "nf_hook_slow+0x10"}))
	ev := func(typ event.Type, v any) { must(w.Event(uint16(typ), v)) }
	ev(event.TypeTCPCong, &wire.TcpCongEvent{Hdr: hdr(0, 1_000, 0, event.TypeTCPCong), Sock: sock, Addrs: a,
		Cwnd: 20, Ssthresh: 14, SndNxt: 5000, SndUna: 3000, RtoUs: 204000, State: 3})
	ev(event.TypeTCPRTT, &wire.TcpRttEvent{Hdr: hdr(1, 2_000, 1, event.TypeTCPRTT), Sock: sock, Addrs: a,
		SrttUs: 120, RttvarUs: 30, MinRttUs: 80, Cwnd: 20, Ssthresh: 14, InFlight: 18, SndWnd: 65536, RcvWnd: 65536,
		DeliveryRate: 125_000_000, BytesAcked: 1_000_000})
	ev(event.TypeTCPRTT, &wire.TcpRttEvent{Hdr: hdr(2, 1_000_002_000, 1, event.TypeTCPRTT), Sock: sock, Addrs: a,
		SrttUs: 200, RttvarUs: 40, MinRttUs: 80, Cwnd: 30, Ssthresh: 14, InFlight: 28, SndWnd: 65536, RcvWnd: 65536,
		DeliveryRate: 125_000_000, BytesAcked: 126_000_000})
	ev(event.TypeTCPRetrans, &wire.TcpRetransEvent{Hdr: hdr(3, 1_000_003_000, 0, event.TypeTCPRetrans), Sock: sock,
		BeginNs: 500_000_000, Addrs: a, Cnt: 7, Skbs: 3, State: 1})
	ev(event.TypeTCPReset, &wire.TcpResetEvent{Hdr: hdr(4, 1_000_004_000, 0, event.TypeTCPReset), Addrs: a, Reason: 1, Path: 3})
	ev(event.TypeTCPRcvbuf, &wire.TcpRcvbufEvent{Hdr: hdr(5, 1_000_005_000, 1, event.TypeTCPRcvbuf), Sock: sock, Addrs: a,
		Rcvbuf: 262144, OldRcvbuf: 131072, RcvSpace: 65536, WindowClamp: 3145728, RcvWnd: 131072, RmemAlloc: 4096})
	ev(event.TypeSkLimit, &wire.SkLimitEvent{Hdr: hdr(6, 1_000_006_000, 0, event.TypeSkLimit), BeginNs: 0, Sock: sock, Addrs: a, Cnt: 5, Kind: 2})
	ev(event.TypeSkbDrop, &wire.SkbDropEvent{Hdr: hdr(7, 1_000_007_000, 0, event.TypeSkbDrop), BeginNs: 100, Location: 0xffffffff81a00010,
		Dev: name16("skbr1"), Ifindex: 2, Netns: netns, Reason: 23, Protocol: 0x0800, L4proto: 6, Cnt: 12, Addrs: a})
	ev(event.TypeDevXmit, &wire.DevEvent{Hdr: hdr(8, 1_000_008_000, 0, event.TypeDevXmit), BeginNs: 8_000, Name: name16("skbs1"),
		Ifindex: 2, Netns: netns, Skbs: 100, Bytes: 4_000_000, Segs: 3000, MaxBytes: 65226, Hist: [8]uint64{10, 0, 0, 0, 0, 90}})
	ev(event.TypeDevRecv, &wire.DevEvent{Hdr: hdr(9, 1_000_008_000, 0, event.TypeDevRecv), BeginNs: 8_000, Name: name16("skbs1"),
		Ifindex: 2, Netns: netns, Skbs: 50, Bytes: 3000, Segs: 50, GroIn: 50, MaxBytes: 66, Hist: [8]uint64{50}})
	ev(event.TypeNapiPoll, &wire.NapiEvent{Hdr: hdr(10, 1_000_008_000, 1, event.TypeNapiPoll), BeginNs: 8_000, Name: name16("backlog"),
		Polls: 40, Work: 45, Exhausted: 1, Budget: 64})
	ev(event.TypeSoftirq, &wire.SoftirqEvent{Hdr: hdr(11, 1_000_008_000, 1, event.TypeSoftirq), BeginNs: 8_000, Entries: 41, TimeNs: 250_000_000, Vec: 3})
	ev(event.TypeQdisc, &wire.QdiscEvent{Hdr: hdr(12, 1_000_008_000, 0, event.TypeQdisc), BeginNs: 8_000, Dev: name16("skbs1"), Kind: name16("tbf"),
		Ifindex: 2, Netns: netns, Handle: 0x80010000, Parent: 0xffffffff, Enqueues: 90, Dequeues: 80, Drops: 10, BacklogMax: 65000, QlenMax: 44, Backlog: 1500, Qlen: 1})
	ev(event.TypeSockIO, &wire.SockIoEvent{Hdr: hdr(13, 1_000_008_000, 0, event.TypeSockIO), BeginNs: 8_000, Pid: 4242, Dir: 0, Comm: name16("iperf3"),
		Calls: 3, Bytes: 393216, Hist: [20]uint64{17: 3}})
	ev(event.TypeQdiscDelay, &wire.QdiscDelayEvent{Hdr: hdr(14, 1_000_008_000, 0, event.TypeQdiscDelay), BeginNs: 8_000, Dev: name16("skbs1"), Kind: name16("tbf"),
		Ifindex: 2, Netns: netns, Handle: 0x80010000, Parent: 0xffffffff, Packets: 80, Unstamped: 3, SumNs: 80 * 38_000_000, MaxNs: 41_000_000,
		Hist: [96]uint64{56: 60, 57: 20}})
	stages := [wire.TcpStageSTAGE_MAX]wire.StageHist{{Count: 10, SumNs: 10 * 2_000}, {Count: 10, SumNs: 10 * 6_000_000}, {Count: 10, SumNs: 10 * 1_000},
		{Count: 10, SumNs: 10 * 45_000}, {Count: 4, SumNs: 4 * 30_000}, {Count: 4, SumNs: 4 * 9_000_000}}
	stages[0].Hist[2], stages[1].Hist[83], stages[2].Hist[1], stages[3].Hist[27], stages[4].Hist[25], stages[5].Hist[86] = 10, 10, 10, 10, 4, 4
	ev(event.TypeTCPStage, &wire.TcpStageEvent{Hdr: hdr(15, 1_000_008_000, 0, event.TypeTCPStage), BeginNs: 8_000, Sock: sock, Addrs: a, Stage: stages})
	must(w.AppendEnd(trace.End{NextSeq: 16, BootNs: 1_000_009_000}))
	must(w.Flush())
	return buf.Bytes()
}

func TestCatalogFixtureBothByteOrders(t *testing.T) {
	for _, c := range []struct {
		file  string
		order trace.ByteOrder
	}{{"catalog-le.trace", binary.LittleEndian}, {"catalog-be.trace", binary.BigEndian}} {
		data := catalogFixture(t, c.order)
		golden(t, c.file, data)
		for _, asJSON := range []bool{false, true} {
			var out, errs bytes.Buffer
			if err := parseTrace(bytes.NewReader(data), &out, &errs, &event.Filter{}, asJSON); err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			name := "catalog.txt"
			if asJSON {
				name = "catalog.jsonl"
			}
			golden(t, name, out.Bytes())
		}
		var out, errs bytes.Buffer
		if code := Main([]string{"stat", "-i", "-"}, bytes.NewReader(data), &out, &errs); code != 0 {
			t.Fatalf("stat: exit %d: %s", code, errs.String())
		}
		golden(t, "catalog-stat.txt", out.Bytes())
	}
}

func TestStatJSONFromCatalogFixture(t *testing.T) {
	var out, errs bytes.Buffer
	if code := Main([]string{"stat", "--json", "-i", "-"}, bytes.NewReader(catalogFixture(t, binary.LittleEndian)), &out, &errs); code != 0 {
		t.Fatalf("stat --json: exit %d: %s", code, errs.String())
	}
	for _, want := range []string{
		`"throughput_bytes_per_s": 125000000`, // 125 MB acked between samples one second apart
		`"retrans_segs": 7`, `"xmit_segs_per_skb": 30`, `"reason": "NETFILTER_DROP"`, `"location": "nf_hook_slow+0x10"`,
		`"min_rtt_us": 80`, `"cwnd_max": 30`, `"Recovery": 1`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stat --json lacks %s:\n%s", want, out.String())
		}
	}
}
