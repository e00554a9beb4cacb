package event

import (
	"net/netip"

	"github.com/skbtrace/skbtrace/internal/probe"
)

// Type is the kind of a kernel event; its values are enum event_type.
type Type uint16

// Event types.
const (
	TypeTCPConn    = Type(probe.SkbtraceEventTypeEVENT_TCP_CONN)
	TypeTCPSendlim = Type(probe.SkbtraceEventTypeEVENT_TCP_SENDLIM)
)

// Action is the name an event type has in the text and JSON forms.
func (t Type) Action() string {
	switch t {
	case TypeTCPConn:
		return "tcp_conn"
	case TypeTCPSendlim:
		return "tcp_sendlim"
	}
	return "unknown"
}

// Event is one decoded kernel event. Only the member named by Type is valid;
// a tagged struct rather than an interface keeps decoding free of allocations.
type Event struct {
	Type    Type
	Seq     uint64
	Time    int64 // wall-clock nanoseconds since the Unix epoch
	CPU     uint32
	Conn    TCPConn
	Sendlim TCPSendlim
}

// Socket identifies a socket and where it lives.
type Socket struct {
	Sock  uint64 // kernel address of struct sock, as in the seed's sock=0x...
	Local netip.AddrPort
	Peer  netip.AddrPort
	Netns uint32 // network namespace inode
}

// Sock returns the socket the event is about, if any.
func (e *Event) Sock() *Socket {
	switch e.Type {
	case TypeTCPConn:
		return &e.Conn.Socket
	case TypeTCPSendlim:
		return &e.Sendlim.Socket
	}
	return nil
}

// TCPConn is a TCP state change.
type TCPConn struct {
	Socket
	Old, New TCPState
	Context  Context
	Pid      uint32   // valid when Context is ContextTask
	Comm     [16]byte // NUL-padded, valid when Context is ContextTask
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
}

// Context is where the kernel was when the event happened.
type Context uint8

// Contexts, as enum event_context.
const (
	ContextTask    = Context(probe.SkbtraceEventContextCONTEXT_TASK)
	ContextSoftirq = Context(probe.SkbtraceEventContextCONTEXT_SOFTIRQ)
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
	SendlimOK     = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_OK)
	SendlimCwnd   = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_CWND)
	SendlimSwnd   = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_SWND)
	SendlimNagle  = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_NAGLE)
	SendlimPacing = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_PACING)
	SendlimTSQ    = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_TSQ)
	SendlimSndbuf = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_SNDBUF)
	SendlimApp    = SendlimReason(probe.SkbtraceSendlimReasonSENDLIM_APP)
	SendlimCount  = int(probe.SkbtraceSendlimReasonSENDLIM_MAX)
)

var sendlimNames = [SendlimCount]string{
	SendlimOK: "ok", SendlimCwnd: "cwnd", SendlimSwnd: "swnd", SendlimNagle: "nagle",
	SendlimPacing: "pacing", SendlimTSQ: "tsq", SendlimSndbuf: "sndbuf", SendlimApp: "app",
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
