package doctor

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
	"github.com/skbtrace/skbtrace/internal/event"
)

// ReadReport reads a doctor report (JSON) as a run for compare: compare.Load's
// ReportReader.
func ReadReport(name string, in io.Reader) (*compare.Run, error) {
	var rep Report
	dec := json.NewDecoder(in)
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("%s: reading a doctor report: %w", name, err)
	}
	if rep.Evidence == nil || rep.Evidence.Seconds <= 0 {
		return nil, fmt.Errorf("%s is JSON but not a doctor report (skbtrace doctor --json): it has no evidence", name)
	}
	return rep.CompareRun(name), nil
}

// CompareRun measures the report as compare measures every run.
func (rep *Report) CompareRun(name string) *compare.Run {
	ev := rep.Evidence
	r := &compare.Run{Kind: compare.KindReport, Name: name, Seconds: ev.Seconds, Limits: map[string]float64{}, Drops: map[string]uint64{}}
	r.Settings = ev.Settings()
	for _, d := range ev.devices {
		if x := d.Xmit; x != nil {
			r.HasTraffic = true
			r.Packets += x.Segs
			r.Bytes += x.Bytes
			r.Skbs += x.Skbs
		}
	}
	for _, c := range ev.CPUs {
		r.HasCPU = true
		r.CPUNs += c.Busy() * ev.Seconds * 1e9
	}
	var senderNs float64
	for _, f := range ev.Flows {
		r.TCPBytes += f.BytesAcked
		r.Retrans += uint64(f.Retrans)
		w := f.Seconds * float64(f.BytesAcked)
		for reason, share := range f.LimitShares {
			r.Limits[reason] += share * w
		}
		if len(f.LimitShares) > 0 {
			senderNs += w
		}
	}
	for k := range r.Limits {
		r.Limits[k] /= senderNs
	}
	for _, d := range ev.Drops {
		// What the stack drops in normal operation (a closed socket's
		// queue, old duplicates) is no change between runs.
		if !event.RoutineDrop(d.Reason, d.Location) {
			r.Drops[d.Reason+" at "+d.Location] += d.Count
		}
	}
	if ev.Command != nil && len(ev.Command.Argv) > 0 {
		r.Workload = []string{ev.Command.Name()}
	}
	if p := ev.Profile; p != nil {
		// The profile saw every CPU and every namespace: its CPU time and
		// packets replace what the counters gave.
		r.Phases, r.CPUNs, r.HasCPU = p.PhaseNs, p.BusyNs, true
		if t := p.Traffic; t.Counted {
			r.HasTraffic, r.Packets, r.Bytes, r.Skbs = true, t.Packets(), t.Bytes(), t.Skbs()
		}
	}
	return r
}
