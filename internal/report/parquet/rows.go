package parquet

import (
	"net/netip"
	"strconv"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/wire"
)

// Integers are written as signed 64-bit columns whatever their kernel width:
// SQL engines then subtract and sum them without unsigned overflow errors,
// and every engine reads them.

// meta is the recording's header, on every row of every table.
type meta struct {
	Host           string `parquet:"host,dict"`
	Kernel         string `parquet:"kernel,dict"`
	Machine        string `parquet:"machine,dict"`
	Tool           string `parquet:"tool,dict"`
	Command        string `parquet:"command,dict"`
	RecordingStart int64  `parquet:"recording_start,timestamp(nanosecond)"`
}

func metaOf(sum *analyze.Summary) meta {
	h := &sum.Header
	return meta{Host: h.Hostname, Kernel: h.Kernel, Machine: h.Machine, Tool: h.Tool, Command: h.Command,
		RecordingStart: h.WallAnchorNs}
}

// common are the columns of every event table.
type common struct {
	meta
	Seq    int64 `parquet:"seq,delta"`
	TimeNs int64 `parquet:"time_ns,delta"`
	CPU    int64 `parquet:"cpu"`
}

// sockCols identify the socket of the TCP families.
type sockCols struct {
	Sock        string `parquet:"sock,dict"`
	Local       string `parquet:"local,dict"`
	Peer        string `parquet:"peer,dict"`
	Netns       int64  `parquet:"netns"`
	NetnsName   string `parquet:"netns_name,dict"`
	NetnsByAddr bool   `parquet:"netns_by_addr"`
}

// devCols identify the device of the device families.
type devCols struct {
	Dev       string `parquet:"dev,dict"`
	Ifindex   int64  `parquet:"ifindex"`
	Netns     int64  `parquet:"netns"`
	NetnsName string `parquet:"netns_name,dict"`
}

type tcpConnRow struct {
	common
	sockCols
	State   string `parquet:"state,dict"`
	From    string `parquet:"from,dict"`
	Err     string `parquet:"err,dict"`
	Context string `parquet:"context,dict"`
	Pid     int64  `parquet:"pid"`
	Comm    string `parquet:"comm,dict"`
}

type tcpSendlimRow struct {
	common
	sockCols
	Reason                string `parquet:"reason,dict"`
	BeginNs               int64  `parquet:"begin_ns,delta"`
	Cnt                   int64  `parquet:"cnt"`
	SentPkts              int64  `parquet:"sent_pkts"`
	Cwnd                  int64  `parquet:"cwnd"`
	Ssthresh              int64  `parquet:"ssthresh"`
	InFlight              int64  `parquet:"inflight"`
	SndWnd                int64  `parquet:"snd_wnd"`
	MSS                   int64  `parquet:"mss"`
	Unsent                int64  `parquet:"unsent"`
	WmemQueued            int64  `parquet:"wmem_queued"`
	Sndbuf                int64  `parquet:"sndbuf"`
	Probes                int64  `parquet:"probes"`
	Backoff               int64  `parquet:"backoff"`
	KernelBusyUs          int64  `parquet:"kernel_busy_us"`
	KernelRwndLimitedUs   int64  `parquet:"kernel_rwnd_limited_us"`
	KernelSndbufLimitedUs int64  `parquet:"kernel_sndbuf_limited_us"`
}

type tcpCongRow struct {
	common
	sockCols
	State    string `parquet:"state,dict"`
	Cwnd     int64  `parquet:"cwnd"`
	Ssthresh int64  `parquet:"ssthresh"`
	SndNxt   int64  `parquet:"snd_nxt"`
	SndUna   int64  `parquet:"snd_una"`
	RtoUs    int64  `parquet:"rto_us"`
}

type tcpRetransRow struct {
	common
	sockCols
	State   string `parquet:"state,dict"`
	BeginNs int64  `parquet:"begin_ns"`
	Cnt     int64  `parquet:"cnt"`
	Skbs    int64  `parquet:"skbs"`
}

