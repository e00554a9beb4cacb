package compare

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	"github.com/skbtrace/skbtrace/internal/finding"
	"github.com/skbtrace/skbtrace/internal/host"
	"github.com/skbtrace/skbtrace/internal/profile"
	"github.com/skbtrace/skbtrace/internal/units"
)

// Result is what differs between two runs, A the baseline and B the other.
type Result struct {
	A, B *Run
	// Headline names the change in one line.
	Headline string
	// Metrics are the run-wide measures, largest relative change first.
	Metrics []Metric
	// Unit is what the CPU cost is normalized by: "packet" or "byte".
	Unit string
	// Phases are the CPU cost per Unit of each phase, largest share of the change first.
	Phases   []PhaseChange
	Settings []SettingChange
	Findings []finding.Finding
}

// Metric is one measure in both runs.
type Metric struct {
	Name   string  `json:"name"`
	Unit   string  `json:"unit"`
	A      float64 `json:"a"`
	B      float64 `json:"b"`
	Change float64 `json:"change"` // (B-A)/A; ±Inf when A is 0
	// Sampled says a run's value is an estimate from the windows its
	// counters ran in (record --sample), not a count of the whole run.
	Sampled bool `json:"sampled,omitempty"`
}

// PhaseChange is one phase's CPU cost per unit in both runs.
type PhaseChange struct {
	Phase profile.Phase `json:"phase"`
	A     float64       `json:"a"`
	B     float64       `json:"b"`
	// Share is this phase's part of the change of the total cost.
	Share float64 `json:"share"`
}

// SettingChange is one setting that differs.
type SettingChange struct {
	Kind  string `json:"kind"` // kernel, mitigation, sysctl, offload, mtu, qdisc, driver
	Scope string `json:"scope"`
	Name  string `json:"name"`
	A     string `json:"a"`
	B     string `json:"b"`
}

// ErrDifferentWorkloads is wrapped when the two runs ran different things.
var ErrDifferentWorkloads = fmt.Errorf("the runs are of different workloads")

// Compare diffs two runs of one kind and one workload.
func Compare(a, b *Run) (*Result, error) {
	if a.Kind != b.Kind {
		return nil, fmt.Errorf("%s is a %s and %s a %s: compare needs two of a kind", a.Name, a.Kind, b.Name, b.Kind)
	}
	if len(a.Workload) > 0 && len(b.Workload) > 0 && !overlap(a.Workload, b.Workload) {
		return nil, fmt.Errorf("%w: %s ran %s, %s ran %s", ErrDifferentWorkloads,
			a.Name, strings.Join(a.Workload, ", "), b.Name, strings.Join(b.Workload, ", "))
	}
	r := &Result{A: a, B: b}
	r.metrics()
	r.phases()
	if a.Settings != nil && b.Settings != nil {
		r.Settings = DiffSettings(a.Settings, b.Settings)
	}
	r.headline()
	return r, nil
}

func overlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

func change(a, b float64) float64 {
	if a == 0 {
		if b == 0 {
			return 0
		}
		return math.Inf(int(math.Copysign(1, b)))
	}
	return (b - a) / a
}

func (r *Result) add(name, unit string, a, b float64) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Unit: unit, A: a, B: b, Change: change(a, b)})
}

// sampledTraffic says the traffic measures are estimates from sampled
// windows (a trace's device counters) where TCP goodput counted every
// acknowledged byte: then goodput, not the estimate, judges the runs. Two
// of the default 50 ms windows that caught an iperf3 stream's start and
// end read 263 Mbit/s of an 800 Mbit/s stream.
func (r *Result) sampledTraffic() bool {
	return (r.A.TrafficShare > 0 || r.B.TrafficShare > 0) && r.A.TCPBytes > 0 && r.B.TCPBytes > 0
}

