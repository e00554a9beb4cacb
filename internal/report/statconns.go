package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/units"
)

// stat's connections are written one at a time, in text and in JSON: a
// trace can have hundreds of thousands of them.

// NewStatViewRows computes the printable summary without holding the
// connections' rows: WriteStatText, WriteStatJSON and EachConn make each
// row as they reach it.
func NewStatViewRows(st *analyze.Stat, sum *analyze.Summary) StatView {
	v, nsRef := statView(st, sum)
	v.rows = &connRows{st: st, nsRef: nsRef}
	for _, c := range st.Connections {
		if c.Active() {
			v.rows.active++
		} else {
			v.StateOnly++
		}
	}
	return v
}

// connRows is what a view made by NewStatViewRows makes its rows from.
type connRows struct {
	st     *analyze.Stat
	nsRef  func(uint32) NetnsRef
	active int
}

// conns is how many connection rows the view has.
func (v *StatView) conns() int {
	if v.rows != nil {
		return v.rows.active
	}
	return len(v.Connections)
}

// EachConn calls f with each connection's row in order, and with the
// connection it is made from when the view has it (one by NewStatViewRows),
// else nil; skip says, from the connection, that f has no use for its row
// (nil: every row is made).
func (v *StatView) EachConn(skip func(*analyze.ConnStat) bool, f func(*analyze.ConnStat, *ConnView) error) error {
	if v.rows == nil {
		for i := range v.Connections {
			if err := f(nil, &v.Connections[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range v.rows.st.Connections {
		if !c.Active() || skip != nil && skip(c) {
			continue
		}
		row := connView(c, v.rows.nsRef, nil)
		if err := f(c, &row); err != nil {
			return err
		}
	}
	return nil
}

// connView is a connection's row; rows with equal lists and maps share
// them through share when it is not nil (a view that holds every row).
func connView(c *analyze.ConnStat, nsRef func(uint32) NetnsRef, share *rowSharing) ConnView {
	seq, shares, counts := c.States(), c.LimitShares(), c.LimitCount()
	if share != nil {
		seq = share.states.get(strings.Join(seq, " "), seq)
		shares = share.limitShares.get(fmt.Sprint(shares), shares)
		counts = share.limitCounts.get(fmt.Sprint(counts), counts)
	}
	cv := ConnView{
		Sock: "0x" + strconv.FormatUint(c.Sock, 16), Local: c.Local, Peer: c.Peer, NetnsRef: nsRef(c.Netns),
		Seconds: c.Duration(), States: seq, LimitShare: shares, LimitDecisions: counts,
		RetransSegs: c.RetransSegs, CongStates: c.CongStates.Map(), Resets: c.Resets, Kernel: kernelLimits(c),
		Stages: stageViews(c.Stages),
	}
	if c.Samples > 0 {
		cv.BytesAcked, cv.BytesReceived, cv.ThroughputBps = ptr(c.BytesAcked), ptr(c.BytesReceived), ptr(c.Throughput())
		cv.AvgSRTTus, cv.MaxSRTTus = ptr(c.AvgSRTTus()), ptr(c.MaxSRTTus)
	}
	if c.HasMinRTT() {
		cv.MinRTTus = ptr(c.MinRTTus)
	}
	if c.CwndSeen {
		cv.CwndMin, cv.CwndMax = ptr(c.CwndMin), ptr(c.CwndMax)
	}
	return cv
}

// rowSharing holds the lists and maps that equal rows share: connections
// go through the same few sequences of states, and short ones have the
// same few send-limit shares and counts.
type rowSharing struct {
	states      shared[[]string]
	limitShares shared[map[string]float64]
	limitCounts shared[map[string]uint64]
}

func newRowSharing() *rowSharing {
	return &rowSharing{shared[[]string]{}, shared[map[string]float64]{}, shared[map[string]uint64]{}}
}

// shared hands out one value per key (a printing of the value: fmt prints
// a map's keys sorted and a float in the shortest form that reads back).
type shared[V any] map[string]V

func (s shared[V]) get(key string, v V) V {
	if old, ok := s[key]; ok {
		return old
	}
	s[key] = v
	return v
}

// WriteStatJSON writes the summary as one JSON document, the connections
// one at a time: a trace can have hundreds of thousands, and the encoder
// holds a whole document in memory before writing it.
func WriteStatJSON(w io.Writer, v StatView) error {
	head := v
	head.Connections = []ConnView{}
	var doc0 bytes.Buffer
	if err := statEncoder(&doc0, "").Encode(head); err != nil {
		return err
	}
	// The rest of the document is small; the connections go between the
	// brackets of its empty list (a string value cannot hold this text:
	// its quotes would be escaped).
	const empty = `"connections": []`
	doc := doc0.Bytes()
	at := bytes.Index(doc, []byte(empty))
	if at < 0 {
		return errors.New("encoding the summary: no connections list in the document")
	}
	bw := bufio.NewWriter(w)
	bw.Write(doc[:at+len(empty)-1])
	var row bytes.Buffer
	enc := statEncoder(&row, "    ")
	first := true
	err := v.EachConn(nil, func(_ *analyze.ConnStat, c *ConnView) error {
		if !first {
			bw.WriteByte(',')
		}
		first = false
		bw.WriteString("\n    ")
		row.Reset()
		if err := enc.Encode(c); err != nil {
			return err
		}
		_, err := bw.Write(bytes.TrimSuffix(row.Bytes(), []byte("\n")))
		return err
	})
	if err != nil {
		return err
	}
	if !first {
		bw.WriteString("\n  ")
	}
	bw.Write(doc[at+len(empty)-1:])
	return bw.Flush()
}

// statEncoder indents as stat's JSON does, its lines after the first
// behind prefix.
func statEncoder(w io.Writer, prefix string) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
	enc.SetIndent(prefix, "  ")
	return enc
}

// connHeader is the connections table's header.
var connHeader = []string{"local", "peer", "netns", "seconds", "bytes", "throughput", "send limits (share of time)",
	"retrans", "rtt min/avg/max us", "cwnd", "resets"}

// connCells appends a connection's row of the table to cells.
func connCells(cells []string, c *ConnView) []string {
	us := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	cwnd := "-"
	if c.CwndMin != nil {
		cwnd = fmt.Sprintf("%d-%d", *c.CwndMin, *c.CwndMax)
	}
	return append(cells, c.Local, c.Peer, c.Label(), strconv.FormatFloat(c.Seconds, 'f', 2, 64), orDash(c.Bytes(), units.Bytes),
		orDash(c.ThroughputBps, func(b float64) string { return units.Bits(b * 8) }), c.sendLimits(),
		strconv.FormatUint(c.RetransSegs, 10),
		orDash(c.MinRTTus, us)+"/"+orDash(c.AvgSRTTus, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) })+"/"+orDash(c.MaxSRTTus, us),
		cwnd, strconv.Itoa(c.Resets))
}

// writeConnTable writes the connections table aligned as the tabwriter
// aligns the others (each column as wide as its widest cell, and two
// spaces), formatting every row twice, once to measure it: a trace can
// have hundreds of thousands of connections, and a tabwriter holds every
// row until the table ends.
func writeConnTable(w io.Writer, v *StatView) error {
	widths := make([]int, len(connHeader)-1) // the last column is not padded
	measure := func(cells []string) {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(cells[i]))
		}
	}
	measure(connHeader)
	var cells []string
	v.EachConn(nil, func(_ *analyze.ConnStat, c *ConnView) error {
		cells = connCells(cells[:0], c)
		measure(cells)
		return nil
	})
	bw := bufio.NewWriter(w)
	row := func(cells []string) {
		for i, cell := range cells {
			bw.WriteString(cell)
			if i < len(widths) {
				bw.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)+2))
			}
		}
		bw.WriteByte('\n')
	}
	bw.WriteString("\nCONNECTIONS\n")
	row(connHeader)
	v.EachConn(nil, func(_ *analyze.ConnStat, c *ConnView) error {
		cells = connCells(cells[:0], c)
		row(cells)
		return nil
	})
	return bw.Flush()
}
