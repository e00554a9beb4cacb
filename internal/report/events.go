package report

import (
	"bytes"
	"strconv"

	"github.com/skbtrace/skbtrace/internal/event"
)

// AppendText appends the seed's one-line form of ev, with a trailing newline:
//
//	11 1333399184.790000414 cpu=0 action=tcp_conn [SYN_RECV] sock=0xffff88003aca5980 local=... peer=...
func AppendText(b []byte, ev *event.Event, names event.Names) []byte {
	b = strconv.AppendUint(b, ev.Seq, 10)
	b = append(b, ' ')
	b = appendTime(b, ev.Time)
	b = append(b, " cpu="...)
	b = strconv.AppendUint(b, uint64(ev.CPU), 10)
	b = append(b, " action="...)
	b = append(b, ev.Type.Action()...)
	switch ev.Type {
	case event.TypeTCPConn:
		c := &ev.Conn
		b = append(b, " ["...)
		b = append(b, c.New.String()...)
		b = append(b, ']')
		b = appendSocket(b, &c.Socket)
		b = append(b, " from="...)
		b = append(b, c.Old.String()...)
		if c.Err != 0 {
			b = append(b, " err="...)
			b = append(b, event.Errno(c.Err)...)
		}
		b = appendNetns(b, c.Netns, names)
		if c.Context == event.ContextTask {
			b = append(b, " pid="...)
			b = strconv.AppendUint(b, uint64(c.Pid), 10)
			b = append(b, " comm="...)
			b = appendToken(b, comm(&c.Comm))
		} else {
			b = append(b, " ctx="...)
			b = append(b, c.Context.String()...)
		}
	case event.TypeTCPSendlim:
		s := &ev.Sendlim
		b = append(b, " ["...)
		b = append(b, s.Reason.String()...)
		b = append(b, "] sock=0x"...)
		b = strconv.AppendUint(b, s.Sock, 16)
		b = append(b, " begin="...)
		b = appendTime(b, s.Begin)
		b = appendField(b, "cnt", s.Cnt)
		b = appendField(b, "sentpkts", s.SentPkts)
		switch s.Reason {
		case event.SendlimCwnd:
			b = appendField(b, "cwnd", s.Cwnd)
			b = appendField(b, "ssthresh", s.Ssthresh)
			b = appendField(b, "inflight", s.InFlight)
		case event.SendlimSwnd:
			b = appendField(b, "snd_wnd", s.SndWnd)
			b = appendField(b, "unsent", s.Unsent)
			if s.Probes > 0 {
				b = appendField(b, "probes", uint32(s.Probes))
			}
		case event.SendlimRTO:
			b = appendField(b, "backoff", uint32(s.Backoff))
			b = appendField(b, "inflight", s.InFlight)
			b = appendField(b, "cwnd", s.Cwnd)
		case event.SendlimXmitFail:
			b = appendField(b, "unsent", s.Unsent)
			b = appendField(b, "backoff", uint32(s.Backoff))
		case event.SendlimSndbuf:
			b = appendField(b, "queued", s.WmemQueued)
			b = appendField(b, "sndbuf", s.Sndbuf)
			b = appendField(b, "inflight", s.InFlight)
		case event.SendlimNagle, event.SendlimCork:
			b = appendField(b, "unsent", s.Unsent)
			b = appendField(b, "mss", s.MSS)
		case event.SendlimPacing, event.SendlimTSQ:
			b = appendField(b, "unsent", s.Unsent)
			b = appendField(b, "cwnd", s.Cwnd)
			b = appendField(b, "inflight", s.InFlight)
		}
	default:
		if k := ev.Type.Kind(); k != nil && k.Fields != nil {
			tw := textFields{b: b, names: names}
			k.Fields(&tw, ev, names)
			b = tw.b
		}
	}
	return append(b, '\n')
}

