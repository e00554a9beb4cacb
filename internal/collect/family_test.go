package collect

import (
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/probe"
)

// withFamilies replaces the family list for one test.
func withFamilies(t *testing.T, fams []Family) {
	saved := Families
	Families = fams
	t.Cleanup(func() { Families = saved })
}

func iterOnly(name string) Family {
	return Family{Name: name, Hooks: []probe.Hook{{Kind: probe.Iterator, Name: "x"}}}
}

func missing(name string) Family {
	return Family{Name: name, Hooks: []probe.Hook{{Kind: probe.BTFTracepoint, Name: "skbtrace_no_such_tracepoint"}}}
}

func TestSelectAutoSkipsWhatCannotRunAndSaysWhy(t *testing.T) {
	requireKernelBTF(t)
	withFamilies(t, []Family{iterOnly("good"), missing("absent")})
	run, skipped, err := Select(nil)
	if err != nil || len(run) != 1 || run[0].Name != "good" {
		t.Fatalf("run %v err %v", run, err)
	}
	if len(skipped) != 1 || skipped[0].Family.Name != "absent" ||
		!strings.Contains(skipped[0].Reason.Error(), "skbtrace_no_such_tracepoint is not in this kernel") {
		t.Fatalf("skipped %+v", skipped)
	}
}

func TestSelectByNameFailsWhenTheFamilyCannotRun(t *testing.T) {
	requireKernelBTF(t)
	withFamilies(t, []Family{iterOnly("good"), missing("absent")})
	if _, _, err := Select([]string{"absent"}); err == nil || !strings.Contains(err.Error(), "event family absent cannot run") {
		t.Fatalf("err %v", err)
	}
	if _, _, err := Select([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `unknown event family "nope" (known: good, absent)`) {
		t.Fatalf("err %v", err)
	}
	run, _, err := Select([]string{"good", "good"})
	if err != nil || len(run) != 1 {
		t.Fatalf("duplicate names: run %v err %v", run, err)
	}
}

func TestSelectAllWhenNothingCanRun(t *testing.T) {
	requireKernelBTF(t)
	withFamilies(t, []Family{missing("absent")})
	if _, _, err := Select([]string{"all"}); err == nil || !strings.Contains(err.Error(), "no event family can run") {
		t.Fatalf("err %v", err)
	}
}

func TestEveryFamilyHookIsInTheObject(t *testing.T) {
	spec, err := probe.LoadSkbtrace()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range Families {
		for _, h := range f.Hooks {
			if spec.Programs[h.Program] == nil {
				t.Errorf("family %s: program %s is not in the BPF object", f.Name, h.Program)
			}
		}
	}
}
