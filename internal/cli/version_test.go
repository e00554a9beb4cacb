package cli

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/skbtrace/skbtrace/internal/version"
)

// setVersion stands in for the linker flags of a release build.
func setVersion(t *testing.T, v, commit, date string) {
	t.Helper()
	old := [3]string{version.Version, version.Commit, version.Date}
	version.Version, version.Commit, version.Date = v, commit, date
	t.Cleanup(func() { version.Version, version.Commit, version.Date = old[0], old[1], old[2] })
}

func TestVersion(t *testing.T) {
	setVersion(t, "0.0~git20261126.bd031d9", "bd031d922d7d7f4b01c5f100ca39eea6f19d4054", "2026-11-26T16:29:49Z")

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"version", "--json"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("version --json: exit %d: %s", code, stderr.String())
	}
	var got map[string]string
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("version --json: %v", err)
	}
	if dec.More() {
		t.Errorf("version --json printed more than one JSON object")
	}
	want := map[string]string{"version": "0.0~git20261126.bd031d9", "commit": "bd031d922d7d7f4b01c5f100ca39eea6f19d4054",
		"date": "2026-11-26T16:29:49Z", "go_version": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("version --json: %s = %q, want %q", k, got[k], v)
		}
	}

	stdout.Reset()
	if code := Main([]string{"version"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("version: exit %d: %s", code, stderr.String())
	}
	first, _, _ := strings.Cut(stdout.String(), "\n")
	for _, s := range []string{"bd031d922d7d7f4b01c5f100ca39eea6f19d4054", "2026-11-26T16:29:49Z", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("version printed %q, without %s", stdout.String(), s)
		}
	}

	// --version and version agree on their first line.
	stdout.Reset()
	if code := Main([]string{"--version"}, nil, &stdout, &stderr); code != 0 || stdout.String() != first+"\n" {
		t.Errorf("--version: exit %d, %q; want %q", code, stdout.String(), first+"\n")
	}
	if first != "skbtrace version 0.0~git20261126.bd031d9" {
		t.Errorf("version's first line is %q", first)
	}

	if code := Main([]string{"version", "extra"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("version extra: exit %d, want a usage error", code)
	}
}
