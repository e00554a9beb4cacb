package event

import (
	"fmt"
	"time"

	"github.com/skbtrace/skbtrace/internal/trace"
)

// Family is a set of events a user selects with -e: the one place that
// says what a family records, where it hooks into the kernel (with its
// fallbacks per kernel), whether it is sampled, and how its events decode
// and print. A family is a file of this package holding its Family, a BPF
// file (bpf/*.bpf.c, its ABI in events.h) and a line in Families; one that
// aggregates in kernel maps adds its drain to collect.
type Family struct {
	ID          uint16 // enum event_family, the key of loss accounting
	Name        string
	Description string
	// Hooks are the family's attach points, each with its alternatives in
	// order of preference: tracepoints first, kernel functions where a
	// kernel lacks the tracepoint. The first that loads and attaches is used.
	Hooks [][]Hook
	// PacketFiltered, where set, stands for Hooks under a packet filter
	// (--filter): a count Hooks take per poll must then be taken per packet,
	// the only place the filter can judge.
	PacketFiltered [][]Hook
	// Optional are attach points the family runs without, at the cost each names.
	Optional []OptionalSlot
	// Consts are switches (wire.Var...) of programs the family shares with
	// others, for its Hooks: PacketFiltered's hooks run without them.
	Consts map[string]any
	// PerPacket families fire for every packet, skb or socket call: by
	// default they are sampled, attached for a share of each interval
	// (collect.DefaultSample); naming them with -e records them whole.
	PerPacket bool
	// Paused names the variable that stops the family's part of a program
	// it shares with a family that runs all the time: sampling sets it
	// rather than detaching that program.
	Paused string
	// UnderWay, where set, names the family's counts of what its hooks
	// follow to an end (bytes on their way): sampling sets Paused at a
	// window's end, so nothing new begins, and detaches the family's hooks
	// only once these read zero and Fresh is older than FreshFor, so what
	// began is followed to its end (a byte's way behind a deep queue
	// outlasts a 50 ms window: detached with it, only the short ways would
	// be timed).
	UnderWay []string
	// Fresh names a variable holding when (CLOCK_MONOTONIC ns) the family
	// last began to wait for something; FreshFor is how long that keeps
	// its hooks attached.
	Fresh    string
	FreshFor time.Duration
	// Events are the event types the family writes.
	Events []EventKind
}

// EventKind is one event type: its name and how it decodes and prints.
type EventKind struct {
	Type   Type
	Action string // the name in the text and JSON forms
	// decode fills ev from a record of this type (d.action is Action).
	decode func(d Decoder, rec trace.Record, ev *Event) (bool, error)
	// Fields lists the event's fields, in order, for the text and JSON
	// forms. Nil for tcp_conn and tcp_sendlim, whose lines are the seed's
	// own format (report.AppendText).
	Fields func(f Fields, ev *Event, names Names)
}

// Families lists every family in the order `skbtrace events` prints them.
var Families = []*Family{
	&tcpConn, &tcpSendlim, &tcpCong, &tcpRetrans, &tcpRTT, &tcpReset, &tcpRcvbuf, &skLimit,
	&skbDrop, &devXmit, &devRecv, &napiPoll, &softirq, &qdisc, &sockIO, &qdiscDelay, &tcpStage,
}

// kinds indexes the event types of Families.
var kinds = indexKinds(Families)

func indexKinds(fams []*Family) []*EventKind {
	var out []*EventKind
	for _, f := range fams {
		for i := range f.Events {
			k := &f.Events[i]
			for int(k.Type) >= len(out) {
				out = append(out, nil)
			}
			out[k.Type] = k
		}
	}
	return out
}

// Kind is an event type's entry, or nil for a type this build does not know.
func (t Type) Kind() *EventKind {
	if int(t) < len(kinds) {
		return kinds[t]
	}
	return nil
}

// ByName finds a family by the name -e takes.
func ByName(name string) (*Family, bool) {
	for _, f := range Families {
		if f.Name == name {
			return f, true
		}
	}
	return nil, false
}

// FamilyName names a family by its id; an id this build does not know (a
// newer recorder's) is named by its number.
func FamilyName(id uint16) string {
	for _, f := range Families {
		if f.ID == id {
			return f.Name
		}
	}
	return fmt.Sprintf("family%d", id)
}
