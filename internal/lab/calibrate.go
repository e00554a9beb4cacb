package lab

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"

	"github.com/skbtrace/skbtrace/internal/doctor"
	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/load"
	"github.com/skbtrace/skbtrace/internal/units"
)

// calibration is the remedy a calibration run applies.
type calibration struct {
	// From says whose remedy it is: RemedyDoctor (the doctor's first,
	// exactly as printed), RemedyWorkload (the doctor's first is a change to
	// the application, made by the workload's switch) or RemedyScenario
	// (the doctor's names no setting: the scenario's own fix); "" for none.
	From   string
	Text   string
	Impact float64 // the doctor's estimate of what the fault costs
	action *finding.Action
	// onProcesses says the remedy acts on processes that run beside the
	// flows (a competing process put in the idle class): the scenario's
	// During, which runs them, goes on through the calibration.
	onProcesses bool
}

// Where a calibration run's remedy comes from (Report.RemedyFrom).
const (
	RemedyDoctor   = "doctor"
	RemedyWorkload = "workload"
	RemedyScenario = "scenario"
)

// remedyFor chooses the calibration's remedy: the first action of the
// limit the doctor's top finding names, applied as printed, wherever a
// command can apply it.
func (s *Scenario) remedyFor(rep *doctor.Report) calibration {
	var c calibration
	if rep != nil {
		if top := rep.Top(finding.Warning); top != nil {
			c.Impact = top.Impact
			if top.Limit != nil && len(top.Limit.Undo) > 0 {
				first := top.Limit.Undo[0]
				switch {
				case len(first.Argv) > 0:
					c.From, c.Text, c.action = RemedyDoctor, first.Text, &first
					c.onProcesses = top.Limit.Where.Layer == finding.LayerProcess
					return c
				case s.FixLoad != nil || s.FixIsApp:
					c.From, c.Text = RemedyWorkload, first.Text
					return c
				}
			}
		}
	}
	if s.Fix != nil || s.FixLoad != nil {
		c.From, c.Text = RemedyScenario, "the scenario's own fix"
	}
	return c
}

// calibrate applies the remedy and measures the fault's load again.
func (s *Scenario) calibrate(ctx context.Context, p *Pair, o load.Options, c calibration) (series, error) {
	switch c.From {
	case RemedyDoctor:
		if err := applyAction(c.action); err != nil {
			return series{}, fmt.Errorf("applying the doctor's remedy %q: %w", c.Text, err)
		}
	case RemedyWorkload:
		if s.FixIsApp {
			if err := s.Fix(p); err != nil {
				return series{}, fmt.Errorf("changing the application as the doctor's remedy asks: %w", err)
			}
		}
	default:
		if s.Fix != nil {
			if err := s.Fix(p); err != nil {
				return series{}, fmt.Errorf("applying the remedy: %w", err)
			}
		}
		// The scenario's own fix is a reference, no claim of the
		// doctor's to hold: one run measures it.
		return s.measureBest(ctx, p, s.remediedLoad(o, c), RunOptions{}, 1)
	}
	return s.measureBest(ctx, p, s.remediedLoad(o, c), RunOptions{}, calibrationRuns)
}

// remediedLoad is the fault's load as the remedy leaves it: changed by the
// workload's switch (FixLoad) where the remedy is the application's.
func (s *Scenario) remediedLoad(o load.Options, c calibration) load.Options {
	if c.From != RemedyDoctor && s.FixLoad != nil {
		s.FixLoad(&o)
	}
	return o
}

// calibrationRuns is how many runs a calibration's control and the
// doctor's remedied run each take the best of: a 2-second veth stream on
// this VM ran 20.4 and 29.2 Gbit/s in one state, a single-run ratio that
// read a full remedy as 70 % restored. The noise here only slows a run
// (another process takes the CPU), so the fastest run is the nearest to
// what the path carries, on both sides of the ratio alike. The best of two
// still read five of 50 remedies at 74-79 % that had restored 88-130 % in
// the run before (2026-11-28); the median of three was no steadier.
const calibrationRuns = 3

// series is one state's runs: the fastest stands, and every run's rate
// (bits, or operations, per second) is reported beside it.
type series struct {
	best  *Measurement
	rates []float64
}

func (r *series) add(o load.Options, m *Measurement) {
	if r.best == nil || rateOf(o, m) > rateOf(o, r.best) {
		r.best = m
	}
	r.rates = append(r.rates, rateOf(o, m))
}

// measureBest measures the load n times and returns the runs, the one of
// the highest throughput (operations per second for request/response)
// standing.
func (s *Scenario) measureBest(ctx context.Context, p *Pair, o load.Options, opts RunOptions, n int) (series, error) {
	var r series
	for range max(n, 1) {
		m, err := s.measure(ctx, p, o, opts)
		if err != nil {
			return series{}, err
		}
		r.add(o, m)
	}
	return r, nil
}

// manyRuns is a state's rates where it was measured more than once.
func manyRuns(r series) []float64 {
	if len(r.rates) < 2 {
		return nil
	}
	return r.rates
}

