// Package tcppeer plays a scripted TCP peer against the real Linux TCP
// stack, packet by packet, through a tun device in a network namespace of
// its own: packetdrill as a Go library for tests.
//
// The tracer's TCP events (send limited by a zero or small window, cork,
// Nagle or cwnd; resets; drops; RTT) are checked against the kernel's own
// counters and tcp_info. A real peer produces those stalls only by chance;
// a scripted one forces them on demand: it advertises a zero window, holds
// its ACKs, sends a RST at a chosen sequence number or a segment with a bad
// checksum, and sees every segment the kernel sends in answer.
//
// The kernel side is ordinary: sockets opened in the namespace
// (DialFromKernel, ListenInKernel) talk to the peer's address, which is
// routed through the tun. Every packet the kernel sends there is recorded;
// every packet the peer writes enters the kernel as if received, and is
// processed before the write returns.
//
// A kernel connect() to a peer advertising a zero window:
//
//	p, err := tcppeer.Open(tcppeer.Options{})
//	if err != nil { ... }
//	defer p.Close()
//	s, err := p.DialFromKernel(80)
//	h := tcppeer.DefaultHandshake()
//	h.Window = 0
//	c, err := p.Accept(80, h, time.Second)
//	s.Write([]byte("hello"))            // queued: the window is shut
//	probe, err := c.Next(time.Second)   // a zero-window probe, at offset -1
//	err = c.Ack(0, 100)                 // open the window (100 << 7 bytes)
//	data, err := c.ExpectData(time.Second)
//	err = c.AckAll(100)
//	n, err := p.Counters()              // n["TcpExt.TCPWinProbe"] counts the probes
//
// Open needs root (namespaces, tun devices); Close removes the namespace
// and everything in it.
package tcppeer
