package host

import (
	"os"
	"strings"
	"testing"
)

func TestMemoryCgroupDir(t *testing.T) {
	f, err := os.Open("testdata/mountinfo-v1-memory")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mounts, err := parseCgroupMounts(f)
	if err != nil {
		t.Fatal(err)
	}
	const procCgroup = "9:name=systemd:/\n4:memory:/process_api/b2b9\n1:cpu:/\n0::/\n"
	// cgroup2 is mounted (without the memory controller, which the
	// caller finds by the absent memory.current): both are found.
	dir, root, ok := memoryCgroupDir(procCgroup, mounts, false)
	if !ok || dir != "/sys/fs/cgroup/memory/process_api/b2b9" || root != "/sys/fs/cgroup/memory" {
		t.Errorf("v1: %q %q %v", dir, root, ok)
	}
	dir, root, ok = memoryCgroupDir(procCgroup, mounts, true)
	if !ok || dir != "/sys/fs/cgroup/unified" || root != "/sys/fs/cgroup/unified" {
		t.Errorf("v2: %q %q %v", dir, root, ok)
	}
	// A cgroup namespace mounts the process's own cgroup as the root.
	v2, err := parseCgroupMounts(strings.NewReader("30 23 0:26 /user.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir, _, ok = memoryCgroupDir("0::/user.slice/session-1.scope\n", v2, true)
	if !ok || dir != "/sys/fs/cgroup/session-1.scope" {
		t.Errorf("v2 namespaced: %q %v", dir, ok)
	}
	if _, _, ok := memoryCgroupDir("0::/user.slicex/a\n", v2, true); ok {
		t.Error("a cgroup outside the mounted one was found")
	}
}

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"67108864\n":            64 << 20,
		"max\n":                 0,
		"9223372036854771712\n": 0, // v1's "no limit"
		"junk":                  0,
	} {
		got, ok := parseMemoryLimit(in)
		if got != want || ok != (want != 0) {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}