type tcpRTTRow struct {
	common
	sockCols
	SrttUs        int64 `parquet:"srtt_us"`
	RttvarUs      int64 `parquet:"rttvar_us"`
	MinRttUs      int64 `parquet:"min_rtt_us"`
	Cwnd          int64 `parquet:"cwnd"`
	Ssthresh      int64 `parquet:"ssthresh"`
	InFlight      int64 `parquet:"inflight"`
	SndWnd        int64 `parquet:"snd_wnd"`
	RcvWnd        int64 `parquet:"rcv_wnd"`
	DeliveryRate  int64 `parquet:"delivery_rate"`
	BytesAcked    int64 `parquet:"bytes_acked"`
	BytesReceived int64 `parquet:"bytes_received"`
}

type tcpResetRow struct {
	common
	sockCols
	Dir    string `parquet:"dir,dict"`
	State  string `parquet:"state,dict"`
	Path   string `parquet:"path,dict"`
	Reason string `parquet:"reason,dict"`
}

type tcpRcvbufRow struct {
	common
	sockCols
	Rcvbuf      int64 `parquet:"rcvbuf"`
	OldRcvbuf   int64 `parquet:"old_rcvbuf"`
	RcvSpace    int64 `parquet:"rcv_space"`
	WindowClamp int64 `parquet:"window_clamp"`
	RcvWnd      int64 `parquet:"rcv_wnd"`
	RmemAlloc   int64 `parquet:"rmem_alloc"`
}

type skLimitRow struct {
	common
	sockCols
	Kind    string `parquet:"kind,dict"`
	BeginNs int64  `parquet:"begin_ns"`
	Cnt     int64  `parquet:"cnt"`
}

type skbDropRow struct {
	common
	devCols
	NetnsByAddr bool   `parquet:"netns_by_addr"`
	Reason      string `parquet:"reason,dict"`
	Location    string `parquet:"location,dict"`
	Protocol    string `parquet:"protocol,dict"`
	Src         string `parquet:"src,dict"`
	Dst         string `parquet:"dst,dict"`
	BeginNs     int64  `parquet:"begin_ns"`
	Cnt         int64  `parquet:"cnt"`
}

// devRow is dev_xmit's and dev_recv's: errors count at transmit only,
// gro_in at receive only.
type devRow struct {
	common
	devCols
	BeginNs  int64   `parquet:"begin_ns"`
	Skbs     int64   `parquet:"skbs"`
	Bytes    int64   `parquet:"bytes"`
	Segs     int64   `parquet:"segs"`
	Errors   int64   `parquet:"errors"`
	GroIn    int64   `parquet:"gro_in"`
	MaxBytes int64   `parquet:"max_bytes"`
	SegsHist []int64 `parquet:"segs_hist,list"`
	// hist backs SegsHist, so a row costs no allocation.
	hist [8]int64
}

type napiRow struct {
	common
	devCols
	BeginNs   int64 `parquet:"begin_ns"`
	Polls     int64 `parquet:"polls"`
	Work      int64 `parquet:"work"`
	Exhausted int64 `parquet:"exhausted"`
	Budget    int64 `parquet:"budget"`
}

type softirqRow struct {
	common
	Vec     string `parquet:"vec,dict"`
	BeginNs int64  `parquet:"begin_ns"`
	Entries int64  `parquet:"entries"`
	// BusyNs is the softirq's run time; the event's own time_ns is taken.
	BusyNs int64 `parquet:"busy_ns"`
}

// qdiscCols name a qdisc as tc prints it, after its device's columns.
type qdiscCols struct {
	Kind   string `parquet:"kind,dict"`
	Handle string `parquet:"handle,dict"`
	Parent string `parquet:"parent,dict"`
}

type qdiscRow struct {
	common
	devCols
	qdiscCols
	BeginNs    int64 `parquet:"begin_ns"`
	Enqueues   int64 `parquet:"enqueues"`
	Dequeues   int64 `parquet:"dequeues"`
	Drops      int64 `parquet:"drops"`
	Requeues   int64 `parquet:"requeues"`
	Overlimits int64 `parquet:"overlimits"`
	BacklogMax int64 `parquet:"backlog_max"`
	QlenMax    int64 `parquet:"qlen_max"`
	Backlog    int64 `parquet:"backlog"`
	Qlen       int64 `parquet:"qlen"`
}