func (r *Result) metrics() {
	a, b := r.A, r.B
	if a.HasTraffic && b.HasTraffic {
		r.add("throughput", "bit/s", a.TrafficRate(8*float64(a.Bytes)), b.TrafficRate(8*float64(b.Bytes)))
		r.add("packet rate", "packets/s", a.TrafficRate(float64(a.Packets)), b.TrafficRate(float64(b.Packets)))
		r.add("bytes per packet", "B", perUnit(float64(a.Bytes), a.Packets), perUnit(float64(b.Bytes), b.Packets))
		if a.TrafficShare > 0 || b.TrafficShare > 0 {
			for i := range r.Metrics {
				r.Metrics[i].Sampled = true
			}
		}
	}
	if a.TCPBytes+b.TCPBytes > 0 {
		r.add("TCP goodput", "bit/s", a.Goodput(), b.Goodput())
	}
	if a.HasCPU && b.HasCPU {
		r.add("busy CPUs", "CPUs", a.Rate(a.CPUNs/1e9), b.Rate(b.CPUNs/1e9))
		if a.HasTraffic && b.HasTraffic {
			r.add("CPU per packet", "ns", perUnit(a.CPUNs, a.Packets), perUnit(b.CPUNs, b.Packets))
			r.add("CPU per byte", "ns", perUnit(a.CPUNs, a.Bytes), perUnit(b.CPUNs, b.Bytes))
		}
	}
	for _, k := range keys(a.Limits, b.Limits) {
		if math.Abs(b.Limits[k]-a.Limits[k]) >= 0.02 {
			r.add("send limit "+k, "share", a.Limits[k], b.Limits[k])
		}
	}
	for _, k := range keys(a.Drops, b.Drops) {
		// A busy host drops a few packets in any run.
		if max(a.Drops[k], b.Drops[k]) >= minDrops {
			r.add("drops "+k, "per s", a.Rate(float64(a.Drops[k])), b.Rate(float64(b.Drops[k])))
		}
	}
	if a.Retrans+b.Retrans > 0 {
		r.add("retransmits", "per s", a.Rate(float64(a.Retrans)), b.Rate(float64(b.Retrans)))
	}
	sort.SliceStable(r.Metrics, func(i, j int) bool { return rank(r.Metrics[i]) > rank(r.Metrics[j]) })
}

// minDrops is the fewest drops at one site, in either run, that count.
const minDrops = 10

// rank orders changes by their size; one from nothing counts as ten-fold,
// so drops that appear rank with, not above, a send limit that grew from
// 1 % to 92 %. Estimates from sampled windows follow the counted measures.
func rank(m Metric) float64 {
	if m.Sampled {
		return -1 / (1 + min(math.Abs(m.Change), 10))
	}
	return min(math.Abs(m.Change), 10)
}

func perUnit(v float64, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return v / float64(n)
}

func keys[V any](ms ...map[string]V) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// streaming is the packets per skb above which a run is a stream whose
// cost follows its bytes (TSO/GSO or GRO merge its packets); otherwise the
// stack handles every packet and its cost follows the packets.
const streaming = 1.5

func (r *Run) streams() bool {
	return r.HasTraffic && r.Skbs > 0 && float64(r.Packets)/float64(r.Skbs) > streaming
}

func (r *Result) phases() {
	a, b := r.A, r.B
	if len(a.Phases) == 0 || len(b.Phases) == 0 {
		return
	}
	r.Unit = "packet"
	na, nb := float64(a.Packets), float64(b.Packets)
	if a.streams() || b.streams() {
		r.Unit, na, nb = "byte", float64(a.Bytes), float64(b.Bytes)
	}
	if na == 0 || nb == 0 {
		// Without traffic, a phase's cost is its CPU time per second.
		r.Unit, na, nb = "second", a.Seconds, b.Seconds
	}
	var total float64
	for _, ph := range profile.Phases {
		pa, pb := a.Phases[ph]/na, b.Phases[ph]/nb
		if pa == 0 && pb == 0 {
			continue
		}
		r.Phases = append(r.Phases, PhaseChange{Phase: ph, A: pa, B: pb})
		total += pb - pa
	}
	for i := range r.Phases {
		if total != 0 {
			r.Phases[i].Share = (r.Phases[i].B - r.Phases[i].A) / total
		}
	}
	sort.SliceStable(r.Phases, func(i, j int) bool {
		return math.Abs(r.Phases[i].B-r.Phases[i].A) > math.Abs(r.Phases[j].B-r.Phases[j].A)
	})
}

// Metric finds a run-wide metric by name.
func (r *Result) Metric(name string) (Metric, bool) {
	for _, m := range r.Metrics {
		if m.Name == name {
			return m, true
		}
	}
	return Metric{}, false
}

// settingOrder ranks the kinds of settings by how often they explain a
// change in per-packet cost.
var settingOrder = []string{"mitigation", "offload", "mtu", "qdisc", "sysctl", "kernel", "driver"}

