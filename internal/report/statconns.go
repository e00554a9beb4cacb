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

	"github.com/skbtrace/skbtrace/internal/units"
)

// stat's connections are written one at a time, in text and in JSON: a
// trace can have hundreds of thousands of them.

// WriteStatJSON writes the summary as one JSON document, the connections
// one at a time: a trace can have hundreds of thousands, and the encoder
// holds a whole document in memory before writing it.
func WriteStatJSON(w io.Writer, v StatView) error {
	conns := v.Connections
	v.Connections = []ConnView{}
	var head bytes.Buffer
	if err := statEncoder(&head, "").Encode(v); err != nil {
		return err
	}
	// The rest of the document is small; the connections go between the
	// brackets of its empty list (a string value cannot hold this text:
	// its quotes would be escaped).
	const empty = `"connections": []`
	doc := head.Bytes()
	at := bytes.Index(doc, []byte(empty))
	if at < 0 {
		return errors.New("encoding the summary: no connections list in the document")
	}
	bw := bufio.NewWriter(w)
	bw.Write(doc[:at+len(empty)-1])
	var row bytes.Buffer
	enc := statEncoder(&row, "    ")
	for i := range conns {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n    ")
		row.Reset()
		if err := enc.Encode(&conns[i]); err != nil {
			return err
		}
		bw.Write(bytes.TrimSuffix(row.Bytes(), []byte("\n")))
	}
	if len(conns) > 0 {
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
func writeConnTable(w io.Writer, conns []ConnView) error {
	widths := make([]int, len(connHeader)-1) // the last column is not padded
	measure := func(cells []string) {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(cells[i]))
		}
	}
	measure(connHeader)
	var cells []string
	for i := range conns {
		cells = connCells(cells[:0], &conns[i])
		measure(cells)
	}
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
	for i := range conns {
		cells = connCells(cells[:0], &conns[i])
		row(cells)
	}
	return bw.Flush()
}
