package tcppeer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrReset is returned (wrapped) when the kernel answers a handshake with RST.
var ErrReset = errors.New("reset by the kernel")

// Handshake is what the peer offers in its SYN or SYN-ACK. Every field is
// taken literally (Window 0 is a zero window): start from DefaultHandshake.
type Handshake struct {
	ISN uint32
	// Window is the SYN's raw window field, and stays the window the peer
	// advertises afterwards (then scaled by WScale) until a segment it
	// writes says otherwise.
	Window     uint16
	MSS        uint16 // 0: no MSS option (the kernel then assumes 536)
	WScale     int    // the shift offered; negative: no window scale option
	SACK       bool   // offer SACK-permitted
	Timestamps bool   // offer timestamps
}

// DefaultHandshake offers what a Linux peer on Ethernet would, with a
// random ISN.
func DefaultHandshake() Handshake {
	return Handshake{ISN: rand.Uint32(), Window: 65535, MSS: 1460, WScale: 7, SACK: true, Timestamps: true}
}

type tuple struct{ kernelPort, peerPort uint16 }

// Conn is the peer's side of one connection. It tracks sequence numbers so
// scripts deal in byte offsets: offsets count data bytes from 0, the first
// byte after the SYN, in each direction. It is meant for one goroutine.
type Conn struct {
	p                    *Peer
	KernelPort, PeerPort uint16
	KernelISN, PeerISN   uint32
	// KernelSYN is the kernel's SYN (Accept) or SYN-ACK (Connect), with the
	// options it offered.
	KernelSYN *Segment
	// Window is the raw window the peer advertises on the segments it
	// builds; Write sets it from each ACK it sends.
	Window uint16

	ts           bool  // timestamps negotiated
	kernelWScale uint8 // 0 unless both sides offered scaling
	tsBase       uint32
	start        time.Time

	cur      int    // expectation cursor into p.log
	scanned  int    // p.log up to here is folded into the fields below
	sndNxt   uint32 // next sequence number the peer sends
	lastAck  uint32 // ack number of the peer's last ACK
	rcvNxt   uint32 // end of what the kernel sent in order, FIN included
	finSeen  bool
	tsRecent uint32
	kernWnd  uint32
}

func (p *Peer) newConn(t tuple, h Handshake) *Conn {
	return &Conn{p: p, KernelPort: t.kernelPort, PeerPort: t.peerPort, PeerISN: h.ISN, Window: h.Window,
		sndNxt: h.ISN + 1, tsBase: rand.Uint32(), start: time.Now()}
}

// synOptions are the options the peer offers; a SYN-ACK (answering the
// kernel's SYN) offers only what the SYN did (RFC 7323, 2018).
func (c *Conn) synOptions(h Handshake, syn *Segment) TCPOptions {
	kernel := TCPOptions{HasWScale: true, SACKPermitted: true, HasTS: true}
	if syn != nil {
		kernel = syn.Opts
	}
	o := TCPOptions{MSS: h.MSS, SACKPermitted: h.SACK && kernel.SACKPermitted}
	if h.WScale >= 0 && kernel.HasWScale {
		o.HasWScale, o.WScale = true, uint8(h.WScale)
	}
	if h.Timestamps && kernel.HasTS {
		o.HasTS, o.TSval, o.TSecr = true, c.tsNow(), kernel.TSval
	}
	return o
}

// established records the kernel's SYN or SYN-ACK and what was negotiated.
func (c *Conn) established(kernelSYN *Segment, ours TCPOptions) {
	c.KernelSYN, c.KernelISN = kernelSYN, kernelSYN.Seq
	c.rcvNxt, c.lastAck = kernelSYN.Seq+1, kernelSYN.Seq+1
	c.tsRecent = kernelSYN.Opts.TSval
	c.ts = ours.HasTS && kernelSYN.Opts.HasTS
	if ours.HasWScale && kernelSYN.Opts.HasWScale {
		c.kernelWScale = kernelSYN.Opts.WScale
	}
}

