package event

import (
	"strconv"
	"syscall"

	"net/netip"
	"unsafe"

	"github.com/skbtrace/skbtrace/internal/wire"
	"golang.org/x/sys/unix"
)

// Type is the kind of a kernel event; its values are enum event_type.
type Type uint16

// Event types.
const (
	TypeTCPConn    = Type(wire.EventTypeEVENT_TCP_CONN)
	TypeTCPSendlim = Type(wire.EventTypeEVENT_TCP_SENDLIM)
	TypeTCPCong    = Type(wire.EventTypeEVENT_TCP_CONG)
	TypeTCPRetrans = Type(wire.EventTypeEVENT_TCP_RETRANS)
	TypeTCPRTT     = Type(wire.EventTypeEVENT_TCP_RTT)
	TypeTCPReset   = Type(wire.EventTypeEVENT_TCP_RESET)
	TypeTCPRcvbuf  = Type(wire.EventTypeEVENT_TCP_RCVBUF)
	TypeSkLimit    = Type(wire.EventTypeEVENT_SK_LIMIT)
	TypeSkbDrop    = Type(wire.EventTypeEVENT_SKB_DROP)
	TypeDevXmit    = Type(wire.EventTypeEVENT_DEV_XMIT)
	TypeDevRecv    = Type(wire.EventTypeEVENT_DEV_RECV)
	TypeNapiPoll   = Type(wire.EventTypeEVENT_NAPI_POLL)
	TypeSoftirq    = Type(wire.EventTypeEVENT_SOFTIRQ)
	TypeQdisc      = Type(wire.EventTypeEVENT_QDISC)
	TypeSockIO     = Type(wire.EventTypeEVENT_SOCK_IO)
)

// Action is the name an event type has in the text and JSON forms.
func (t Type) Action() string {
	if k := t.Kind(); k != nil {
		return k.Action
	}
	return "unknown"
}

// Event is one decoded kernel event. Only the member named by Type is valid;
// a tagged struct rather than an interface keeps decoding free of allocations.
// The families after tcp_conn and tcp_sendlim keep their wire struct (its
// times are CLOCK_BOOTTIME; use Begin) with the socket decoded into Socket.
type Event struct {
	Type Type
	Seq  uint64
	Time int64 // wall-clock nanoseconds since the Unix epoch
	CPU  uint32
	// Begin is when a folded or aggregated event's span started (wall-clock ns).
	Begin   int64
	Conn    TCPConn
	Sendlim TCPSendlim
	Socket  Socket // of tcp_cong, tcp_retrans, tcp_rtt, tcp_reset, tcp_rcvbuf, sk_limit, skb_drop and tcp_stage
	Cong    wire.TcpCongEvent
	Retrans wire.TcpRetransEvent
	RTT     wire.TcpRttEvent
	Reset   wire.TcpResetEvent
	Rcvbuf  wire.TcpRcvbufEvent
	SkLimit wire.SkLimitEvent
	Drop    wire.SkbDropEvent
	Dev     wire.DevEvent // dev_xmit and dev_recv
	Napi    wire.NapiEvent
	Softirq wire.SoftirqEvent
	Qdisc   wire.QdiscEvent
	SockIO  wire.SockIoEvent
	// QdiscDelay is qdisc_delay's.
	QdiscDelay wire.QdiscDelayEvent
	// Stage is tcp_stage's, a value of its own (see decodeTCPStage).
	Stage *wire.TcpStageEvent
}

// Socket identifies a socket and where it lives.
type Socket struct {
	Sock  uint64 // kernel address of struct sock, as in the seed's sock=0x...
	Local netip.AddrPort
	Peer  netip.AddrPort
	Netns uint32 // network namespace inode
	// NetnsByAddr: the kernel could not say; Netns is the recording's
	// namespace filter, which the event's addresses belong to.
	NetnsByAddr bool
}

// Sock returns the socket (or, for skb_drop, the packet's addresses) the event is about, if any.
func (e *Event) Sock() *Socket {
	switch e.Type {
	case TypeTCPConn:
		return &e.Conn.Socket
	case TypeTCPSendlim:
		return &e.Sendlim.Socket
	case TypeTCPCong, TypeTCPRetrans, TypeTCPRTT, TypeTCPReset, TypeTCPRcvbuf, TypeSkLimit, TypeSkbDrop, TypeTCPStage:
		return &e.Socket
	}
	return nil
}