func (r *Result) headline() {
	var parts []string
	var fin *finding.Finding
	bpp, hasBpp := r.Metric("bytes per packet")
	sizeChanged := hasBpp && bpp.A > 0 && bpp.B > 0 && (bpp.B/bpp.A > 1.5 || bpp.A/bpp.B > 1.5)
	if sizeChanged {
		pr, _ := r.Metric("packet rate")
		t, _ := r.Metric("throughput")
		s := fmt.Sprintf("packets of %.0f B against %.0f B: throughput %s (%s to %s), packet rate %s (%s/s to %s/s)",
			bpp.B, bpp.A, pct(t.Change), units.Bits(t.A), units.Bits(t.B), pct(pr.Change), count(pr.A), count(pr.B))
		if cpp, ok := r.Metric("CPU per packet"); ok {
			s += fmt.Sprintf(", CPU per packet %s (%.0f to %.0f ns)", pct(cpp.Change), cpp.A, cpp.B)
		}
		parts = append(parts, s)
	}
	if r.Unit == "packet" || r.Unit == "byte" {
		cost, _ := r.Metric("CPU per " + r.Unit)
		if !sizeChanged || r.Unit == "byte" {
			parts = append(parts, fmt.Sprintf("CPU per %s %s", r.Unit, pct(cost.Change)))
		}
		if len(r.Phases) > 0 {
			top := r.Phases[0]
			parts[len(parts)-1] += fmt.Sprintf(": %s in %s", signed(top.B-top.A, r.Unit), top.Phase)
			if len(r.Phases) > 1 && math.Abs(r.Phases[1].Share) >= 0.2 {
				second := r.Phases[1]
				parts[len(parts)-1] += fmt.Sprintf(", %s in %s", signed(second.B-second.A, r.Unit), second.Phase)
			}
		}
	}
	// Without a CPU cost, the largest change leads, unless it is one the
	// lines below name anyway.
	first := ""
	if r.Unit != "packet" && r.Unit != "byte" && len(r.Metrics) > 0 && !(r.Metrics[0].Sampled && r.sampledTraffic()) {
		first = r.Metrics[0].Name
		parts = append(parts, r.metricText(r.Metrics[0]))
	}
	if t, ok := r.Metric("throughput"); ok && first != t.Name && !sizeChanged && !r.sampledTraffic() && math.Abs(t.Change) >= 0.05 {
		parts = append(parts, r.metricText(t))
	}
	if t, ok := r.Metric("TCP goodput"); ok && first != t.Name && math.Abs(t.Change) >= 0.05 && r.A.Kind != KindProfile {
		parts = append(parts, r.metricText(t))
	}
	if s := r.settingsText(); s != "" {
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		parts = append(parts, "no difference beyond noise")
	}
	r.Headline = strings.Join(parts, "; ")
	fin = r.finding()
	if fin != nil {
		r.Findings = append(r.Findings, *fin)
	}
}

func (r *Result) metricText(m Metric) string {
	if m.Unit == "bit/s" {
		return fmt.Sprintf("%s %s (%s to %s)", m.Name, pct(m.Change), m.Value(m.A), m.Value(m.B))
	}
	return fmt.Sprintf("%s %s (%s to %s %s)", m.Name, pct(m.Change), m.Value(m.A), m.Value(m.B), m.Unit)
}

// Value prints one of the metric's values: a rate of bits as iperf3 does
// ("8.70 Gbit/s"), anything else in four digits, its unit apart.
func (m Metric) Value(v float64) string {
	if m.Unit == "bit/s" {
		return units.Bits(v)
	}
	return units.Short(v)
}