type sockIORow struct {
	common
	Dir      string    `parquet:"dir,dict"`
	Pid      int64     `parquet:"pid"`
	Comm     string    `parquet:"comm,dict"`
	BeginNs  int64     `parquet:"begin_ns"`
	Calls    int64     `parquet:"calls"`
	Bytes    int64     `parquet:"bytes"`
	Errors   int64     `parquet:"errors"`
	SizeHist []int64   `parquet:"size_hist,list"`
	hist     [20]int64 // backs SizeHist
}

type qdiscDelayRow struct {
	common
	devCols
	qdiscCols
	BeginNs   int64     `parquet:"begin_ns"`
	Packets   int64     `parquet:"packets"`
	Unstamped int64     `parquet:"unstamped"`
	SumNs     int64     `parquet:"sum_ns"`
	MaxNs     int64     `parquet:"max_ns"`
	DelayHist []int64   `parquet:"delay_hist,list"`
	hist      [96]int64 // backs DelayHist
}

// tcpStageRow is one socket's interval of tcp_stage: per stage, the bytes
// timed, their total wait and its histogram (192 buckets, eighths of each
// power of two of microseconds).
type tcpStageRow struct {
	common
	sockCols
	BeginNs        int64                                                             `parquet:"begin_ns"`
	SendQueueCount int64                                                             `parquet:"send_queue_count"`
	SendQueueSumNs int64                                                             `parquet:"send_queue_sum_ns"`
	SendQueueHist  []int64                                                           `parquet:"send_queue_hist,list"`
	QdiscCount     int64                                                             `parquet:"qdisc_count"`
	QdiscSumNs     int64                                                             `parquet:"qdisc_sum_ns"`
	QdiscHist      []int64                                                           `parquet:"qdisc_hist,list"`
	DriverCount    int64                                                             `parquet:"driver_count"`
	DriverSumNs    int64                                                             `parquet:"driver_sum_ns"`
	DriverHist     []int64                                                           `parquet:"driver_hist,list"`
	AckCount       int64                                                             `parquet:"ack_count"`
	AckSumNs       int64                                                             `parquet:"ack_sum_ns"`
	AckHist        []int64                                                           `parquet:"ack_hist,list"`
	RxStackCount   int64                                                             `parquet:"rx_stack_count"`
	RxStackSumNs   int64                                                             `parquet:"rx_stack_sum_ns"`
	RxStackHist    []int64                                                           `parquet:"rx_stack_hist,list"`
	RxQueueCount   int64                                                             `parquet:"rx_queue_count"`
	RxQueueSumNs   int64                                                             `parquet:"rx_queue_sum_ns"`
	RxQueueHist    []int64                                                           `parquet:"rx_queue_hist,list"`
	hist           [wire.TcpStageSTAGE_MAX][wire.HistogramBucketsSTAGE_BUCKETS]int64 // backs the histograms
}