// Device returns the device name and namespace of device-level events.
func (e *Event) Device() (name []byte, netns uint32, ok bool) {
	switch e.Type {
	case TypeDevXmit, TypeDevRecv:
		return cstr(int8sAsBytes(e.Dev.Name[:])), e.Dev.Netns, true
	case TypeNapiPoll:
		return cstr(int8sAsBytes(e.Napi.Name[:])), e.Napi.Netns, true
	case TypeQdisc:
		return cstr(int8sAsBytes(e.Qdisc.Dev[:])), e.Qdisc.Netns, true
	case TypeQdiscDelay:
		return cstr(int8sAsBytes(e.QdiscDelay.Dev[:])), e.QdiscDelay.Netns, true
	case TypeSkbDrop:
		return cstr(int8sAsBytes(e.Drop.Dev[:])), e.Drop.Netns, true
	}
	return nil, 0, false
}

// TCPCaState names tcp_ca_state values as the kernel's TCP_CA_* constants.
type TCPCaState uint8

var caStateNames = [...]string{"Open", "Disorder", "CWR", "Recovery", "Loss"}

func (s TCPCaState) String() string {
	if int(s) < len(caStateNames) {
		return caStateNames[s]
	}
	return "unknown"
}

// SkLimitKind names enum sk_limit_kind.
func SkLimitKind(k uint8) string {
	switch k {
	case uint8(wire.SkLimitKindSK_LIMIT_SNDBUF):
		return "sndbuf"
	case uint8(wire.SkLimitKindSK_LIMIT_RMEM):
		return "rmem"
	case uint8(wire.SkLimitKindSK_LIMIT_RCVQUEUE_FULL):
		return "rcvqueue_full"
	}
	return "unknown"
}

// SockIODir names enum sock_io_dir.
func SockIODir(d uint32) string {
	if d == uint32(wire.SockIoDirSOCK_IO_RECV) {
		return "recv"
	}
	return "send"
}

// Directions of tcp_reset events (enum reset_dir).
const (
	ResetSent     = uint8(wire.ResetDirRESET_SENT)
	ResetReceived = uint8(wire.ResetDirRESET_RECEIVED)
)

// ResetDir names enum reset_dir.
func ResetDir(d uint8) string {
	if d == uint8(wire.ResetDirRESET_RECEIVED) {
		return "received"
	}
	return "sent"
}

// ResetPath is enum reset_path: which path of the kernel sent or "received" a reset.
type ResetPath uint8

// Reset paths.
const (
	ResetPathUnknown     = ResetPath(wire.ResetPathRESET_PATH_UNKNOWN)
	ResetPathPeer        = ResetPath(wire.ResetPathRESET_PATH_PEER)
	ResetPathAbortOnData = ResetPath(wire.ResetPathRESET_PATH_ABORT_ON_DATA)
	ResetPathNoSocket    = ResetPath(wire.ResetPathRESET_PATH_NO_SOCKET)
	ResetPathTimewait    = ResetPath(wire.ResetPathRESET_PATH_TIMEWAIT)
	ResetPathSegment     = ResetPath(wire.ResetPathRESET_PATH_SEGMENT)
	ResetPathClose       = ResetPath(wire.ResetPathRESET_PATH_CLOSE)
	ResetPathLinger0     = ResetPath(wire.ResetPathRESET_PATH_LINGER0)
	ResetPathAbort       = ResetPath(wire.ResetPathRESET_PATH_ABORT)
)

var resetPaths = [...]string{"unknown", "peer", "abort_on_data", "no_socket", "timewait", "segment", "close", "linger0", "abort"}

func (p ResetPath) String() string {
	if int(p) < len(resetPaths) {
		return resetPaths[p]
	}
	return "unknown"
}

