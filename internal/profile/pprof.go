package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// kernelMapping names the kernel's frames in pprof, as perf does.
const kernelMapping = "[kernel.kallsyms]"

// metaComment prefixes the comment that carries Meta as JSON: pprof readers
// show comments as text, compare reads them back.
const metaComment = "skbtrace-meta "

// WritePprof writes the profile as gzipped pprof protobuf (go tool pprof,
// Pyroscope, speedscope): two values per sample, the count and the CPU
// nanoseconds it stands for, labelled with comm, context and phase.
func (p *Profile) WritePprof(w io.Writer) error {
	meta, err := json.Marshal(p.Meta)
	if err != nil {
		return fmt.Errorf("writing pprof: %w", err)
	}
	ns := int64(p.NsPerSample())
	out := &profile.Profile{
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DefaultSampleType: "cpu",
		PeriodType:        &profile.ValueType{Type: p.Meta.Clock, Unit: "nanoseconds"},
		Period:            ns,
		DurationNanos:     int64(p.Meta.Seconds * 1e9),
		Comments:          []string{metaComment + string(meta)},
	}
	kernel := &profile.Mapping{ID: 1, File: kernelMapping}
	user := &profile.Mapping{ID: 2, File: "[user]"}
	out.Mapping = []*profile.Mapping{kernel, user}
	type locKey struct {
		name   string
		kernel bool
	}
	locs := map[locKey]*profile.Location{}
	loc := func(name string, isKernel bool) *profile.Location {
		k := locKey{name, isKernel}
		if l, ok := locs[k]; ok {
			return l
		}
		fn := &profile.Function{ID: uint64(len(out.Function) + 1), Name: name, SystemName: name}
		out.Function = append(out.Function, fn)
		m := user
		if isKernel {
			m = kernel
		}
		l := &profile.Location{ID: uint64(len(out.Location) + 1), Mapping: m, Line: []profile.Line{{Function: fn}}}
		out.Location = append(out.Location, l)
		locs[k] = l
		return l
	}
	for _, s := range p.Samples {
		ps := &profile.Sample{
			Value: []int64{int64(s.Count), int64(s.Count) * ns},
			Label: map[string][]string{"comm": {s.Comm}, "context": {string(s.Context)}, "phase": {string(s.Phase)},
				"cpu": {strconv.Itoa(s.CPU)}},
			NumLabel: map[string][]int64{"pid": {int64(s.Pid)}, "tgid": {int64(s.Tgid)}},
		}
		for _, f := range s.Kernel {
			ps.Location = append(ps.Location, loc(f, true))
		}
		for _, f := range s.User {
			ps.Location = append(ps.Location, loc(f, false))
		}
		out.Sample = append(out.Sample, ps)
	}
	if err := out.CheckValid(); err != nil {
		return fmt.Errorf("writing pprof: %w", err)
	}
	if err := out.Write(w); err != nil {
		return fmt.Errorf("writing pprof: %w", err)
	}
	return nil
}

// ErrNotSkbtrace says a pprof profile lacks skbtrace's metadata.
var ErrNotSkbtrace = errors.New("a pprof profile without skbtrace's metadata (packet counts, settings): take it with skbtrace profile")

// ReadPprof reads a profile WritePprof wrote.
func ReadPprof(r io.Reader) (*Profile, error) {
	pp, err := profile.Parse(r)
	// pprof flattens its errors to text.
	if err != nil && strings.Contains(err.Error(), io.ErrUnexpectedEOF.Error()) {
		return nil, fmt.Errorf("reading pprof: the file is truncated (%w)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading pprof: %w", err)
	}
	p := &Profile{}
	found := false
	for _, c := range pp.Comments {
		if m, ok := strings.CutPrefix(c, metaComment); ok {
			if err := json.Unmarshal([]byte(m), &p.Meta); err != nil {
				return nil, fmt.Errorf("reading pprof: skbtrace metadata: %w", err)
			}
			found = true
		}
	}
	if !found {
		return nil, ErrNotSkbtrace
	}
	if len(pp.SampleType) == 0 || pp.SampleType[0].Type != "samples" {
		return nil, fmt.Errorf("reading pprof: the first sample value is %v, not samples", pp.SampleType)
	}
	for _, ps := range pp.Sample {
		if len(ps.Value) == 0 || ps.Value[0] < 0 {
			return nil, errors.New("reading pprof: a sample without a count")
		}
		s := Sample{Count: uint64(ps.Value[0]), Comm: label(ps, "comm"), Context: Context(label(ps, "context")),
			Phase: Phase(label(ps, "phase")), Pid: uint32(numLabel(ps, "pid")), Tgid: uint32(numLabel(ps, "tgid")),
		}
		s.CPU, _ = strconv.Atoi(label(ps, "cpu"))
		for _, l := range ps.Location {
			if len(l.Line) == 0 || l.Line[0].Function == nil {
				continue
			}
			name := l.Line[0].Function.Name
			if l.Mapping != nil && l.Mapping.File == kernelMapping {
				s.Kernel = append(s.Kernel, name)
			} else {
				s.User = append(s.User, name)
			}
		}
		if s.Phase == "" {
			Classify(&s)
		}
		p.Samples = append(p.Samples, s)
	}
	return p, nil
}

func label(s *profile.Sample, k string) string {
	if v := s.Label[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func numLabel(s *profile.Sample, k string) int64 {
	if v := s.NumLabel[k]; len(v) > 0 {
		return v[0]
	}
	return 0
}
