package lab

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/skbtrace/skbtrace/internal/units"
)

// WriteCalibrationTable writes, per calibrated fault run of reports, the
// doctor's top finding, the limit it named, the remedy as applied and the
// throughput healthy, with the fault and with the remedy, as a Markdown
// table: docs/findings.md's calibration table is made by it from one run's
// `lab run --doctor --calibrate --json`. Run-specific names (namespaces,
// devices, process ids, rule handles) are shown as ID, PID and H so that
// two runs' tables differ only where their results do.
func WriteCalibrationTable(w io.Writer, reports []Report) error {
	var b strings.Builder
	b.WriteString("| scenario | top finding | limit named | first remedy, as applied | healthy | with the fault | remedied | restored | gained (of the control's) | estimated |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range reports {
		r := &reports[i]
		if r.RemedyFrom == "" && r.RemedyFailed == "" {
			continue
		}
		top, limit := "-", "-"
		if d := r.Doctor; d != nil && d.Top != "" {
			top = d.Top
			for _, f := range d.Findings {
				if f.ID == d.Top && f.Limit != nil {
					limit = "`" + f.Limit.Kind + "`"
					break
				}
			}
		}
		remedy := "the scenario's own fix (no limit named)"
		if r.RemedyFrom != RemedyScenario {
			remedy = "`" + anonymous(r.Remedy) + "`"
		}
		if r.RemedyFrom == RemedyWorkload {
			remedy += " (workload switch)"
		}
		switch {
		case r.RemedyFailed != "":
			remedy += " (failed: " + anonymous(r.RemedyFailed) + ")"
		case r.RemedyPartial != "":
			remedy += " (held to no bar: " + r.RemedyPartial + ")"
		}
		gained := fmt.Sprintf("%s (%s)", units.Percent(r.Gain), units.Percent(r.ControlCost))
		if r.LatencyGain > 0 {
			gained = fmt.Sprintf("%s (its wait %s less)", units.Percent(r.Gain), units.Percent(r.LatencyGain))
		}
		restored := units.Percent(r.Restored)
		if r.Restored < RestoreBar && r.RestoreWithinSpread() != "" {
			restored += " (within the runs' spread)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, top, limit, remedy,
			rateText(r, r.ControlBps, r.ControlOps), rateText(r, r.FaultBps, r.FaultOps), rateText(r, r.FixedBps, r.FixedOps),
			restored, gained, units.Percent(r.PredictedImpact))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// rateText is a run's throughput as its load measures it.
func rateText(r *Report, bps, ops float64) string {
	if r.RunsInOps {
		return fmt.Sprintf("%.0f ops/s", ops)
	}
	return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
}

var anonymousNames = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`skbtrace-\d+-\d+-`), "skbtrace-ID-"},
	{regexp.MustCompile(`skbtrace-lab-[0-9-]+`), "skbtrace-lab-ID"},
	{regexp.MustCompile(`\b(skb[a-z])\d+-\d+`), "${1}ID"},
	{regexp.MustCompile(`\[\d+\]`), "[PID]"},
	{regexp.MustCompile(`(-p 0|pid) \d+`), "$1 PID"},
	{regexp.MustCompile(`handle [0-9a-f]+(::?[0-9a-f]*)?`), "handle H$1"},
	{regexp.MustCompile(`\b(link detach id|prog id) \d+`), "$1 N"},
}

// anonymous replaces the names one run gives its namespaces, devices,
// processes and rules with placeholders.
func anonymous(s string) string {
	for _, a := range anonymousNames {
		s = a.re.ReplaceAllString(s, a.with)
	}
	return s
}
