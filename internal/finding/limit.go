package finding

import (
	"fmt"
	"strings"
)

// Limit is a setting that holds flows back, as the host has it: what kind
// of setting, its value, where it is set, who set it, and the actions that
// undo it. Observers collect the limits they can read into the evidence;
// a rule chooses the one that explains what a flow suffered, and the
// finding's fix is rendered from it, so every fix has the same shape and
// the evidence shows why the doctor believes it.
type Limit struct {
	// Kind names the setting (docs/findings.md#limits): tcp_window_clamp,
	// so_rcvbuf, route_window, cgroup_cpu_max, xdp_program, rps_cpus ...
	Kind string `json:"kind"`
	// Value is the setting as it is set, with its unit.
	Value string `json:"value"`
	Where Place  `json:"where"`
	// SetBy is who set it, where known: the process owning a socket, the
	// unit or container owning a cgroup.
	SetBy *Owner `json:"set_by,omitempty"`
	// Applies says what it holds back: the flows, devices or CPUs.
	Applies Scope `json:"applies"`
	// Undo are the actions that lift the limit, first the one the doctor
	// prescribes; Arithmetic shows how their numbers were computed from
	// what was measured.
	Undo       []Action `json:"undo,omitempty"`
	Arithmetic string   `json:"arithmetic,omitempty"`
	// Source says how the limit was read (a BPF iterator, netlink, a file).
	Source string `json:"source"`
}

// Layers a limit is set at.
const (
	LayerSocket  = "socket"
	LayerRoute   = "route"
	LayerSysctl  = "sysctl"
	LayerCgroup  = "cgroup"
	LayerDevice  = "device"
	LayerProgram = "program"
	LayerRule    = "rule"
	LayerProcess = "process"
)

// Place is where a limit is set: its layer, its network namespace ("" for
// the observer's own or a setting outside namespaces) and the object that
// carries it (a socket's addresses, a route, a cgroup's path, a device).
type Place struct {
	Layer  string `json:"layer"`
	Netns  string `json:"netns_name,omitempty"`
	Object string `json:"object"`
}

func (p Place) String() string {
	s := p.Layer + " " + p.Object
	if p.Netns != "" {
		s += " in netns " + p.Netns
	}
	return s
}

// Owner is who set a limit.
type Owner struct {
	PID       int    `json:"pid,omitempty"`
	Comm      string `json:"comm,omitempty"`
	Unit      string `json:"unit,omitempty"`      // a systemd unit
	Container string `json:"container,omitempty"` // a container's id or name
}

func (o *Owner) String() string {
	var parts []string
	if o.Comm != "" || o.PID != 0 {
		parts = append(parts, fmt.Sprintf("%s[%d]", o.Comm, o.PID))
	}
	if o.Unit != "" {
		parts = append(parts, "unit "+o.Unit)
	}
	if o.Container != "" {
		parts = append(parts, "container "+o.Container)
	}
	return strings.Join(parts, ", ")
}

// Scope is what a limit holds back; a rule matches it against a flow.
type Scope struct {
	// Flows are sockets as "local peer" address pairs, as Flow.Local and
	// Flow.Peer print them.
	Flows   []string `json:"flows,omitempty"`
	Devices []string `json:"devices,omitempty"`
	CPUs    []int    `json:"cpus,omitempty"`
	PIDs    []int    `json:"pids,omitempty"`
}

// Action is one step of a remedy: a command line to run (in Netns when
// set, as ip netns exec would), or, where no command can apply it (an
// application's own call), what to change, in Text alone.
type Action struct {
	Argv  []string `json:"argv,omitempty"`
	Netns string   `json:"netns_name,omitempty"`
	// Text is the action as printed: the command line, or the change.
	Text string `json:"text"`
}

// Command is an action that runs argv, in netns when not "".
func Command(netns string, argv ...string) Action {
	text := shellJoin(argv)
	if netns != "" {
		text = "ip netns exec " + shellQuote(netns) + " " + text
	}
	return Action{Argv: argv, Netns: netns, Text: text}
}

// Change is an action no command applies: a change to an application or
// its configuration.
func Change(format string, args ...any) Action {
	return Action{Text: fmt.Sprintf(format, args...)}
}

// Same says whether two limits are one setting: its kind, where it is set.
func (l *Limit) Same(o *Limit) bool {
	return l != nil && o != nil && l.Kind == o.Kind && l.Where == o.Where
}

// Remedy is the fix as printed, rendered from the limit's actions.
func (l *Limit) Remedy() []string {
	out := make([]string, 0, len(l.Undo))
	for _, a := range l.Undo {
		out = append(out, a.Text)
	}
	return out
}

// Describe is the evidence line that names the limit and who set it.
func (l *Limit) Describe() string {
	s := fmt.Sprintf("%s = %s, set on the %s", l.Kind, l.Value, l.Where)
	if l.SetBy != nil {
		if who := l.SetBy.String(); who != "" {
			s += " by " + who
		}
	}
	return s + " (" + l.Source + ")"
}

func shellJoin(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

// shellQuote quotes s for a POSIX shell where it needs it, so that a
// printed command pastes as it runs.
func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
