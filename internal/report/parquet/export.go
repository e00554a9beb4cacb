// Package parquet exports a trace as Parquet tables: the events of each
// family, one row per connection as stat sees it, and per-second series per
// flow and per device. Every row carries the recording's host metadata, so
// the exports of many hosts can be queried as one table (README-section.md
// lists the tables and columns).
package parquet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	pq "github.com/parquet-go/parquet-go"

	"github.com/skbtrace/skbtrace/internal/analyze"
	"github.com/skbtrace/skbtrace/internal/event"
)

const (
	// rowGroupRows bounds a row group: the writer keeps one row group's
	// pages in memory per table.
	rowGroupRows = 64 << 10
	// batchRows are handed to the writer at once, which converts them to
	// columns; fewer calls amortize its per-call work.
	batchRows = 1024
)

// Tables written at Close, besides the events of each family (flow_series
// is written as the trace is read).
const (
	flowsTable        = "flows"
	flowSeriesTable   = "flow_series"
	deviceSeriesTable = "device_series"
)

// families are the event types; each has its table, named by its action.
var families = []event.Type{
	event.TypeTCPConn, event.TypeTCPSendlim, event.TypeTCPCong, event.TypeTCPRetrans, event.TypeTCPRTT,
	event.TypeTCPReset, event.TypeTCPRcvbuf, event.TypeSkLimit, event.TypeSkbDrop, event.TypeDevXmit,
	event.TypeDevRecv, event.TypeNapiPoll, event.TypeSoftirq, event.TypeQdisc, event.TypeSockIO, event.TypeQdiscDelay, event.TypeTCPStage,
}

// Exporter writes the tables of one trace into a directory.
type Exporter struct {
	// dir is where the tables are written, a staging directory inside
	// final; Close moves them into final only once all are written.
	dir, final string
	written    []string // the tables commit moved into final
	sum        *analyze.Summary
	meta       meta
	stat       *analyze.Stat
	series     *series // nil until the header is known
	str        strCache
	// open are the event tables created so far, in order, for Close.
	open []closer
	err  error // the first write error; Add refuses to go on after it

	conn       *table[tcpConnRow]
	sendlim    *table[tcpSendlimRow]
	cong       *table[tcpCongRow]
	retrans    *table[tcpRetransRow]
	rtt        *table[tcpRTTRow]
	reset      *table[tcpResetRow]
	rcvbuf     *table[tcpRcvbufRow]
	skLimit    *table[skLimitRow]
	drop       *table[skbDropRow]
	xmit       *table[devRow]
	recv       *table[devRow]
	napi       *table[napiRow]
	softirq    *table[softirqRow]
	qdisc      *table[qdiscRow]
	sockIO     *table[sockIORow]
	qdiscDelay *table[qdiscDelayRow]
	stage      *table[tcpStageRow]
	// flowSeries is written as the flows' seconds end (series.flush).
	flowSeries *table[flowSeriesRow]
}

// New starts an export into dir (created if missing). sum is the summary
// analyze.Replay fills: its header and name tables are read as events
// arrive, and again at Close for the tables written then. The directory
// holds one export: when Close has written every table, the tables of a
// previous export into it are removed, so none of another trace's families
// is left behind to be queried with this one. Until then, and after a
// failed Close or Discard, dir keeps what it held.
func New(dir string, sum *analyze.Summary) (*Exporter, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the export directory: %w", err)
	}
	staging, err := os.MkdirTemp(dir, ".export-*")
	if err != nil {
		return nil, fmt.Errorf("creating the export's staging directory: %w", err)
	}
	return &Exporter{dir: staging, final: dir, sum: sum, stat: analyze.NewStat(), str: newStrCache()}, nil
}

// start takes the recording's header, which Replay reads before the events.
func (x *Exporter) start() {
	x.meta = metaOf(x.sum)
	x.series = newSeries(x.meta.RecordingStart)
}

func filePath(dir, name string) string { return filepath.Join(dir, name+".parquet") }