// addRow appends ev to its family's table.
func (x *Exporter) addRow(ev *event.Event) error {
	switch ev.Type {
	case event.TypeTCPConn:
		r, err := slot(x, &x.conn, ev.Type)
		if err != nil {
			return err
		}
		c := &ev.Conn
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &c.Socket)
		r.State, r.From, r.Context = c.New.String(), c.Old.String(), c.Context.String()
		if c.Err != 0 {
			r.Err = event.Errno(c.Err)
		}
		if c.Context == event.ContextTask {
			r.Pid, r.Comm = int64(c.Pid), x.str.comm(&c.Comm)
		}
	case event.TypeTCPSendlim:
		r, err := slot(x, &x.sendlim, ev.Type)
		if err != nil {
			return err
		}
		s := &ev.Sendlim
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &s.Socket)
		r.Reason, r.BeginNs = s.Reason.String(), s.Begin
		r.Cnt, r.SentPkts, r.Cwnd, r.Ssthresh = int64(s.Cnt), int64(s.SentPkts), int64(s.Cwnd), int64(s.Ssthresh)
		r.InFlight, r.SndWnd, r.MSS, r.Unsent = int64(s.InFlight), int64(s.SndWnd), int64(s.MSS), int64(s.Unsent)
		r.WmemQueued, r.Sndbuf, r.Probes, r.Backoff = int64(s.WmemQueued), int64(s.Sndbuf), int64(s.Probes), int64(s.Backoff)
		r.KernelBusyUs, r.KernelRwndLimitedUs, r.KernelSndbufLimitedUs = int64(s.BusyUs), int64(s.RwndLimitedUs), int64(s.SndbufLimitedUs)
	case event.TypeTCPCong:
		r, err := slot(x, &x.cong, ev.Type)
		if err != nil {
			return err
		}
		c := &ev.Cong
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.State = event.TCPCaState(c.State).String()
		r.Cwnd, r.Ssthresh, r.SndNxt, r.SndUna, r.RtoUs = int64(c.Cwnd), int64(c.Ssthresh), int64(c.SndNxt), int64(c.SndUna), int64(c.RtoUs)
	case event.TypeTCPRetrans:
		r, err := slot(x, &x.retrans, ev.Type)
		if err != nil {
			return err
		}
		t := &ev.Retrans
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.State, r.BeginNs, r.Cnt, r.Skbs = event.TCPState(t.State).String(), ev.Begin, int64(t.Cnt), int64(t.Skbs)
	case event.TypeTCPRTT:
		r, err := slot(x, &x.rtt, ev.Type)
		if err != nil {
			return err
		}
		t := &ev.RTT
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.SrttUs, r.RttvarUs, r.MinRttUs = int64(t.SrttUs), int64(t.RttvarUs), int64(t.MinRttUs)
		r.Cwnd, r.Ssthresh, r.InFlight = int64(t.Cwnd), int64(t.Ssthresh), int64(t.InFlight)
		r.SndWnd, r.RcvWnd, r.DeliveryRate = int64(t.SndWnd), int64(t.RcvWnd), int64(t.DeliveryRate)
		r.BytesAcked, r.BytesReceived = int64(t.BytesAcked), int64(t.BytesReceived)
	case event.TypeTCPReset:
		r, err := slot(x, &x.reset, ev.Type)
		if err != nil {
			return err
		}
		t := &ev.Reset
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.Dir = event.ResetDir(t.Dir)
		if t.Sock != 0 {
			// A reset for no socket has no state of its own.
			r.State = event.TCPState(t.State).String()
		}
		if t.Dir == event.ResetSent {
			// The kernel gives reasons for the resets it sends only.
			r.Reason = enumName(x.sum.Names.ResetReasons, t.Reason)
		}
		r.Path = event.ResetPathOf(t, r.Reason).String()
	case event.TypeTCPRcvbuf:
		r, err := slot(x, &x.rcvbuf, ev.Type)
		if err != nil {
			return err
		}
		t := &ev.Rcvbuf
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.Rcvbuf, r.OldRcvbuf, r.RcvSpace = int64(t.Rcvbuf), int64(t.OldRcvbuf), int64(t.RcvSpace)
		r.WindowClamp, r.RcvWnd, r.RmemAlloc = int64(t.WindowClamp), int64(t.RcvWnd), int64(t.RmemAlloc)
	case event.TypeSkLimit:
		r, err := slot(x, &x.skLimit, ev.Type)
		if err != nil {
			return err
		}
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.Kind, r.BeginNs, r.Cnt = event.SkLimitKind(ev.SkLimit.Kind), ev.Begin, int64(ev.SkLimit.Cnt)
	case event.TypeSkbDrop:
		r, err := slot(x, &x.drop, ev.Type)
		if err != nil {
			return err
		}
		d := &ev.Drop
		x.fillCommon(&r.common, ev)
		x.fillDev(&r.devCols, &d.Dev, d.Ifindex, d.Netns)
		r.NetnsByAddr = ev.Socket.NetnsByAddr
		r.Reason = enumName(x.sum.Names.DropReasons, d.Reason)
		r.Location = x.location(d.Location)
		r.Protocol = event.ProtocolName(d.Protocol, d.L4proto)
		if ev.Socket.Local.Addr().IsValid() {
			// A dropped packet may be inbound or outbound: its own source and destination.
			r.Src, r.Dst = x.str.addr(ev.Socket.Local), x.str.addr(ev.Socket.Peer)
		}
		r.BeginNs, r.Cnt = ev.Begin, int64(d.Cnt)
	case event.TypeDevXmit, event.TypeDevRecv:
		t := &x.xmit
		if ev.Type == event.TypeDevRecv {
			t = &x.recv
		}
		r, err := slot(x, t, ev.Type)
		if err != nil {
			return err
		}
		d := &ev.Dev
		x.fillCommon(&r.common, ev)
		x.fillDev(&r.devCols, &d.Name, d.Ifindex, d.Netns)
		r.BeginNs, r.Skbs, r.Bytes, r.Segs = ev.Begin, int64(d.Skbs), int64(d.Bytes), int64(d.Segs)
		r.Errors, r.GroIn, r.MaxBytes = int64(d.Errors), int64(d.GroIn), int64(d.MaxBytes)
		for i, n := range d.Hist {
			r.hist[i] = int64(n)
		}
		r.SegsHist = r.hist[:]
	case event.TypeNapiPoll:
		r, err := slot(x, &x.napi, ev.Type)
		if err != nil {
			return err
		}
		n := &ev.Napi
		x.fillCommon(&r.common, ev)
		x.fillDev(&r.devCols, &n.Name, n.Ifindex, n.Netns)
		r.BeginNs, r.Polls, r.Work = ev.Begin, int64(n.Polls), int64(n.Work)
		r.Exhausted, r.Budget = int64(n.Exhausted), int64(n.Budget)
	case event.TypeSoftirq:
		r, err := slot(x, &x.softirq, ev.Type)
		if err != nil {
			return err
		}
		s := &ev.Softirq
		x.fillCommon(&r.common, ev)
		r.Vec, r.BeginNs, r.Entries, r.BusyNs = event.SoftirqVec(s.Vec), ev.Begin, int64(s.Entries), int64(s.TimeNs)
	case event.TypeQdisc:
		r, err := slot(x, &x.qdisc, ev.Type)
		if err != nil {
			return err
		}
		q := &ev.Qdisc
		x.fillCommon(&r.common, ev)
		x.fillQdisc(&r.devCols, &r.qdiscCols, &q.Dev, &q.Kind, q.Ifindex, q.Netns, q.Handle, q.Parent)
		r.BeginNs, r.Enqueues, r.Dequeues, r.Drops = ev.Begin, int64(q.Enqueues), int64(q.Dequeues), int64(q.Drops)
		r.Requeues, r.Overlimits, r.BacklogMax = int64(q.Requeues), int64(q.Overlimits), int64(q.BacklogMax)
		r.QlenMax, r.Backlog, r.Qlen = int64(q.QlenMax), int64(q.Backlog), int64(q.Qlen)
	case event.TypeSockIO:
		r, err := slot(x, &x.sockIO, ev.Type)
		if err != nil {
			return err
		}
		s := &ev.SockIO
		x.fillCommon(&r.common, ev)
		r.Dir, r.Pid, r.Comm = event.SockIODir(s.Dir), int64(s.Pid), x.str.name(&s.Comm)
		r.BeginNs, r.Calls, r.Bytes, r.Errors = ev.Begin, int64(s.Calls), int64(s.Bytes), int64(s.Errors)
		for i, n := range s.Hist {
			r.hist[i] = int64(n)
		}
		r.SizeHist = r.hist[:]
	case event.TypeQdiscDelay:
		r, err := slot(x, &x.qdiscDelay, ev.Type)
		if err != nil {
			return err
		}
		q := &ev.QdiscDelay
		x.fillCommon(&r.common, ev)
		x.fillQdisc(&r.devCols, &r.qdiscCols, &q.Dev, &q.Kind, q.Ifindex, q.Netns, q.Handle, q.Parent)
		r.BeginNs, r.Packets, r.Unstamped = ev.Begin, int64(q.Packets), int64(q.Unstamped)
		r.SumNs, r.MaxNs = int64(q.SumNs), int64(q.MaxNs)
		for i, n := range q.Hist {
			r.hist[i] = int64(n)
		}
		r.DelayHist = r.hist[:]
	case event.TypeTCPStage:
		r, err := slot(x, &x.stage, ev.Type)
		if err != nil {
			return err
		}
		x.fillCommon(&r.common, ev)
		x.fillSock(&r.sockCols, &ev.Socket)
		r.BeginNs = ev.Begin
		cols := [wire.TcpStageSTAGE_MAX]struct {
			count, sum *int64
			hist       *[]int64
		}{{&r.SendQueueCount, &r.SendQueueSumNs, &r.SendQueueHist}, {&r.QdiscCount, &r.QdiscSumNs, &r.QdiscHist},
			{&r.DriverCount, &r.DriverSumNs, &r.DriverHist}, {&r.AckCount, &r.AckSumNs, &r.AckHist},
			{&r.RxStackCount, &r.RxStackSumNs, &r.RxStackHist}, {&r.RxQueueCount, &r.RxQueueSumNs, &r.RxQueueHist}}
		for i, c := range cols {
			h := &ev.Stage.Stage[i]
			*c.count, *c.sum = int64(h.Count), int64(h.SumNs)
			for k, n := range h.Hist {
				r.hist[i][k] = int64(n)
			}
			*c.hist = r.hist[i][:]
		}
	}
	return nil
}

