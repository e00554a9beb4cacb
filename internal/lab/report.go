package lab

import (
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
)

// Report is the outcome of a scenario.
type Report struct {
	Name       string  `json:"name"`
	Fault      string  `json:"fault"`
	Expect     string  `json:"expected_finding,omitempty"`
	ControlBps float64 `json:"control_bits_per_second"`
	FaultBps   float64 `json:"fault_bits_per_second"`
	ControlOps float64 `json:"control_ops_per_second"`
	FaultOps   float64 `json:"fault_ops_per_second"`
	// ReverseBps is the fault's load from the receiver back to the sender (Scenario.Reverse).
	ReverseBps float64 `json:"fault_reverse_bits_per_second,omitempty"`
	// FixedBps and FixedOps are the calibration run's, with the doctor's
	// remedy applied; Gain is the share of that throughput the fault cost
	// (operations per second for request/response).
	FixedBps float64 `json:"fixed_bits_per_second,omitempty"`
	FixedOps float64 `json:"fixed_ops_per_second,omitempty"`
	Gain     float64 `json:"gain,omitempty"`
	// ControlCost is the share of the control's throughput the fault
	// cost: beside Gain, the second measure of what the doctor estimates.
	ControlCost float64 `json:"control_cost,omitempty"`
	// LatencyGain, for a fault that costs time rather than throughput
	// (Scenario.Latency), is the share of the fault run's wait the remedy
	// took away: what its finding's impact estimates.
	LatencyGain float64 `json:"latency_gain,omitempty"`
	// Remedy is what the calibration run applied and RemedyFrom whose it
	// was (RemedyDoctor ...); PredictedImpact is the doctor's estimate of
	// the share the fault cost, beside Gain, and Restored the fixed run's
	// throughput as a share of the control's.
	Remedy        string `json:"remedy,omitempty"`
	RemedyFrom    string `json:"remedy_from,omitempty"`
	RemedyPartial string `json:"remedy_partial,omitempty"`
	// EstimateUnheld is the scenario's EstimateUnheld.
	EstimateUnheld string `json:"estimate_unheld,omitempty"`
	// RemedyFailed says why the remedy could not be applied or measured.
	RemedyFailed string `json:"remedy_failed,omitempty"`
	// FixedAgainBps and ControlAfterBps are the second pair, the remedied
	// state and then the control measured again, where the first restored
	// less than RestoreBar (confirmRestored).
	FixedAgainBps   float64 `json:"fixed_again_bits_per_second,omitempty"`
	ControlAfterBps float64 `json:"control_after_bits_per_second,omitempty"`
	// ControlRuns, FaultRuns, FixedRuns, FixedAgainRuns and
	// ControlAfterRuns are every run's rate of a state measured more than
	// once (bits per second; operations per second where RunsInOps), the
	// fastest of which stands.
	ControlRuns      []float64 `json:"control_runs,omitempty"`
	FaultRuns        []float64 `json:"fault_runs,omitempty"`
	FixedRuns        []float64 `json:"fixed_runs,omitempty"`
	FixedAgainRuns   []float64 `json:"fixed_again_runs,omitempty"`
	ControlAfterRuns []float64 `json:"control_after_runs,omitempty"`
	RunsInOps        bool      `json:"runs_in_ops,omitempty"`
	// FixedAgainGauge and ControlAfterGauge are the VM's speed measured
	// right before each run of the second pair (bits per second of the
	// lab's bulk stream on an untouched pair): that pair's restored share
	// is the ratio of the two states' medians, each run taken as a share of
	// its gauge.
	FixedAgainGauge   []float64 `json:"fixed_again_gauge,omitempty"`
	ControlAfterGauge []float64 `json:"control_after_gauge,omitempty"`
	PredictedImpact   float64   `json:"predicted_impact,omitempty"`
	Restored          float64   `json:"restored,omitempty"`
	Signal            string    `json:"signal"`
	Reproduced        bool      `json:"reproduced"`
	// Skipped says why the fault cannot be built on these devices (NotBuildable).
	Skipped string  `json:"skipped,omitempty"`
	Seconds float64 `json:"seconds"`
	// Doctor is set by a run with RunOptions.Doctor.
	Doctor *DoctorVerdict `json:"doctor,omitempty"`
}

// DoctorVerdict is what the doctor found in the fault run, and whether its
// top finding of warning or above is the one the scenario expects (none for
// the baseline).
type DoctorVerdict struct {
	Top      string            `json:"top_finding"`
	Agrees   bool              `json:"agrees"`
	Findings []finding.Finding `json:"findings"`
	Healthy  string            `json:"healthy,omitempty"`
	Evidence *doctor.Evidence  `json:"evidence"`
}

func verdictOf(s *Scenario, rep *doctor.Report, p *Pair) *DoctorVerdict {
	v := &DoctorVerdict{Findings: rep.Findings, Healthy: rep.Healthy, Evidence: rep.Evidence}
	if top := rep.Top(finding.Warning); top != nil {
		v.Top = top.ID
	}
	v.Agrees = v.Top == s.Expect
	for _, id := range s.Also {
		if !slices.ContainsFunc(rep.Findings, func(f finding.Finding) bool { return f.ID == id && f.Severity >= finding.Warning }) {
			v.Agrees = false
		}
	}
	if s.ExpectOn != nil {
		// First, or tied for first: virtio-net's sender that cannot
		// segment at all weighs what the receiver's GRO off does.
		top, scope := rep.Top(finding.Warning), "device "+s.ExpectOn(p)+" "
		if top == nil || !slices.ContainsFunc(rep.Findings, func(f finding.Finding) bool {
			return f.ID == s.Expect && strings.HasPrefix(f.Scope, scope) && f.Severity == top.Severity && f.Impact == top.Impact
		}) {
			v.Agrees = false
		}
	}
	return v
}