// measureAlternating measures two states that differ by the load alone n
// times each, in turns, so that a slow spell weighs on both.
func (s *Scenario) measureAlternating(ctx context.Context, p *Pair, first, second load.Options, n int) (a, b series, err error) {
	for range n {
		for _, run := range []struct {
			o   load.Options
			out *series
		}{{first, &a}, {second, &b}} {
			m, err := s.measure(ctx, p, run.o, RunOptions{})
			if err != nil {
				return series{}, series{}, err
			}
			run.out.add(run.o, m)
		}
	}
	return a, b, nil
}

// RestoreBar is the share of the control's throughput a remedy is held
// to restore (issue 44).
const RestoreBar = 0.8

// restoredShare is the remedied run's throughput as a share of the
// control's (operations per second for request/response).
func restoredShare(o load.Options, fixed, control *Measurement) float64 {
	if rateOf(o, control) <= 0 {
		return 0
	}
	return rateOf(o, fixed) / rateOf(o, control)
}

// costShare is the share of a reference run's throughput (the remedied
// run's, or the control's) that the fault run lacked.
func costShare(o load.Options, fault, ref *Measurement) float64 {
	if rateOf(o, ref) <= 0 {
		return 0
	}
	return 1 - rateOf(o, fault)/rateOf(o, ref)
}

// rateOf is a run's throughput as the load measures it: operations per
// second for request/response, bits per second otherwise.
func rateOf(o load.Options, m *Measurement) float64 {
	if o.Mode == load.RR {
		return m.Load.OpsPerSec
	}
	return m.Load.Bps
}

// EstimateMargin is how far, in shares of throughput, the doctor's
// estimate of what a fault cost may lie from what it cost (issue 44).
const EstimateMargin = 0.15

// EstimateOff says how far the doctor's estimate lies from the nearer of
// the two measures of what the fault cost: against the remedied run
// (Gain) and against the control (ControlCost). The two measure one cost
// in runs a minute apart on a VM whose runs swing for seconds at a time:
// their difference is the measurement's own noise (gro-blocked-router-ttl
// cost 5 % of its remedied run's throughput and 25 % of its control's in
// one run). Where the remedied and control states were each measured
// several times, the cost against each of their runs, with the fault run
// swung as far as one state's runs swung, spans what the measurement can
// tell, and an estimate inside that span is off by nothing. For a fault that costs time, the wait the remedy took away.
func (r *Report) EstimateOff() float64 {
	if r.LatencyGain > 0 {
		return math.Abs(r.PredictedImpact - r.LatencyGain)
	}
	lo, hi := min(r.Gain, r.ControlCost), max(r.Gain, r.ControlCost)
	fault := r.FaultBps
	if r.RunsInOps {
		fault = r.FaultOps
	}
	states := [][]float64{r.FixedRuns, r.ControlRuns, r.FixedAgainRuns, r.ControlAfterRuns}
	// The fault run is a single run: it swings as one state's runs do
	// (rwnd-route-window's fault ran at 7.3 Gbit/s beside controls of
	// 13.3-17.1 in a slow spell of CI's, where the doctor's estimate of the
	// flow without its limit read 73 % and the costs 45-57 %).
	swing := 1.0
	for _, runs := range states {
		if len(runs) > 1 && slices.Min(runs) > 0 {
			swing = max(swing, slices.Max(runs)/slices.Min(runs))
		}
	}
	for _, runs := range states {
		for _, ref := range runs {
			if ref > 0 {
				lo, hi = min(lo, 1-fault*swing/ref), max(hi, 1-fault/swing/ref)
			}
		}
	}
	return max(0, lo-r.PredictedImpact, r.PredictedImpact-hi)
}