func (x *Exporter) fillQdisc(d *devCols, c *qdiscCols, dev, kind *[16]int8, ifindex, netns, handle, parent uint32) {
	x.fillDev(d, dev, ifindex, netns)
	c.Kind, c.Handle, c.Parent = x.str.name(kind), event.QdiscHandle(handle), event.QdiscHandle(parent)
}

func (x *Exporter) fillCommon(c *common, ev *event.Event) {
	c.meta = x.meta
	c.Seq, c.TimeNs, c.CPU = int64(ev.Seq), ev.Time, int64(ev.CPU)
}

// fillSock names the namespace as far as the trace has named it by now: a
// recording writes a namespace's name before the first event in it.
func (x *Exporter) fillSock(c *sockCols, s *event.Socket) {
	c.Sock, c.Local, c.Peer = x.str.hex(s.Sock), x.str.addr(s.Local), x.str.addr(s.Peer)
	c.Netns, c.NetnsName, c.NetnsByAddr = int64(s.Netns), x.sum.Names.NetnsName(s.Netns), s.NetnsByAddr
}

func (x *Exporter) fillDev(c *devCols, name *[16]int8, ifindex, netns uint32) {
	c.Dev, c.Ifindex, c.Netns, c.NetnsName = x.str.name(name), int64(ifindex), int64(netns), x.sum.Names.NetnsName(netns)
}

