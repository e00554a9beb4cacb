package trace

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Netns names a network namespace by its inode, as events carry only the inode.
type Netns struct {
	Inode uint32
	Name  string
}

// Loss counts events one CPU could not queue for one family since the previous loss record.
type Loss struct {
	Family uint16
	CPU    uint32
	Count  uint64
	BootNs uint64 // when the loss was noticed
}

// End closes a recording that stopped normally.
type End struct {
	NextSeq uint64 // every event of the recording has a smaller sequence number
	BootNs  uint64
}

// AppendNetns adds a namespace record.
func (w *Writer) AppendNetns(n Netns) error {
	b := w.order.AppendUint32(make([]byte, 0, 4+len(n.Name)), n.Inode)
	return w.Append(RecordNetns, append(b, n.Name...))
}

// AppendLoss adds a loss record.
func (w *Writer) AppendLoss(l Loss) error {
	var b [24]byte
	w.order.PutUint16(b[0:], l.Family)
	w.order.PutUint32(b[4:], l.CPU)
	w.order.PutUint64(b[8:], l.Count)
	w.order.PutUint64(b[16:], l.BootNs)
	return w.Append(RecordLoss, b[:])
}

// AppendSettings adds the settings record; body is the settings as JSON.
func (w *Writer) AppendSettings(body []byte) error {
	return w.Append(RecordSettings, body)
}

// Resume starts the events that follow at FirstSeq (RecordResume).
type Resume struct {
	FirstSeq uint64
	Cause    uint32
}

// Trigger is a flight-recorder trigger that fired (RecordTrigger).
type Trigger struct {
	Seq    uint64 // of the event that fired it
	TimeNs int64  // the event's wall-clock time
	// Suppressed counts the firings since the previous trigger record that
	// opened no window of their own, over the rate limit.
	Suppressed uint64
	Expr       string // the trigger as given, e.g. "srtt>50ms"
	What       string // the event, in a few words
}

// AppendResume adds a resume record.
func (w *Writer) AppendResume(r Resume) error {
	var b [16]byte
	w.order.PutUint64(b[0:], r.FirstSeq)
	w.order.PutUint32(b[8:], r.Cause)
	return w.Append(RecordResume, b[:])
}

// AppendTrigger adds a trigger record.
func (w *Writer) AppendTrigger(t Trigger) error {
	b := make([]byte, 28, 28+len(t.Expr)+len(t.What))
	w.order.PutUint64(b[0:], t.Seq)
	w.order.PutUint64(b[8:], uint64(t.TimeNs))
	w.order.PutUint64(b[16:], t.Suppressed)
	w.order.PutUint16(b[24:], uint16(min(len(t.Expr), 0xffff)))
	b = append(b, t.Expr[:min(len(t.Expr), 0xffff)]...)
	return w.Append(RecordTrigger, append(b, t.What...))
}

// DecodeResume decodes a RecordResume body.
func DecodeResume(o ByteOrder, b []byte) (Resume, error) {
	if len(b) < 16 {
		return Resume{}, fmt.Errorf("resume record of %d bytes is shorter than 16", len(b))
	}
	return Resume{FirstSeq: o.Uint64(b), Cause: o.Uint32(b[8:])}, nil
}

// DecodeTrigger decodes a RecordTrigger body.
func DecodeTrigger(o ByteOrder, b []byte) (Trigger, error) {
	if len(b) < 28 {
		return Trigger{}, fmt.Errorf("trigger record of %d bytes is shorter than 28", len(b))
	}
	n := int(o.Uint16(b[24:]))
	if len(b) < 28+n {
		return Trigger{}, fmt.Errorf("trigger expression of %d bytes overruns its record", n)
	}
	return Trigger{Seq: o.Uint64(b), TimeNs: int64(o.Uint64(b[8:])), Suppressed: o.Uint64(b[16:]),
		Expr: string(b[28 : 28+n]), What: string(b[28+n:])}, nil
}

// AppendEnd adds the end record.
func (w *Writer) AppendEnd(e End) error {
	var b [16]byte
	w.order.PutUint64(b[0:], e.NextSeq)
	w.order.PutUint64(b[8:], e.BootNs)
	return w.Append(RecordEnd, b[:])
}

// DecodeNetns decodes a RecordNetns body.
func DecodeNetns(o ByteOrder, b []byte) (Netns, error) {
	if len(b) < 4 {
		return Netns{}, fmt.Errorf("netns record of %d bytes is shorter than 4", len(b))
	}
	return Netns{Inode: o.Uint32(b), Name: string(b[4:])}, nil
}

