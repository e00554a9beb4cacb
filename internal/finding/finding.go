package finding

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Severity orders findings; the JSON form is its name.
type Severity int

// Severities, lowest first.
const (
	Info Severity = iota
	Warning
	Critical
)

func (s Severity) String() string {
	return [...]string{"info", "warning", "critical"}[s]
}

// MarshalJSON writes the name.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads the name.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	for v := Info; v <= Critical; v++ {
		if v.String() == name {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("unknown severity %q", name)
}

// Finding is one diagnosis (docs/findings.md).
type Finding struct {
	ID          string   `json:"id"`
	Severity    Severity `json:"severity"`
	Title       string   `json:"title"`
	Evidence    []string `json:"evidence"`
	Explanation string   `json:"explanation"`
	Remedy      []string `json:"remedy,omitempty"`
	// Limit is the setting the finding holds responsible, where one was
	// read: the remedy is rendered from its actions.
	Limit *Limit `json:"limit,omitempty"`
	Scope string `json:"scope"`
	// Impact is the estimated share of throughput at stake (0..1), the rank
	// within a severity; ImpactText says how it was estimated.
	Impact     float64 `json:"impact"`
	ImpactText string  `json:"impact_text"`
	// Confidence says how sure the finding is; Confirm is what to run next
	// to confirm it (or rule it out).
	Confidence Confidence `json:"confidence"`
	Confirm    []string   `json:"confirm,omitempty"`
}

// Confidence grades a finding by what convicts it.
type Confidence string

// Confidences, surest first.
const (
	// Strong: the kernel measured what the flow suffered (its send-limit
	// time, drops of its packets, its segments per skb) and the cause is in
	// the evidence.
	Strong Confidence = "strong"
	// Likely: measured indirectly (counters, tcp_info clocks, a CPU's
	// busy time) or the cause is inferred from what the flow suffered.
	Likely Confidence = "likely"
	// Possible: inferred from settings or device counters; nothing showed
	// the flow suffering it.
	Possible Confidence = "possible"
)

// Rank orders findings: severity first, then the throughput at stake.
func Rank(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Severity != fs[j].Severity {
			return fs[i].Severity > fs[j].Severity
		}
		return fs[i].Impact > fs[j].Impact
	})
}

// AppendText writes findings for people: numbered, evidence indented.
func AppendText(b *strings.Builder, fs []Finding) {
	for i, f := range fs {
		fmt.Fprintf(b, "%d. [%s] %s: %s\n", i+1, f.Severity, f.ID, f.Title)
		fmt.Fprintf(b, "   scope: %s; at stake: %s; confidence: %s\n", f.Scope, f.ImpactText, f.Confidence)
		b.WriteString("   evidence:\n")
		for _, e := range f.Evidence {
			fmt.Fprintf(b, "     - %s\n", e)
		}
		fmt.Fprintf(b, "   why: %s\n", f.Explanation)
		if len(f.Confirm) > 0 {
			b.WriteString("   confirm:\n")
			for _, c := range f.Confirm {
				fmt.Fprintf(b, "     %s\n", c)
			}
		}
		if f.Limit != nil {
			fmt.Fprintf(b, "   limited by: %s\n", f.Limit.Describe())
			if f.Limit.Arithmetic != "" {
				fmt.Fprintf(b, "   sized as: %s\n", f.Limit.Arithmetic)
			}
		}
		if len(f.Remedy) > 0 {
			b.WriteString("   fix:\n")
			for _, c := range f.Remedy {
				fmt.Fprintf(b, "     %s\n", c)
			}
		}
		b.WriteString("\n")
	}
}
