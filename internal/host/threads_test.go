package host

import (
	"os"
	"testing"
)

func TestParseThreadStatCountsFieldsFromTheCommsLastParenthesis(t *testing.T) {
	line := "4242 (py (hog) 2) R 1 4242 1 0 -1 4194304 175 0 0 0 731 12 0 0 20 0 1 0 8422635 3133440 388 " +
		"18446744073709551615 1 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 1 1 1 1 1 1 1 0\n"
	got, err := ParseThreadStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := ThreadTimes{TID: 4242, Comm: "py (hog) 2", User: 731, System: 12, CPU: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "4242 py R 1", "4242 (x) R 1 2 3", "x (y) R 1 4242 1 0 -1 4194304 175 0 0 0 a 12 0 0 20 0 1 0 8 3 388 1 1 1 1 0 0 0 0 0 0 0 0 0 17 1 0"} {
		if _, err := ParseThreadStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestReadThreadTimesFindsThisThread(t *testing.T) {
	all, err := ReadThreadTimes()
	if err != nil {
		t.Fatal(err)
	}
	self, ok := all[os.Getpid()] // the main thread's id is the process id
	if !ok || self.PID != os.Getpid() {
		t.Fatalf("no thread %d among %d", os.Getpid(), len(all))
	}
}