// resetPathByReason is the path each of the kernel's reset reasons names
// unambiguously; the others (TCP_STATE serves a disconnect and the FIN_WAIT2
// timer alike) leave the path the recorder found.
var resetPathByReason = map[string]ResetPath{
	"NO_SOCKET":                ResetPathNoSocket,
	"TCP_TIMEWAIT_SOCKET":      ResetPathTimewait,
	"TCP_INVALID_ACK_SEQUENCE": ResetPathSegment,
	"TCP_RFC7323_PAWS":         ResetPathSegment,
	"TCP_TOO_OLD_ACK":          ResetPathSegment,
	"TCP_ACK_UNSENT_DATA":      ResetPathSegment,
	"TCP_FLAGS":                ResetPathSegment,
	"TCP_OLD_ACK":              ResetPathSegment,
	"INVALID_SYN":              ResetPathSegment,
	"TCP_ABORT_ON_DATA":        ResetPathAbortOnData,
	"TCP_ABORT_ON_CLOSE":       ResetPathClose,
	"TCP_DISCONNECT_WITH_DATA": ResetPathLinger0,
	"TCP_ABORT_ON_LINGER":      ResetPathAbort,
	"TCP_ABORT_ON_MEMORY":      ResetPathAbort,
	"TCP_KEEPALIVE_TIMEOUT":    ResetPathAbort,
}

// ResetPathOf is a reset's path: the kernel's reason where it names one
// (reasonName is that reason's name in the recording kernel), else what the
// recorder inferred from the socket.
func ResetPathOf(r *wire.TcpResetEvent, reasonName string) ResetPath {
	if r.Dir == ResetSent {
		if p, ok := resetPathByReason[reasonName]; ok {
			return p
		}
	}
	return ResetPath(r.Path)
}

// SoftirqVec names the network softirq vectors.
func SoftirqVec(v uint32) string {
	switch v {
	case 2:
		return "NET_TX"
	case 3:
		return "NET_RX"
	}
	return "unknown"
}

// TCPConn is a TCP state change.
type TCPConn struct {
	Socket
	Old, New TCPState
	Context  Context
	Pid      uint32   // valid when Context is ContextTask
	Comm     [16]byte // NUL-padded, valid when Context is ContextTask
	// Err is the socket's error at the change to CLOSE (an errno: ECONNRESET,
	// ETIMEDOUT ...); 0 for a clean close and for every other change.
	Err uint8
}

// TCPSendlim is a folded run of identical send-limit decisions.
type TCPSendlim struct {
	Socket
	Reason     SendlimReason
	Begin      int64 // wall-clock ns of the run's first decision; Event.Time is when it ended
	Cnt        uint32
	SentPkts   uint32
	Cwnd       uint32
	Ssthresh   uint32
	InFlight   uint32
	SndWnd     uint32
	MSS        uint32
	Unsent     uint32
	WmemQueued uint32
	Sndbuf     uint32
	Probes     uint8 // zero-window probes unanswered
	Backoff    uint8 // retransmission timer backoff exponent
	// The kernel's own totals since the connection began (tcp_info's
	// busy_time, rwnd_limited, sndbuf_limited), in µs; zero in traces
	// written before skbtrace recorded them.
	BusyUs, RwndLimitedUs, SndbufLimitedUs uint64
}

// Context is where the kernel was when the event happened.
type Context uint8

// Contexts, as enum event_context.
const (
	ContextTask    = Context(wire.EventContextCONTEXT_TASK)
	ContextSoftirq = Context(wire.EventContextCONTEXT_SOFTIRQ)
)

func (c Context) String() string {
	switch c {
	case ContextTask:
		return "task"
	case ContextSoftirq:
		return "softirq"
	}
	return "unknown"
}

// TCPState is the kernel's TCP state number (TCP_ESTABLISHED = 1 ...).
type TCPState uint8

// TCP states stat tells apart.
const (
	TCPEstablished TCPState = 1
	TCPFinWait1    TCPState = 4
	TCPFinWait2    TCPState = 5
	TCPTimeWait    TCPState = 6
	TCPListen      TCPState = 10
	TCPNewSynRecv  TCPState = 12
)

var tcpStateNames = [...]string{
	1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
	6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
	11: "CLOSING", 12: "NEW_SYN_RECV",
}

func (s TCPState) String() string {
	if int(s) < len(tcpStateNames) && tcpStateNames[s] != "" {
		return tcpStateNames[s]
	}
	return "UNKNOWN"
}