// DecodeLoss decodes a RecordLoss body.
func DecodeLoss(o ByteOrder, b []byte) (Loss, error) {
	if len(b) < 24 {
		return Loss{}, fmt.Errorf("loss record of %d bytes is shorter than 24", len(b))
	}
	return Loss{Family: o.Uint16(b), CPU: o.Uint32(b[4:]), Count: o.Uint64(b[8:]), BootNs: o.Uint64(b[16:])}, nil
}

// DecodeEnd decodes a RecordEnd body.
func DecodeEnd(o ByteOrder, b []byte) (End, error) {
	if len(b) < 16 {
		return End{}, fmt.Errorf("end record of %d bytes is shorter than 16", len(b))
	}
	return End{NextSeq: o.Uint64(b), BootNs: o.Uint64(b[8:])}, nil
}

// Enum names the values of one kernel enum.
type Enum struct {
	Kind  uint16
	Names map[uint32]string
}

// Symbol names a kernel text address.
type Symbol struct {
	Addr uint64
	Name string
}

// AppendEnum adds an enum record.
func (w *Writer) AppendEnum(e Enum) error {
	b := w.order.AppendUint16(nil, e.Kind)
	b = w.order.AppendUint16(b, 0)
	for _, v := range slices.Sorted(maps.Keys(e.Names)) {
		name := e.Names[v]
		if len(name) > 0xffff {
			name = name[:0xffff]
		}
		b = w.order.AppendUint32(b, v)
		b = w.order.AppendUint16(b, uint16(len(name)))
		b = append(b, name...)
	}
	return w.Append(RecordEnum, b)
}

// AppendSymbol adds a symbol record.
func (w *Writer) AppendSymbol(s Symbol) error {
	b := w.order.AppendUint64(make([]byte, 0, 8+len(s.Name)), s.Addr)
	return w.Append(RecordSym, append(b, s.Name...))
}

// DecodeEnum decodes a RecordEnum body.
func DecodeEnum(o ByteOrder, b []byte) (Enum, error) {
	if len(b) < 4 {
		return Enum{}, fmt.Errorf("enum record of %d bytes is shorter than 4", len(b))
	}
	e := Enum{Kind: o.Uint16(b), Names: map[uint32]string{}}
	for b = b[4:]; len(b) > 0; {
		if len(b) < 6 {
			return Enum{}, fmt.Errorf("enum record entry of %d bytes is shorter than 6", len(b))
		}
		v, n := o.Uint32(b), int(o.Uint16(b[4:]))
		if len(b) < 6+n {
			return Enum{}, fmt.Errorf("enum name of %d bytes overruns its record", n)
		}
		e.Names[v] = string(b[6 : 6+n])
		b = b[6+n:]
	}
	return e, nil
}

// DecodeSymbol decodes a RecordSym body.
func DecodeSymbol(o ByteOrder, b []byte) (Symbol, error) {
	if len(b) < 8 {
		return Symbol{}, fmt.Errorf("symbol record of %d bytes is shorter than 8", len(b))
	}
	return Symbol{Addr: o.Uint64(b), Name: string(b[8:])}, nil
}

// Sample says that some families were attached only part of each interval:
// their events cover those windows exactly, so their rates are right and
// their totals cover Share of the recording.
type Sample struct {
	Share    float64 // of each interval, 0 < Share < 1
	Interval uint64  // ns
	Families []string
}

// AppendSample adds a sample record.
func (w *Writer) AppendSample(s Sample) error {
	b := w.order.AppendUint64(make([]byte, 0, 16+64), uint64(s.Share*1e6))
	b = w.order.AppendUint64(b, s.Interval)
	return w.Append(RecordSample, append(b, strings.Join(s.Families, ",")...))
}

// DecodeSample decodes a RecordSample body.
func DecodeSample(o ByteOrder, b []byte) (Sample, error) {
	if len(b) < 16 {
		return Sample{}, fmt.Errorf("sample record of %d bytes is shorter than 16", len(b))
	}
	ppm := o.Uint64(b)
	if ppm == 0 || ppm >= 1e6 {
		return Sample{}, fmt.Errorf("sample record with a share of %d parts per million", ppm)
	}
	s := Sample{Share: float64(ppm) / 1e6, Interval: o.Uint64(b[8:])}
	if len(b) > 16 {
		s.Families = strings.Split(string(b[16:]), ",")
	}
	return s, nil
}