// AppendJSON appends ev as one JSON object with the text form's field names, and a newline.
func AppendJSON(b []byte, ev *event.Event, names event.Names) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, ev.Seq, 10)
	// Times are JSON numbers, seconds since the epoch with the text form's
	// nine decimals: exact as written, though a float64 reader keeps only
	// about a quarter of a microsecond of them.
	b = append(b, `,"time":`...)
	b = appendTime(b, ev.Time)
	b = append(b, `,"cpu":`...)
	b = strconv.AppendUint(b, uint64(ev.CPU), 10)
	b = append(b, `,"action":"`...)
	b = append(b, ev.Type.Action()...)
	b = append(b, '"')
	switch ev.Type {
	case event.TypeTCPConn:
		c := &ev.Conn
		b = jsonString(b, "state", c.New.String())
		b = jsonString(b, "from", c.Old.String())
		if c.Err != 0 {
			b = jsonString(b, "err", event.Errno(c.Err))
		}
		b = jsonSocket(b, &c.Socket, names)
		b = jsonString(b, "ctx", c.Context.String())
		if c.Context == event.ContextTask {
			b = jsonUint(b, "pid", uint64(c.Pid))
			b = jsonString(b, "comm", string(comm(&c.Comm)))
		}
	case event.TypeTCPSendlim:
		s := &ev.Sendlim
		b = jsonString(b, "reason", s.Reason.String())
		b = jsonSocket(b, &s.Socket, names)
		b = append(b, `,"begin":`...)
		b = appendTime(b, s.Begin)
		b = jsonUint(b, "cnt", uint64(s.Cnt))
		b = jsonUint(b, "sentpkts", uint64(s.SentPkts))
		b = jsonUint(b, "cwnd", uint64(s.Cwnd))
		b = jsonUint(b, "ssthresh", uint64(s.Ssthresh))
		b = jsonUint(b, "inflight", uint64(s.InFlight))
		b = jsonUint(b, "snd_wnd", uint64(s.SndWnd))
		b = jsonUint(b, "mss", uint64(s.MSS))
		b = jsonUint(b, "unsent", uint64(s.Unsent))
		b = jsonUint(b, "queued", uint64(s.WmemQueued))
		b = jsonUint(b, "sndbuf", uint64(s.Sndbuf))
		b = jsonUint(b, "probes", uint64(s.Probes))
		b = jsonUint(b, "backoff", uint64(s.Backoff))
		b = jsonUint(b, "kernel_busy_us", s.BusyUs)
		b = jsonUint(b, "kernel_rwnd_limited_us", s.RwndLimitedUs)
		b = jsonUint(b, "kernel_sndbuf_limited_us", s.SndbufLimitedUs)
	default:
		if k := ev.Type.Kind(); k != nil && k.Fields != nil {
			jw := jsonFields{b: b, names: names}
			k.Fields(&jw, ev, names)
			b = jw.b
		}
	}
	return append(b, "}\n"...)
}

// appendTime prints wall-clock nanoseconds as SEC.NSEC with nine digits.
func appendTime(b []byte, ns int64) []byte {
	sec, frac := ns/1e9, ns%1e9
	if frac < 0 {
		sec, frac = sec-1, frac+1e9
	}
	b = strconv.AppendInt(b, sec, 10)
	b = append(b, '.')
	var digits [9]byte
	for i := 8; i >= 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, digits[:]...)
}

func appendSocket(b []byte, s *event.Socket) []byte {
	b = append(b, " sock=0x"...)
	b = strconv.AppendUint(b, s.Sock, 16)
	b = append(b, " local="...)
	b = s.Local.AppendTo(b)
	b = append(b, " peer="...)
	return s.Peer.AppendTo(b)
}

func appendNetns(b []byte, inode uint32, names event.Names) []byte {
	b = append(b, " netns="...)
	if names != nil {
		if n := names.NetnsName(inode); n != "" {
			return append(b, n...)
		}
	}
	return strconv.AppendUint(b, uint64(inode), 10)
}

func appendField(b []byte, key string, v uint32) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendUint(b, uint64(v), 10)
}

func jsonSocket(b []byte, s *event.Socket, names event.Names) []byte {
	b = append(b, `,"sock":"0x`...)
	b = strconv.AppendUint(b, s.Sock, 16)
	b = append(b, `","local":"`...)
	b = s.Local.AppendTo(b)
	b = append(b, `","peer":"`...)
	b = s.Peer.AppendTo(b)
	b = append(b, '"')
	b = jsonUint(b, "netns", uint64(s.Netns))
	if names != nil {
		if n := names.NetnsName(s.Netns); n != "" {
			b = jsonString(b, "netns_name", n)
		}
	}
	if s.NetnsByAddr {
		b = jsonString(b, "netns_by", "addr")
	}
	return b
}

func jsonString(b []byte, key, v string) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendQuote(b, v)
}

func jsonUint(b []byte, key string, v uint64) []byte {
	b = append(b, `,"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendUint(b, v, 10)
}

// appendToken keeps a value one whitespace-free token, so lines stay splittable.
func appendToken(b, v []byte) []byte {
	for _, c := range v {
		if c <= ' ' || c >= 0x7f {
			c = '_'
		}
		b = append(b, c)
	}
	return b
}

func comm(c *[16]byte) []byte {
	if i := bytes.IndexByte(c[:], 0); i >= 0 {
		return c[:i]
	}
	return c[:]
}
