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
	// Healthy is set when nothing rose above info, traffic moved and the
	// observed command did not fail: what limited the run.
	Healthy string `json:"healthy,omitempty"`
	// Failed says how the observed command failed (its status, its last
	// words): such a run is never healthy.
	Failed string `json:"failed,omitempty"`
	// NoTraffic is set when nothing moved enough to judge: no finding is
	// then more than info.
	NoTraffic string `json:"no_traffic,omitempty"`
	// Throughput is what the run reached (iperf3's summary, else the
	// observed flows' bytes).
	Throughput string    `json:"throughput,omitempty"`
	Notes      []string  `json:"notes,omitempty"`
	Evidence   *Evidence `json:"evidence"`
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
	if r.Failed != "" {
		fmt.Fprintf(&b, "failed: %s\n", r.Failed)
	}
	if len(r.Findings) == 0 {
		b.WriteString("no findings\n")
	}
	finding.AppendText(&b, r.Findings)
	if r.NoTraffic != "" {
		fmt.Fprintf(&b, "no traffic observed: %s\n", r.NoTraffic)
	}
	if r.Healthy != "" {
		fmt.Fprintf(&b, "healthy: %s\n", r.Healthy)
	}
	if r.Throughput != "" {
		fmt.Fprintf(&b, "throughput: %s\n", r.Throughput)
	}
	for _, p := range r.peers() {
		fmt.Fprintf(&b, "peer: %s\n", p)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// peers says whose evidence joined the report (--peer).
func (r *Report) peers() []string {
	if r.Evidence == nil {
		return nil
	}
	var out []string
	for _, p := range r.Evidence.Peers {
		who := p.URL
		if p.Host != "" {
			who = fmt.Sprintf("%s (%s)", p.Host, p.URL)
		}
		out = append(out, fmt.Sprintf("the evidence of the agent at %s joined: it saw the other end of %d of this host's flows", who, p.Flows))
	}
	return out
}