// confirmRestored measures a second pair when the remedied runs fell short
// of RestoreBar: the remedied state again, then the control beside it. The
// first control ran a minute before the remedied runs, and a slow spell of
// this VM's (its runs swing up to 2x for seconds at a time) can hold a
// block of runs while sparing the next: packet-loss once restored 70 %
// with its drop rule deleted (91-121 % in five other runs), and rate-htb
// 66 % with its qdisc deleted, whose control, measured again in the very
// same state a few seconds later, ran 1.5 times faster (2026-11-28). The
// restored share is the better of the two pairs, each measured together: a
// remedy that does not work stays short in both. The pair is returned to
// its control state by the scenario's own fix after a command's remedy, by
// stopping the processes a remedy on processes acted on (stopDuring), and
// as it is after the workload's switch, which made the application the
// control's. Where the fix cannot return the pair there (it changes the
// application or only the load after a command's remedy) the first pair
// stands.
func (s *Scenario) confirmRestored(ctx context.Context, p *Pair, rep *Report, c calibration, o load.Options, stopDuring func()) {
	switch {
	case c.From == RemedyWorkload, c.From == RemedyDoctor && c.onProcesses:
	case c.From != RemedyDoctor, s.Fix == nil || s.FixIsApp || s.FixLoad != nil:
		return
	}
	var again, after series
	var err error
	if c.From == RemedyWorkload {
		// The application is the control's: the two states differ by
		// the load's options at most, so their runs can take turns
		// (rwnd-python-window-clamp's remedied runs ran 20 and 14 Gbit/s
		// in a block beside controls of 29 and 28 in CI).
		again, after, err = s.measureAlternating(ctx, p, s.remediedLoad(o, c), s.Load, calibrationRuns)
	} else {
		// The remedied state cannot be made again once the fix has run,
		// so the two states' runs cannot take turns: each run is measured
		// beside a gauge of the VM's speed instead.
		gp, done, gerr := setUp(ctx, nil)
		if gerr != nil {
			return
		}
		defer func() { _ = done(false) }()
		var againGauge, afterGauge []float64
		if again, againGauge, err = s.gauged(ctx, p, gp, s.remediedLoad(o, c)); err != nil {
			return
		}
		if c.onProcesses {
			stopDuring()
		} else {
			// A fix that finds nothing to undo (a qdisc the remedy
			// deleted) leaves the pair as the remedy did: in its control
			// state.
			_ = s.Fix(p)
		}
		if after, afterGauge, err = s.gauged(ctx, p, gp, s.Load); err != nil {
			return
		}
		rep.FixedAgainGauge, rep.ControlAfterGauge = againGauge, afterGauge
		if fixed, control := gaugedShare(again.rates, againGauge), gaugedShare(after.rates, afterGauge); fixed > 0 && control > 0 {
			rep.Restored = max(rep.Restored, fixed/control)
		}
	}
	if err != nil {
		return
	}
	rep.FixedAgainBps, rep.ControlAfterBps = again.best.Load.Bps, after.best.Load.Bps
	rep.FixedAgainRuns, rep.ControlAfterRuns = again.rates, after.rates
	rep.Restored = max(rep.Restored, restoredShare(o, again.best, after.best))
}

// gaugeScenario is the VM's speed beside a calibration's runs: the lab's
// bulk stream on an untouched pair of its own. This VM's runs swing 2x in
// spells of half a minute (a control measured again in one state ran 13.2-
// 15.6 Gbit/s where it had run 35-39 a minute before, 2026-11-29), long
// enough to hold every run of one state and spare the other's.
var gaugeScenario = &Scenario{Name: "gauge", Load: bulk}

// gauged measures o on p calibrationRuns times, each run right after one
// of the gauge on gp, and returns the runs and the gauge's rates.
func (s *Scenario) gauged(ctx context.Context, p, gp *Pair, o load.Options) (series, []float64, error) {
	var r series
	var gauge []float64
	for range calibrationRuns {
		g, err := gaugeScenario.measure(ctx, gp, gaugeScenario.Load, RunOptions{})
		if err != nil {
			return series{}, nil, err
		}
		m, err := s.measure(ctx, p, o, RunOptions{})
		if err != nil {
			return series{}, nil, err
		}
		gauge = append(gauge, g.Load.Bps)
		r.add(o, m)
	}
	return r, gauge, nil
}

// gaugedShare is a state's median rate as a share of the gauge's rate
// measured beside each run.
func gaugedShare(rates, gauge []float64) float64 {
	shares := make([]float64, 0, len(rates))
	for i, v := range rates {
		if i < len(gauge) && gauge[i] > 0 {
			shares = append(shares, v/gauge[i])
		}
	}
	if len(shares) == 0 {
		return 0
	}
	slices.Sort(shares)
	return shares[len(shares)/2]
}

// RestoreWithinSpread says, for a remedy short of RestoreBar, whether the
// shortfall lies within the runs' own spread: in a pair, the remedied
// state's fastest run reached the control's slowest. One state's runs here
// swing up to 2x for seconds at a time (a baseline's two runs, one state,
// ran 13.3 and 29.4 Gbit/s in CI), so such a pair cannot tell the two
// states apart, and says so instead of a verdict. A remedy that does not
// work never reaches a control that ran at its speed once.
func (r *Report) RestoreWithinSpread() string {
	for _, pair := range [][2][]float64{{r.FixedRuns, r.ControlRuns}, {r.FixedAgainRuns, r.ControlAfterRuns}} {
		fixed, control := pair[0], pair[1]
		if len(fixed) < 2 || len(control) < 2 {
			continue
		}
		if slices.Max(fixed) >= slices.Min(control) {
			return fmt.Sprintf("the remedied runs (%s) reached the control's slowest (%s): the shortfall lies within the runs' own spread",
				r.ratesText(fixed), r.ratesText(control))
		}
	}
	return ""
}

// ratesText lists a state's runs.
func (r *Report) ratesText(rates []float64) string {
	parts := make([]string, len(rates))
	for i, v := range rates {
		if r.RunsInOps {
			parts[i] = fmt.Sprintf("%.0f ops/s", v)
		} else {
			parts[i] = strings.TrimSpace(units.Bits(v))
		}
	}
	return strings.Join(parts, ", ")
}

// applyAction runs a remedy's command in its network namespace, as
// ip netns exec would.
func applyAction(a *finding.Action) error {
	cmd := exec.Command(a.Argv[0], a.Argv[1:]...)
	if a.Netns == "" {
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	ns, err := host.OpenNetns(a.Netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	_, err = ns.Output(cmd)
	return err
}
