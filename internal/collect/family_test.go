package collect

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/skbtrace/skbtrace/internal/event"
	"github.com/skbtrace/skbtrace/internal/probe"
	"github.com/skbtrace/skbtrace/internal/testenv"
	"github.com/skbtrace/skbtrace/internal/wire"
)

func TestSelectAllIsEveryFamilyNotRequired(t *testing.T) {
	for _, names := range [][]string{nil, {"all"}} {
		fams, required, err := Select(names)
		if err != nil || required || len(fams) != len(event.Families) {
			t.Fatalf("%v: %d families, required %v, err %v", names, len(fams), required, err)
		}
	}
}

func TestSelectByNameIsRequired(t *testing.T) {
	fams, required, err := Select([]string{"tcp_conn", "tcp_rtt", "tcp_conn"})
	if err != nil || !required || len(fams) != 2 || fams[0].Name != "tcp_conn" || fams[1].Name != "tcp_rtt" {
		t.Fatalf("fams %v required %v err %v", fams, required, err)
	}
	if _, _, err := Select([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `unknown event family "nope" (known: tcp_conn, `) {
		t.Fatalf("err %v", err)
	}
}

// Every program, switch and map a family names is in the object, and
// every drain is a family's.
func TestEveryFamilyNamesWhatIsInTheObject(t *testing.T) {
	spec, err := probe.LoadSkbtrace()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range event.Families {
		if len(f.Hooks) == 0 || len(f.Events) == 0 {
			t.Errorf("family %s has no hooks or no events", f.Name)
		}
		slots := slices.Concat(f.Hooks, f.PacketFiltered)
		for _, o := range f.Optional {
			slots = append(slots, o.Hooks)
		}
		for _, slot := range slots {
			for _, h := range slot {
				if spec.Programs[h.Program] == nil {
					t.Errorf("family %s: program %s is not in the BPF object", f.Name, h.Program)
				}
				if (h.Kind == event.FEntry || h.Kind == event.FExit) && h.Args == 0 {
					t.Errorf("family %s: %s does not say how many arguments it reads", f.Name, h)
				}
			}
		}
		for name := range f.Consts {
			if spec.Variables[name] == nil {
				t.Errorf("family %s: switch %s is not in the BPF object", f.Name, name)
			}
		}
		if f.Paused != "" && spec.Variables[f.Paused] == nil {
			t.Errorf("family %s: %s is not in the BPF object", f.Name, f.Paused)
		}
	}
	for id := range drains {
		if event.FamilyName(id) == fmt.Sprintf("family%d", id) {
			t.Errorf("drain of family %d, which is not registered", id)
		}
	}
}

func missing(name string) *event.Family {
	return &event.Family{Name: name, Hooks: [][]event.Hook{{event.BTFHook(wire.ProgTcpCong, "skbtrace_no_such_tracepoint")}}}
}

func TestStartSkipsWhatCannotRunAndSaysWhy(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	conn, _ := event.ByName("tcp_conn")
	rec, err := Start(Options{Families: []*event.Family{conn, missing("absent")}})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if len(rec.Running) != 1 || rec.Running[0].Family.Name != "tcp_conn" || rec.Running[0].Hooks[0].Name != "inet_sock_set_state" {
		t.Fatalf("running %+v", rec.Running)
	}
	if len(rec.Skipped) != 1 || rec.Skipped[0].Family.Name != "absent" ||
		!strings.Contains(rec.Skipped[0].Reason.Error(), "tp_btf/skbtrace_no_such_tracepoint: tracepoint skbtrace_no_such_tracepoint is not in this kernel") {
		t.Fatalf("skipped %+v", rec.Skipped)
	}
}

func TestStartFailsWhenARequiredFamilyCannotRun(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	conn, _ := event.ByName("tcp_conn")
	_, err := Start(Options{Families: []*event.Family{conn, missing("absent")}, Required: true})
	if err == nil || !strings.Contains(err.Error(), "event family absent cannot run: tp_btf/skbtrace_no_such_tracepoint") {
		t.Fatalf("err %v", err)
	}
	if _, err := Start(Options{Families: []*event.Family{missing("absent")}}); err == nil || !strings.Contains(err.Error(), "no event family can run on this kernel (absent: ") {
		t.Fatalf("err %v", err)
	}
}

func TestStartTakesTheFirstAlternativeThatWorks(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	f := &event.Family{Name: "alt", Hooks: [][]event.Hook{{
		event.BTFHook(wire.ProgTcpRcvbuf, "skbtrace_no_such_tracepoint"),
		event.BTFHook(wire.ProgTcpRcvbufAdjust, "tcp_rcv_space_adjust"),
	}}}
	rec, err := Start(Options{Families: []*event.Family{f}, Required: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if h := rec.Running[0].Hooks; len(h) != 1 || h[0].Name != "tcp_rcv_space_adjust" {
		t.Fatalf("hooks %v", h)
	}
}

// The kernel filters change every program that counts: with all of them on,
// every family that runs without them must still load (Required makes
// Start fail otherwise).
func TestEveryFamilyLoadsWithTheKernelFilters(t *testing.T) {
	testenv.RequireRoot(t, "loading BPF programs")
	// tcpdump -ddd -y RAW 'tcp port 5201': loads at constant and computed offsets.
	tcpPort := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1}, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf0},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0x40, SkipFalse: 0, SkipTrue: 10},
		bpf.LoadAbsolute{Off: 9, Size: 1}, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 6, SkipTrue: 8},
		bpf.LoadAbsolute{Off: 6, Size: 2}, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 6},
		bpf.LoadMemShift{Off: 0}, bpf.LoadIndirect{Off: 0, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 5201, SkipTrue: 2},
		bpf.LoadIndirect{Off: 2, Size: 2}, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 5201, SkipTrue: 1},
		bpf.RetConstant{Val: 1}, bpf.RetConstant{Val: 0},
	}
	plain, err := Start(Options{Families: event.Families})
	if err != nil {
		t.Fatal(err)
	}
	var fams []*event.Family
	for _, r := range plain.Running {
		fams = append(fams, r.Family)
	}
	plain.Close()
	filter := probe.Filter{Packets: tcpPort, CPUs: []int{0},
		Contexts: wire.ContextFilterCONTEXT_FILTER_SOFTIRQ | wire.ContextFilterCONTEXT_FILTER_TASK}
	rec, err := Start(Options{Families: fams, Required: true, Filter: filter})
	if err != nil {
		t.Fatal(err)
	}
	rec.Close()
}