// Accept plays the server for a kernel connect() to the peer's port: it
// takes the oldest SYN to that port no Conn owns, answers with a SYN-ACK
// offering h, and waits for the kernel's ACK.
func (p *Peer) Accept(port uint16, h Handshake, timeout time.Duration) (*Conn, error) {
	deadline := time.Now().Add(timeout)
	from := 0
	syn, err := p.await(&from, timeout, func(s *Segment) bool {
		if !s.tcp || s.Flags&(SYN|ACK) != SYN || s.DstPort != port {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		t := tuple{s.SrcPort, s.DstPort}
		if p.claimed[t] {
			return false
		}
		p.claimed[t] = true
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for a SYN to port %d: %w", port, err)
	}
	c := p.newConn(tuple{syn.SrcPort, port}, h)
	c.cur = from
	opts := c.synOptions(h, syn)
	c.established(syn, opts)
	synAck := c.Build(SYN|ACK, nil)
	synAck.Seq, synAck.Window, synAck.Opts = h.ISN, h.Window, opts
	if err := p.Write(synAck); err != nil {
		return nil, err
	}
	if _, err := c.Expect(time.Until(deadline), func(s *Segment) bool {
		return s.Flags&ACK != 0 && s.Ack == h.ISN+1
	}); err != nil {
		return nil, fmt.Errorf("waiting for the ACK of the SYN-ACK from port %d: %w", syn.SrcPort, err)
	}
	return c, nil
}

// Connect plays the client to a kernel listener on port: it sends a SYN
// offering h from a fresh port, waits for the SYN-ACK and ACKs it. A RST
// answer gives an error wrapping ErrReset.
func (p *Peer) Connect(port uint16, h Handshake, timeout time.Duration) (*Conn, error) {
	p.mu.Lock()
	p.port++
	t := tuple{port, p.port}
	p.claimed[t] = true
	c := p.newConn(t, h)
	c.cur = len(p.log)
	p.mu.Unlock()
	opts := c.synOptions(h, nil)
	syn := &Segment{SrcPort: t.peerPort, DstPort: port, Seq: h.ISN, Flags: SYN, Window: h.Window, Opts: opts}
	if err := p.Write(syn); err != nil {
		return nil, err
	}
	reply, err := c.Expect(timeout, func(s *Segment) bool { return s.Flags&RST != 0 || s.Flags&(SYN|ACK) == SYN|ACK })
	if err != nil {
		return nil, fmt.Errorf("waiting for the SYN-ACK from port %d: %w", port, err)
	}
	if reply.Flags&RST != 0 {
		return nil, fmt.Errorf("connecting to port %d: %w", port, ErrReset)
	}
	c.established(reply, opts)
	if err := c.Write(c.Build(ACK, nil)); err != nil {
		return nil, err
	}
	return c, nil
}

// tsNow is the peer's timestamp clock: milliseconds, as Linux's.
func (c *Conn) tsNow() uint32 { return c.tsBase + uint32(time.Since(c.start).Milliseconds()) }

// sync folds the kernel's segments received since the last call into the
// connection's state.
func (c *Conn) sync() {
	c.p.mu.Lock()
	pending := c.p.log[c.scanned:]
	c.scanned = len(c.p.log)
	c.p.mu.Unlock()
	for _, s := range pending {
		if s.FromPeer || !c.mine(s) || s.Flags&SYN != 0 {
			continue
		}
		if s.Opts.HasTS {
			c.tsRecent = s.Opts.TSval
		}
		if s.Flags&RST == 0 {
			c.kernWnd = uint32(s.Window) << c.kernelWScale
		}
		// The tun sees everything the kernel sends, so anything new starts
		// at or before rcvNxt: no reassembly needed.
		if end := s.Seq + s.Len(); seqLE(s.Seq, c.rcvNxt) && seqLT(c.rcvNxt, end) {
			c.rcvNxt = end
			c.finSeen = c.finSeen || s.Flags&FIN != 0
		}
	}
}

func (c *Conn) mine(s *Segment) bool {
	return s.tcp && s.SrcPort == c.KernelPort && s.DstPort == c.PeerPort
}

// Build returns a segment on this connection at the peer's next sequence
// number, carrying the last acknowledgement and window the peer sent and,
// if negotiated, timestamps echoing the kernel's latest. It acknowledges
// nothing new: change Ack (or use Ack, AckAll) for that. Adjust it and pass
// it to Write.
func (c *Conn) Build(flags Flags, payload []byte) *Segment {
	c.sync()
	s := &Segment{SrcPort: c.PeerPort, DstPort: c.KernelPort, Seq: c.sndNxt, Flags: flags, Window: c.Window, Payload: payload}
	if flags&ACK != 0 {
		s.Ack = c.lastAck
	}
	if c.ts {
		s.Opts.HasTS, s.Opts.TSval, s.Opts.TSecr = true, c.tsNow(), c.tsRecent
	}
	return s
}

// Write sends a segment and advances the peer's state past it.
func (c *Conn) Write(s *Segment) error {
	if err := c.p.Write(s); err != nil {
		return err
	}
	if end := s.Seq + s.Len(); s.Flags&RST == 0 && seqLT(c.sndNxt, end) {
		c.sndNxt = end
	}
	if s.Flags&ACK != 0 && s.Flags&RST == 0 {
		c.lastAck, c.Window = s.Ack, s.Window
	}
	return nil
}

// Ack acknowledges the kernel's first acked bytes, advertising window (raw).
func (c *Conn) Ack(acked uint32, window uint16) error {
	s := c.Build(ACK, nil)
	s.Ack, s.Window = c.KernelISN+1+acked, window
	return c.Write(s)
}

// AckAll acknowledges everything the kernel has sent in order so far
// (its FIN too), advertising window (raw).
func (c *Conn) AckAll(window uint16) error {
	c.sync()
	return c.Ack(c.rcvNxt-c.KernelISN-1, window)
}

// Range is a span of data bytes as offsets: [Start, End).
type Range struct{ Start, End uint32 }

// AckSACK acknowledges acked bytes and selectively the blocks beyond them.
func (c *Conn) AckSACK(acked uint32, window uint16, blocks ...Range) error {
	s := c.Build(ACK, nil)
	s.Ack, s.Window = c.KernelISN+1+acked, window
	for _, b := range blocks {
		s.Opts.SACK = append(s.Opts.SACK, SACKBlock{c.KernelISN + 1 + b.Start, c.KernelISN + 1 + b.End})
	}
	return c.Write(s)
}

// ZeroWindow advertises a zero window without acknowledging anything new.
func (c *Conn) ZeroWindow() error {
	s := c.Build(ACK, nil)
	s.Window = 0
	return c.Write(s)
}

// Send sends payload in one segment (PSH, ACK).
func (c *Conn) Send(payload []byte) error { return c.Write(c.Build(PSH|ACK, payload)) }

// Fin sends a FIN.
func (c *Conn) Fin() error { return c.Write(c.Build(FIN|ACK, nil)) }

// Rst sends a RST at exactly the sequence number the kernel expects, so it
// resets the connection rather than drawing a challenge ACK.
func (c *Conn) Rst() error { return c.Write(c.Build(RST|ACK, nil)) }

// Rel converts a segment's sequence and acknowledgement numbers to offsets
// from each sender's first data byte (a SYN's sequence number is -1).
func (c *Conn) Rel(s *Segment) (seq, ack uint32) {
	if s.FromPeer {
		return s.Seq - c.PeerISN - 1, s.Ack - c.KernelISN - 1
	}
	return s.Seq - c.KernelISN - 1, s.Ack - c.PeerISN - 1
}

// BytesReceived is how much data the kernel has sent in order so far.
func (c *Conn) BytesReceived() uint32 {
	c.sync()
	n := c.rcvNxt - c.KernelISN - 1
	if c.finSeen {
		n--
	}
	return n
}

// KernelWindow is the window the kernel last advertised, scaled, in bytes.
func (c *Conn) KernelWindow() uint32 {
	c.sync()
	return c.kernWnd
}

// Expect returns the next segment the kernel sends on this connection that
// match accepts; others are passed over.
func (c *Conn) Expect(timeout time.Duration, match func(*Segment) bool) (*Segment, error) {
	return c.p.await(&c.cur, timeout, func(s *Segment) bool { return c.mine(s) && match(s) })
}

// Next returns the next segment the kernel sends on this connection.
func (c *Conn) Next(timeout time.Duration) (*Segment, error) {
	return c.Expect(timeout, func(*Segment) bool { return true })
}

// ExpectData returns the next segment with payload on this connection.
func (c *Conn) ExpectData(timeout time.Duration) (*Segment, error) {
	return c.Expect(timeout, func(s *Segment) bool { return len(s.Payload) > 0 })
}

// ExpectFlags returns the next segment on this connection carrying all of
// flags (and maybe others).
func (c *Conn) ExpectFlags(timeout time.Duration, flags Flags) (*Segment, error) {
	return c.Expect(timeout, func(s *Segment) bool { return s.Flags&flags == flags })
}