// settingsText names the kinds of settings that differ, most telling first:
// "mitigations differ: spectre_v2", "offloads differ: eth0 tso, gso on → off".
func (r *Result) settingsText() string {
	if len(r.Settings) == 0 {
		return ""
	}
	by := map[string][]string{}
	group := map[string]int{} // "kind dev a→b" to its entry in by[kind]
	for _, s := range r.Settings {
		var name string
		switch s.Kind {
		case "offload", "mtu", "qdisc":
			dev := s.Scope[strings.LastIndexByte(s.Scope, ' ')+1:]
			key := s.Kind + " " + dev + " " + s.A + " " + s.B
			if i, ok := group[key]; ok {
				by[s.Kind][i] = strings.Replace(by[s.Kind][i], " "+s.A+" → ", ", "+s.Name+" "+s.A+" → ", 1)
				continue
			}
			group[key] = len(by[s.Kind])
			name = dev + " " + s.Name + " " + s.A + " → " + s.B
		case "kernel":
			name = s.A + " → " + s.B
		default:
			name = s.Name
		}
		if !contains(by[s.Kind], name) {
			by[s.Kind] = append(by[s.Kind], name)
		}
	}
	var out []string
	for _, k := range settingOrder {
		if names := by[k]; len(names) > 0 {
			if len(names) > 3 {
				names = append(names[:3:3], fmt.Sprintf("%d more", len(names)-3))
			}
			out = append(out, fmt.Sprintf("%ss differ: %s", k, strings.Join(names, "; ")))
		}
		if len(out) == 2 {
			break
		}
	}
	return strings.Join(out, "; ")
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func pct(c float64) string {
	switch {
	case math.IsInf(c, 1):
		return "from none"
	case math.IsInf(c, -1):
		return "to none"
	}
	return fmt.Sprintf("%+.0f %%", 100*c)
}

func signed(v float64, unit string) string {
	if unit == "byte" {
		return fmt.Sprintf("%+.3f ns", v)
	}
	return fmt.Sprintf("%+.0f ns", v)
}

func count(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1f k", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// finding turns the comparison into the report format every analyzer
// shares: a regression (B costs more or moves less) is a warning.
func (r *Result) finding() *finding.Finding {
	worse := false
	var evidence []string
	if cost, ok := r.Metric("CPU per " + r.Unit); ok && cost.Change >= 0.1 {
		worse = true
	}
	for _, name := range []string{"throughput", "TCP goodput"} {
		if t, ok := r.Metric(name); ok && t.Change <= -0.1 && !(t.Sampled && r.sampledTraffic()) {
			worse = true
		}
	}
	for i, m := range r.Metrics {
		if i == 6 {
			break
		}
		evidence = append(evidence, r.metricText(m))
	}
	for i, p := range r.Phases {
		if i == 3 {
			break
		}
		evidence = append(evidence, fmt.Sprintf("%s: %s to %s ns per %s (%.0f %% of the change)", p.Phase, units.Short(p.A), units.Short(p.B), r.Unit, 100*p.Share))
	}
	for _, s := range r.Settings {
		evidence = append(evidence, fmt.Sprintf("%s %s %s: %s → %s", s.Kind, s.Scope, s.Name, s.A, s.B))
	}
	if !worse && len(r.Settings) == 0 {
		return nil
	}
	f := &finding.Finding{ID: "regression", Severity: finding.Info, Title: r.Headline, Evidence: evidence,
		Scope: r.A.Name + " → " + r.B.Name, Confidence: finding.Likely, ImpactText: "the change between the runs",
		// Throughput here swings between seconds: one pair of runs can differ by chance.
		Confirm: []string{"run each setup again, alternating them (A, B, A, B), and compare each pair: a change that repeats is the setups', not the machine's swing"}}
	if worse {
		f.Severity = finding.Warning
	}
	f.Explanation, f.Remedy = r.cause()
	return f
}

// cause explains the top phase and the settings behind it.
func (r *Result) cause() (string, []string) {
	top := profile.Phase("")
	if len(r.Phases) > 0 && r.Phases[0].B > r.Phases[0].A {
		top = r.Phases[0].Phase
	}
	kinds := map[string]bool{}
	for _, s := range r.Settings {
		kinds[s.Kind] = true
	}
	switch {
	case top == profile.PhaseNetfilter:
		return "Packets spend more CPU in netfilter: every packet walks the hooks' chains, and rules that do not match still cost their evaluation.",
			[]string{"nft list ruleset (or iptables-save): look for long chains every packet traverses", "match early with sets and maps (nft add set ...; a single lookup replaces a rule per address), and accept established traffic first"}
	case (top == profile.PhaseSyscall || top == profile.PhaseMitigations) && kinds["mitigation"]:
		return "The syscall entry and exit path costs more per packet, and the CPU vulnerability mitigations differ: the stubs on indirect calls and returns and the buffer clearing on kernel exit are paid once per syscall, so small packets pay them most (seed 003).",
			[]string{"grep . /sys/devices/system/cpu/vulnerabilities/*", "send fewer, larger syscalls: sendmmsg/recvmmsg, UDP GSO (UDP_SEGMENT), larger writes", "mitigations=off on the kernel command line only where the threat model allows it"}
	case kinds["offload"]:
		return "Segmentation or receive offloads differ: without them the stack handles every wire packet itself, so the CPU per byte rises.",
			[]string{"ethtool -k DEV | grep -E 'segmentation|receive-offload'", "ethtool -K DEV tso on gso on gro on"}
	}
	if bpp, ok := r.Metric("bytes per packet"); ok && bpp.A > 0 && bpp.A/math.Max(bpp.B, 1) > 1.5 {
		return "The packets are smaller: the per-packet costs (syscall, headers, queueing) are paid for fewer bytes, so the packet rate, not the link, sets the throughput.",
			[]string{"send larger messages, or batch them (sendmmsg, UDP GSO)"}
	}
	if top != "" {
		return fmt.Sprintf("The CPU cost grew most in %s.", top), []string{"skbtrace profile -o run.html on both, and compare the flame graphs"}
	}
	return "The runs differ as the evidence lists.", nil
}

// DiffSettings lists the settings that differ. Namespaces and devices are
// paired by name, with numbers masked when the names differ only in them
// (a lab's per-run names), so two runs of one topology line up.
func DiffSettings(a, b *host.Settings) []SettingChange {
	var out []SettingChange
	if a.Kernel != b.Kernel {
		out = append(out, SettingChange{"kernel", "host", "release", a.Kernel, b.Kernel})
	}
	ma, mb := map[string]string{}, map[string]string{}
	for _, m := range a.Mitigations {
		ma[m.Name] = m.State
	}
	for _, m := range b.Mitigations {
		mb[m.Name] = m.State
	}
	for _, k := range keys(ma, mb) {
		if ma[k] != mb[k] {
			out = append(out, SettingChange{"mitigation", "cpu", k, orNone(ma[k]), orNone(mb[k])})
		}
	}
	for _, pair := range pairNamespaces(a.Namespaces, b.Namespaces) {
		na, nb := pair[0], pair[1]
		for _, k := range keys(na.Sysctls, nb.Sysctls) {
			if na.Sysctls[k] != nb.Sysctls[k] {
				out = append(out, SettingChange{"sysctl", "netns " + nb.Name, k, orNone(na.Sysctls[k]), orNone(nb.Sysctls[k])})
			}
		}
		for _, dp := range pairDevices(na.Devices, nb.Devices) {
			out = append(out, diffDevice("netns "+nb.Name+" dev "+dp[1].Name, dp[0], dp[1])...)
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

var digits = regexp.MustCompile(`[0-9]+`)

func masked(s string) string { return digits.ReplaceAllString(s, "N") }

func pairNamespaces(a, b []host.NetnsSettings) [][2]host.NetnsSettings {
	var out [][2]host.NetnsSettings
	used := make([]bool, len(b))
	for _, exact := range []bool{true, false} {
		for _, x := range a {
			for j, y := range b {
				if used[j] || (exact && x.Name != y.Name) || (!exact && masked(x.Name) != masked(y.Name)) {
					continue
				}
				if !exact && paired(out, x.Name) {
					break
				}
				used[j] = true
				out = append(out, [2]host.NetnsSettings{x, y})
				break
			}
		}
	}
	return out
}

func paired(out [][2]host.NetnsSettings, name string) bool {
	for _, p := range out {
		if p[0].Name == name {
			return true
		}
	}
	return false
}

func pairDevices(a, b []host.DeviceSettings) [][2]host.DeviceSettings {
	var out [][2]host.DeviceSettings
	used := make([]bool, len(b))
	done := make([]bool, len(a))
	for _, exact := range []bool{true, false} {
		for i, x := range a {
			if done[i] {
				continue
			}
			for j, y := range b {
				if used[j] || (exact && x.Name != y.Name) || (!exact && masked(x.Name) != masked(y.Name)) {
					continue
				}
				used[j], done[i] = true, true
				out = append(out, [2]host.DeviceSettings{x, y})
				break
			}
		}
	}
	return out
}

func diffDevice(scope string, a, b host.DeviceSettings) []SettingChange {
	var out []SettingChange
	if a.MTU != b.MTU {
		out = append(out, SettingChange{"mtu", scope, "mtu", fmt.Sprint(a.MTU), fmt.Sprint(b.MTU)})
	}
	if a.Driver != b.Driver {
		out = append(out, SettingChange{"driver", scope, "driver", orNone(a.Driver), orNone(b.Driver)})
	}
	for _, k := range keys(a.Features, b.Features) {
		fa, okA := a.Features[k]
		fb, okB := b.Features[k]
		if okA && okB && fa != fb {
			out = append(out, SettingChange{"offload", scope, k, onOff(fa), onOff(fb)})
		}
	}
	if qa, qb := qdiscText(a.Qdiscs), qdiscText(b.Qdiscs); qa != qb {
		out = append(out, SettingChange{"qdisc", scope, "qdiscs", qa, qb})
	}
	return out
}

func onOff(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

func qdiscText(qs []host.QdiscSettings) string {
	var parts []string
	for _, q := range qs {
		s := q.Kind
		if q.RateBps > 0 {
			s += " " + units.Bits(8*float64(q.RateBps))
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ", ")
}
