package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/skbtrace/skbtrace/internal/analyze/compare"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/report/flame"
	"github.com/skbtrace/skbtrace/internal/units"
)

// WriteCompareText prints a comparison: the headline, the measures, the
// phases ranked by their share of the change, the settings that differ.
func WriteCompareText(w io.Writer, r *compare.Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "A: %s (%s, %.1f s)\nB: %s (%s, %.1f s)\n\n%s\n\n", r.A.Name, r.A.Kind, r.A.Seconds, r.B.Name, r.B.Kind, r.B.Seconds, r.Headline)
	if len(r.Metrics) > 0 {
		// A rate of bits carries its unit in its value ("8.70 Gbit/s").
		label := func(m compare.Metric) string {
			if m.Unit == "bit/s" {
				return m.Name
			}
			return m.Name + " (" + m.Unit + ")"
		}
		width := len("measure")
		for _, m := range r.Metrics {
			width = max(width, len(label(m)))
		}
		fmt.Fprintf(&b, "%-*s %13s %13s %9s\n", width, "measure", "A", "B", "change")
		var sampled []string
		for _, m := range r.Metrics {
			fmt.Fprintf(&b, "%-*s %13s %13s %9s\n", width, label(m), m.Value(m.A), m.Value(m.B), changeText(m.Change))
			if m.Sampled {
				sampled = append(sampled, m.Name)
			}
		}
		if len(sampled) > 0 {
			fmt.Fprintf(&b, "(%s: estimates from the device counters' sampled windows, %s of each interval)\n",
				strings.Join(sampled, ", "), sampleShares(r.A.TrafficShare, r.B.TrafficShare))
		}
		b.WriteString("\n")
	}
	if len(r.Phases) > 0 {
		fmt.Fprintf(&b, "%-22s %12s %12s %9s %16s\n", "phase (ns per "+r.Unit+")", "A", "B", "change", "share of change")
		for _, p := range r.Phases {
			fmt.Fprintf(&b, "%-22s %12s %12s %9s %14.0f %%\n", p.Phase, units.Short(p.A), units.Short(p.B), changeText(relChange(p.A, p.B)), 100*p.Share)
		}
		b.WriteString("\n")
	}
	if len(r.Settings) > 0 {
		b.WriteString("settings that differ:\n")
		for _, s := range r.Settings {
			fmt.Fprintf(&b, "  %-10s %s %s: %s → %s\n", s.Kind, s.Scope, s.Name, s.A, s.B)
		}
		b.WriteString("\n")
	}
	finding.AppendText(&b, r.Findings)
	_, err := io.WriteString(w, b.String())
	return err
}

// sampleShares names the share of each interval a run's counters ran:
// "5 %", or "A 5 %, B 100 %" when the runs differ.
func sampleShares(a, b float64) string {
	share := func(v float64) string {
		if v == 0 {
			v = 1 // not sampled: every interval whole
		}
		return fmt.Sprintf("%.4g %%", 100*v)
	}
	if a == b {
		return share(a)
	}
	return "A " + share(a) + ", B " + share(b)
}

func relChange(a, b float64) float64 {
	if a == 0 {
		return math.Inf(1)
	}
	return (b - a) / a
}

func changeText(c float64) string {
	if math.IsInf(c, 0) {
		return "new"
	}
	return fmt.Sprintf("%+.0f %%", 100*c)
}

// CompareJSON is compare's JSON output (docs/schema/compare.schema.json).
type CompareJSON struct {
	// A and B name the two inputs; Kind is what both are: trace, report or profile.
	A        string                  `json:"a"`
	B        string                  `json:"b"`
	Kind     compare.Kind            `json:"kind"`
	Headline string                  `json:"headline"`
	Metrics  []compare.Metric        `json:"metrics"`
	Unit     string                  `json:"unit,omitempty"`
	Phases   []compare.PhaseChange   `json:"phases,omitempty"`
	Settings []compare.SettingChange `json:"settings,omitempty"`
	Findings []finding.Finding       `json:"findings"`
}

// WriteCompareJSON writes the comparison for machines.
func WriteCompareJSON(w io.Writer, r *compare.Result) error {
	// No finding is an empty list, not null, as the schema says.
	findings := append([]finding.Finding{}, r.Findings...)
	out := CompareJSON{r.A.Name, r.B.Name, r.A.Kind, r.Headline, finite(r.Metrics), r.Unit, r.Phases, r.Settings, findings}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// finite replaces an infinite change (from zero) by JSON's nearest: null is
// not a number, so the change is left at zero and A says it was none.
func finite(ms []compare.Metric) []compare.Metric {
	out := append([]compare.Metric{}, ms...)
	for i := range out {
		if math.IsInf(out[i].Change, 0) || math.IsNaN(out[i].Change) {
			out[i].Change = 0
		}
	}
	return out
}

// CompareFlame is the differential flame graph of two profiles, each stack
// normalized per the comparison's unit, so widths are B's cost and colours
// say what grew and what shrank.
func CompareFlame(r *compare.Result) (flame.Page, error) {
	if len(r.A.Stacks) == 0 || len(r.B.Stacks) == 0 {
		return flame.Page{}, fmt.Errorf("a differential flame graph needs two profiles, not %ss", r.A.Kind)
	}
	na, nb := norm(r.A, r.Unit), norm(r.B, r.Unit)
	pg := flame.Page{Title: "skbtrace compare: " + r.A.Name + " → " + r.B.Name, Subtitle: r.Headline,
		Unit: "ns per " + r.Unit, Diff: true}
	seen := map[string]bool{}
	for _, m := range []map[string]float64{r.B.Stacks, r.A.Stacks} {
		for k := range m {
			if seen[k] {
				continue
			}
			seen[k] = true
			pg.Stacks = append(pg.Stacks, flame.Stack{Frames: strings.Split(k, ";"), Value: r.B.Stacks[k] / nb, Base: r.A.Stacks[k] / na})
		}
	}
	return pg, nil
}

func norm(run *compare.Run, unit string) float64 {
	switch unit {
	case "packet":
		return float64(run.Packets)
	case "byte":
		return float64(run.Bytes)
	}
	return run.Seconds
}