// SendlimReason says why a sender was not sending more; values are enum sendlim_reason.
type SendlimReason uint8

// Send-limit reasons.
const (
	SendlimOK       = SendlimReason(wire.SendlimReasonSENDLIM_OK)
	SendlimCwnd     = SendlimReason(wire.SendlimReasonSENDLIM_CWND)
	SendlimSwnd     = SendlimReason(wire.SendlimReasonSENDLIM_SWND)
	SendlimNagle    = SendlimReason(wire.SendlimReasonSENDLIM_NAGLE)
	SendlimPacing   = SendlimReason(wire.SendlimReasonSENDLIM_PACING)
	SendlimTSQ      = SendlimReason(wire.SendlimReasonSENDLIM_TSQ)
	SendlimSndbuf   = SendlimReason(wire.SendlimReasonSENDLIM_SNDBUF)
	SendlimApp      = SendlimReason(wire.SendlimReasonSENDLIM_APP)
	SendlimCork     = SendlimReason(wire.SendlimReasonSENDLIM_CORK)
	SendlimXmitFail = SendlimReason(wire.SendlimReasonSENDLIM_XMIT_FAIL)
	SendlimRTO      = SendlimReason(wire.SendlimReasonSENDLIM_RTO)
	SendlimCount    = int(wire.SendlimReasonSENDLIM_MAX)
)

var sendlimNames = [SendlimCount]string{
	SendlimOK: "ok", SendlimCwnd: "cwnd", SendlimSwnd: "swnd", SendlimNagle: "nagle",
	SendlimPacing: "pacing", SendlimTSQ: "tsq", SendlimSndbuf: "sndbuf", SendlimApp: "app",
	SendlimCork: "cork", SendlimXmitFail: "xmit_fail", SendlimRTO: "rto",
}

func (r SendlimReason) String() string {
	if int(r) < len(sendlimNames) {
		return sendlimNames[r]
	}
	return "unknown"
}

// ParseSendlimReason is the inverse of String.
func ParseSendlimReason(s string) (SendlimReason, bool) {
	for i, n := range sendlimNames {
		if n == s {
			return SendlimReason(i), true
		}
	}
	return 0, false
}

// CString returns a C char array's bytes up to its NUL.
func CString(s []int8) []byte { return cstr(int8sAsBytes(s)) }

func cstr(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// int8sAsBytes views a C char array, which bpf2go makes []int8, as bytes.
func int8sAsBytes(s []int8) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
}

// Errno names a Linux errno as the kernel's headers do (ECONNRESET).
func Errno(n uint8) string {
	if name := unix.ErrnoName(syscall.Errno(n)); name != "" {
		return name
	}
	return "errno" + strconv.Itoa(int(n))
}

// ProtocolName names a packet's protocols as skb_drop prints them: ipv4/tcp, ipv6/udp, arp.
func ProtocolName(ethertype uint16, l4 uint8) string {
	var l3 string
	switch ethertype {
	case 0x0800:
		l3 = "ipv4"
	case 0x86dd:
		l3 = "ipv6"
	case 0x0806:
		return "arp"
	case 0:
		return "none"
	default:
		return "0x" + strconv.FormatUint(uint64(ethertype), 16)
	}
	switch l4 {
	case 6:
		return l3 + "/tcp"
	case 17:
		return l3 + "/udp"
	case 1, 58:
		return l3 + "/icmp"
	case 2:
		return l3 + "/igmp"
	case 0:
		if l3 == "ipv6" {
			// A hop-by-hop options header comes first (MLD's router alert);
			// the chain behind it is not followed.
			return l3 + "/hopopts"
		}
	}
	return l3 + "/" + strconv.Itoa(int(l4))
}

// QdiscHandle prints a qdisc handle as tc does: "1:", "1:10", "root".
func QdiscHandle(h uint32) string {
	switch h {
	case 0xffffffff:
		return "root"
	case 0:
		return "none"
	}
	s := strconv.FormatUint(uint64(h>>16), 16) + ":"
	if minor := h & 0xffff; minor != 0 {
		s += strconv.FormatUint(uint64(minor), 16)
	}
	return s
}