// location is a drop location's symbol, or its address where the trace has none.
func (x *Exporter) location(addr uint64) string {
	if s := x.sum.Names.Symbol(addr); s != "" {
		return s
	}
	return x.str.hex(addr)
}

// enumName is a kernel enum value's name in the recording kernel, or its number.
func enumName(names map[uint32]string, v uint32) string {
	if n, ok := names[v]; ok && n != "" {
		return n
	}
	return strconv.FormatUint(uint64(v), 10)
}

// strCache keeps the strings of addresses, sockets and names that recur on
// every row, so a row costs no allocation once its values have been seen.
type strCache struct {
	addrs map[netip.AddrPort]string
	hexes map[uint64]string
	names map[[16]int8]string
}

// maxCached bounds each map; a trace with more distinct values starts over.
const maxCached = 1 << 16

func newStrCache() strCache {
	return strCache{addrs: map[netip.AddrPort]string{}, hexes: map[uint64]string{}, names: map[[16]int8]string{}}
}

func (c *strCache) addr(a netip.AddrPort) string {
	if s, ok := c.addrs[a]; ok {
		return s
	}
	return store(c.addrs, a, a.String())
}

func (c *strCache) hex(v uint64) string {
	if s, ok := c.hexes[v]; ok {
		return s
	}
	return store(c.hexes, v, "0x"+strconv.FormatUint(v, 16))
}

func (c *strCache) name(n *[16]int8) string {
	if s, ok := c.names[*n]; ok {
		return s
	}
	return store(c.names, *n, string(event.CString(n[:])))
}

// comm is tcp_conn's command name, which the decoder keeps as bytes.
func (c *strCache) comm(b *[16]byte) string {
	var n [16]int8
	for i, v := range b {
		n[i] = int8(v)
	}
	return c.name(&n)
}

func store[K comparable](m map[K]string, k K, s string) string {
	if len(m) >= maxCached {
		clear(m)
	}
	m[k] = s
	return s
}
