package perfetto

// The exports' parser and checker: every test reads its output through
// validate, which holds it to the trace-event format Perfetto loads.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// traceEvent is one parsed trace event, times in exact nanoseconds.
type traceEvent struct {
	Name, Ph, Cat, S string
	Ts, Dur          int64
	Pid, Tid         uint32
	Args             map[string]any
}

// document is a parsed export.
type document struct {
	Events   []traceEvent
	Unit     string
	Metadata map[string]any
}

// parseMicros reads a JSON number of microseconds as exact nanoseconds.
func parseMicros(n json.Number) (int64, error) {
	s := string(n)
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 3 || strings.ContainsAny(s, "eE") {
		return 0, fmt.Errorf("%s is not microseconds with at most ns precision", s)
	}
	us, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	ns := int64(0)
	if frac != "" {
		f, err := strconv.ParseUint(frac+strings.Repeat("0", 3-len(frac)), 10, 32)
		if err != nil {
			return 0, err
		}
		ns = int64(f)
	}
	return us*1000 + ns, nil
}

// validate parses an export and checks every event against the trace
// event format as Perfetto's importer reads it: fields and their JSON types
// per phase, names for every process and thread, tids that belong to one
// process and are no process's pid, and complete events of one thread that
// do not overlap.
func validate(t *testing.T, out []byte) *document {
	t.Helper()
	var raw struct {
		TraceEvents     []map[string]any `json:"traceEvents"`
		DisplayTimeUnit string           `json:"displayTimeUnit"`
		Metadata        map[string]any   `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("the export is not one JSON object of the format: %v\n%s", err, tail(out))
	}
	if dec.More() {
		t.Fatal("data after the JSON object")
	}
	if raw.TraceEvents == nil {
		t.Fatal("no traceEvents array")
	}
	doc := &document{Unit: raw.DisplayTimeUnit, Metadata: raw.Metadata}
	allowed := map[string]bool{"name": true, "ph": true, "cat": true, "ts": true, "dur": true, "pid": true, "tid": true, "s": true, "args": true}
	for i, m := range raw.TraceEvents {
		errf := func(format string, a ...any) {
			t.Helper()
			t.Errorf("event %d %v: %s", i, m, fmt.Sprintf(format, a...))
		}
		for k := range m {
			if !allowed[k] {
				errf("unexpected field %q", k)
			}
		}
		var e traceEvent
		var ok bool
		if e.Name, ok = m["name"].(string); !ok || e.Name == "" {
			errf("name is not a non-empty string")
		}
		e.Ph, _ = m["ph"].(string)
		if !strings.Contains("XCiM", e.Ph) || len(e.Ph) != 1 {
			errf("ph %v is not one of X C i M", m["ph"])
			continue
		}
		if c, present := m["cat"]; present {
			if e.Cat, ok = c.(string); !ok || e.Cat == "" {
				errf("cat is not a non-empty string")
			}
		} else if e.Ph != "M" {
			errf("no cat")
		}
		ts, ok := m["ts"].(json.Number)
		if !ok {
			errf("ts is not a number")
		} else if v, err := parseMicros(ts); err != nil || v < 0 {
			errf("ts %s: %v, or negative", ts, err)
		} else {
			e.Ts = v
		}
		for _, k := range []string{"pid", "tid"} {
			n, ok := m[k].(json.Number)
			v, err := strconv.ParseUint(string(n), 10, 32)
			if !ok || err != nil || v == 0 {
				errf("%s %v is not a positive 32-bit integer", k, m[k])
			}
			if k == "pid" {
				e.Pid = uint32(v)
			} else {
				e.Tid = uint32(v)
			}
		}
		if a, present := m["args"]; present {
			if e.Args, ok = a.(map[string]any); !ok {
				errf("args is not an object")
			}
		}
		_, hasDur := m["dur"]
		_, hasS := m["s"]
		switch e.Ph {
		case "X":
			d, ok := m["dur"].(json.Number)
			if v, err := parseMicros(d); !ok || err != nil || v < 0 {
				errf("dur %v is not a number >= 0", m["dur"])
			} else {
				e.Dur = v
			}
		case "C":
			if len(e.Args) == 0 {
				errf("a counter without values")
			}
			for k, v := range e.Args {
				n, ok := v.(json.Number)
				f, err := n.Float64()
				if !ok || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
					errf("counter value %s=%v is not a finite number", k, v)
				}
			}
		case "i":
			if e.S, ok = m["s"].(string); !ok || (e.S != "g" && e.S != "p" && e.S != "t") {
				errf("s %v is not one of g p t", m["s"])
			}
			if e.S == "p" && e.Tid != e.Pid {
				errf("a process instant on tid %d of pid %d", e.Tid, e.Pid)
			}
		case "M":
			if e.Name != "process_name" && e.Name != "thread_name" {
				errf("metadata %q is neither process_name nor thread_name", e.Name)
			}
			if n, ok := e.Args["name"].(string); !ok || n == "" {
				errf("args.name is not a non-empty string")
			}
		}
		if hasDur && e.Ph != "X" {
			errf("dur on a %s event", e.Ph)
		}
		if hasS && e.Ph != "i" {
			errf("s on a %s event", e.Ph)
		}
		doc.Events = append(doc.Events, e)
	}

	pidOf := map[uint32]uint32{}
	pids := map[uint32]bool{}
	named := map[[3]any]bool{}
	for _, e := range doc.Events {
		if p, seen := pidOf[e.Tid]; seen && p != e.Pid {
			t.Errorf("tid %d is in pids %d and %d", e.Tid, p, e.Pid)
		}
		pidOf[e.Tid] = e.Pid
		pids[e.Pid] = true
		if e.Ph == "M" {
			named[[3]any{e.Name, e.Pid, e.Tid}] = true
		}
	}
	for tid, pid := range pidOf {
		if tid != pid && pids[tid] {
			t.Errorf("tid %d of pid %d is also a pid", tid, pid)
		}
	}
	for pid := range pids {
		if !named[[3]any{"process_name", pid, pid}] {
			t.Errorf("pid %d has no process_name", pid)
		}
	}
	for _, e := range doc.Events {
		if (e.Ph == "X" || e.Ph == "i" && e.S == "t") && !named[[3]any{"thread_name", e.Pid, e.Tid}] {
			t.Errorf("%s %q is on tid %d, which has no thread_name", e.Ph, e.Name, e.Tid)
		}
	}
	spans := map[uint32][]traceEvent{}
	for _, e := range doc.Events {
		if e.Ph == "X" {
			spans[e.Tid] = append(spans[e.Tid], e)
		}
	}
	for tid, ss := range spans {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Ts < ss[j].Ts })
		for i := 1; i < len(ss); i++ {
			if ss[i].Ts < ss[i-1].Ts+ss[i-1].Dur {
				t.Errorf("tid %d: %q at %d overlaps %q at %d..%d", tid, ss[i].Name, ss[i].Ts, ss[i-1].Name, ss[i-1].Ts, ss[i-1].Ts+ss[i-1].Dur)
			}
		}
	}
	return doc
}

func tail(b []byte) []byte {
	return b[max(0, len(b)-2000):]
}

// find returns the events with the given phase and name.
func (d *document) find(ph, name string) []traceEvent {
	var out []traceEvent
	for _, e := range d.Events {
		if e.Ph == ph && e.Name == name {
			out = append(out, e)
		}
	}
	return out
}

// names are the last names given to each pid (process) and tid (thread),
// in ts order, as importers that sort by ts apply them.
func (d *document) names(kind string) map[uint32]string {
	var ms []traceEvent
	for _, e := range d.Events {
		if e.Ph == "M" && e.Name == kind {
			ms = append(ms, e)
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Ts < ms[j].Ts })
	out := map[uint32]string{}
	for _, e := range ms {
		id := e.Tid
		if kind == "process_name" {
			id = e.Pid
		}
		out[id] = e.Args["name"].(string)
	}
	return out
}

func (d *document) tidNamed(t *testing.T, name string) uint32 {
	t.Helper()
	for tid, n := range d.names("thread_name") {
		if n == name {
			return tid
		}
	}
	t.Fatalf("no thread %q in %v", name, d.names("thread_name"))
	return 0
}

func (d *document) pidNamed(t *testing.T, name string) uint32 {
	t.Helper()
	for pid, n := range d.names("process_name") {
		if n == name {
			return pid
		}
	}
	t.Fatalf("no process %q in %v", name, d.names("process_name"))
	return 0
}

// counter is a counter's values in ts order, as (ts - wall, value).
func (d *document) counter(t *testing.T, name, key string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, e := range d.find("C", name) {
		f, err := e.Args[key].(json.Number).Float64()
		if err != nil {
			t.Fatalf("counter %q has no %q: %v", name, key, e.Args)
		}
		out = append(out, [2]float64{float64(e.Ts - wall), f})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	f, err := n.Float64()
	if !ok || err != nil {
		t.Fatalf("%v is not a number", v)
	}
	return f
}
