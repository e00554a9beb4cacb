package perfetto

import "strconv"

func appendField(b []byte, key, value string, quote bool) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, `":`...)
	if quote {
		b = append(b, '"')
		b = appendString(b, value)
		b = append(b, '"')
	} else {
		b = append(b, value...)
	}
	return append(b, ',')
}

func (x *Exporter) newID() uint32 {
	x.lastID++
	return x.lastID
}

// open starts an event and leaves its name's string open for the caller.
func (x *Exporter) open(ph byte, cat string, pid, tid uint32, ts int64) {
	b := x.buf
	if x.wrote {
		b = append(b, ",\n"...)
	}
	x.wrote = true
	b = append(b, `{"ph":"`...)
	b = append(b, ph)
	if cat != "" {
		b = append(b, `","cat":"`...)
		b = append(b, cat...)
	}
	b = append(b, `","pid":`...)
	b = strconv.AppendUint(b, uint64(pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(tid), 10)
	b = append(b, `,"ts":`...)
	b = appendMicros(b, ts)
	x.buf = append(b, `,"name":"`...)
	x.maxTs = max(x.maxTs, ts)
}

// instant starts an instant event on a connection's thread.
func (x *Exporter) instant(c *conn, cat string, ts int64) {
	x.open('i', cat, c.proc.pid, c.tid, ts)
}

// processInstant starts an instant event of a namespace's process.
func (x *Exporter) processInstant(netns uint32, cat string, ts int64) {
	p := x.proc(netns, ts)
	x.open('i', cat, p.pid, p.pid, ts)
}

// scope is an instant's: its connection's thread, or its namespace's process.
func scope(onThread bool) byte {
	if onThread {
		return 't'
	}
	return 'p'
}

// argsOpen closes the name and opens the args; s is an instant's scope.
func (x *Exporter) argsOpen(s byte) {
	if s != 0 {
		x.buf = append(x.buf, `","s":"`...)
		x.buf = append(x.buf, s)
	}
	x.buf = append(x.buf, `","args":{`...)
	x.nargs = 0
}

// argsOpenDur closes a complete event's name, writes its duration and
// opens its args.
func (x *Exporter) argsOpenDur(ns int64) {
	x.buf = append(x.buf, `","dur":`...)
	x.buf = appendMicros(x.buf, ns)
	x.buf = append(x.buf, `,"args":{`...)
	x.nargs = 0
}

func (x *Exporter) argKey(k string) {
	if x.nargs > 0 {
		x.buf = append(x.buf, ',')
	}
	x.nargs++
	x.buf = append(x.buf, '"')
	x.buf = append(x.buf, k...)
	x.buf = append(x.buf, `":`...)
}

func (x *Exporter) argU(k string, v uint64) {
	x.argKey(k)
	x.buf = strconv.AppendUint(x.buf, v, 10)
}

func (x *Exporter) argF(k string, v float64, prec int) {
	x.argKey(k)
	x.buf = strconv.AppendFloat(x.buf, v, 'f', prec, 64)
}

func (x *Exporter) argMicros(k string, ns int64) {
	x.argKey(k)
	x.buf = appendMicros(x.buf, ns)
}

func (x *Exporter) argS(k, v string) {
	x.argKey(k)
	x.buf = append(x.buf, '"')
	x.buf = appendString(x.buf, v)
	x.buf = append(x.buf, '"')
}

// end closes the args and the event.
func (x *Exporter) end() { x.buf = append(x.buf, "}}"...) }

// counter writes a value of one of a connection's counters, unless it
// holds that value already: a counter's value holds until the next.
func (x *Exporter) counter(c *conn, k counterKind, cat string, ts int64, v float64) {
	if c.shown[k] && c.last[k] == v {
		return
	}
	c.last[k], c.shown[k] = v, true
	x.open('C', cat, c.proc.pid, c.tid, ts)
	x.buf = append(x.buf, counterNames[k][0]...)
	x.buf = append(x.buf, c.label...)
	x.argsOpen(0)
	x.argF(counterNames[k][1], v, 0)
	x.end()
}