// Add takes one event; events arrive in sequence order from analyze.Replay.
func (x *Exporter) Add(ev *event.Event) error {
	if x.err != nil {
		return x.err
	}
	if x.series == nil {
		x.start()
	}
	x.stat.Add(ev)
	x.series.add(ev)
	err := x.addRow(ev)
	if err == nil {
		err = x.flushSeries(false)
	}
	if err != nil {
		x.err = err
		return err
	}
	return nil
}

// Close writes the tables built from the whole trace, flushes and closes
// every file, and returns the first error.
func (x *Exporter) Close() error {
	if x.series == nil {
		x.start()
	}
	err := x.err
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	if err == nil {
		keep(x.flushSeries(true))
	}
	for _, t := range x.open {
		keep(t.close())
	}
	if x.flowSeries != nil {
		keep(x.flowSeries.close())
	}
	keep(x.writeFlows())
	keep(x.writeDeviceSeries())
	if err != nil {
		os.RemoveAll(x.dir)
		return err
	}
	return x.commit()
}

// Discard ends an export without writing it: the directory keeps what it held.
func (x *Exporter) Discard() {
	for _, t := range x.open {
		t.close()
	}
	if x.flowSeries != nil {
		x.flowSeries.close()
	}
	os.RemoveAll(x.dir)
}

// commit replaces the previous export's tables with the staged ones.
func (x *Exporter) commit() error {
	defer os.RemoveAll(x.dir)
	names := []string{flowsTable, flowSeriesTable, deviceSeriesTable}
	for _, t := range families {
		names = append(names, t.Action())
	}
	for _, n := range names {
		if err := os.Remove(filePath(x.final, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the previous export's %s.parquet: %w", n, err)
		}
	}
	for _, n := range names {
		err := os.Rename(filePath(x.dir, n), filePath(x.final, n))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a family the trace did not hold has no table
		}
		if err != nil {
			return fmt.Errorf("moving %s.parquet into %s: %w", n, x.final, err)
		}
		x.written = append(x.written, filePath(x.final, n))
	}
	return nil
}

// Written is the tables a committed export wrote.
func (x *Exporter) Written() []string { return x.written }

type closer interface{ close() error }

// table streams rows of type T into one Parquet file.
type table[T any] struct {
	name string
	f    *os.File
	w    *pq.GenericWriter[T]
	buf  []T
}

func createTable[T any](dir, name string) (*table[T], error) {
	f, err := os.Create(filePath(dir, name))
	if err != nil {
		return nil, fmt.Errorf("creating %s.parquet: %w", name, err)
	}
	w := pq.NewGenericWriter[T](f, pq.Compression(&pq.Zstd), pq.MaxRowsPerRowGroup(rowGroupRows))
	return &table[T]{name: name, f: f, w: w, buf: make([]T, 0, batchRows)}, nil
}

// next is a zeroed row to fill, written with its batch.
func (t *table[T]) next() (*T, error) {
	if len(t.buf) == cap(t.buf) {
		if err := t.flush(); err != nil {
			return nil, err
		}
	}
	t.buf = t.buf[:len(t.buf)+1]
	r := &t.buf[len(t.buf)-1]
	var zero T
	*r = zero
	return r, nil
}

func (t *table[T]) flush() error {
	if len(t.buf) == 0 {
		return nil
	}
	_, err := t.w.Write(t.buf)
	t.buf = t.buf[:0]
	if err != nil {
		return fmt.Errorf("writing %s.parquet: %w", t.name, err)
	}
	return nil
}

func (t *table[T]) close() error {
	err := t.flush()
	if werr := t.w.Close(); werr != nil && err == nil {
		err = fmt.Errorf("writing %s.parquet: %w", t.name, werr)
	}
	if cerr := t.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing %s.parquet: %w", t.name, cerr)
	}
	return err
}

// slot is the next row of an event table, created at its family's first event.
func slot[T any](x *Exporter, t **table[T], typ event.Type) (*T, error) {
	if *t == nil {
		tb, err := createTable[T](x.dir, typ.Action())
		if err != nil {
			return nil, err
		}
		*t = tb
		x.open = append(x.open, tb)
	}
	return (*t).next()
}
