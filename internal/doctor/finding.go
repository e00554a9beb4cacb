package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
)

// Report is the doctor's verdict.
type Report struct {
	Findings []finding.Finding `json:"findings"`
	// Healthy is set when nothing rose above info: what limited the run.
	Healthy  string    `json:"healthy,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
	Evidence *Evidence `json:"evidence"`
}

// Top is the first finding of at least the given severity, or nil.
func (r *Report) Top(min finding.Severity) *finding.Finding {
	for i := range r.Findings {
		if r.Findings[i].Severity >= min {
			return &r.Findings[i]
		}
	}
	return nil
}

// WriteJSON writes the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "->" stays "->": the output is read, not embedded in a page
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for people: findings first, evidence indented.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if len(r.Findings) == 0 {
		b.WriteString("no findings\n")
	}
	finding.AppendText(&b, r.Findings)
	if r.Healthy != "" {
		fmt.Fprintf(&b, "healthy: %s\n", r.Healthy)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
