// Package version says which build of skbtrace is running.
package version

import (
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X github.com/skbtrace/skbtrace/internal/version.NAME=...,
// see the Makefile and scripts/release.sh). Date is the commit's time, not
// the build's, so that two builds of one commit are byte-identical.
var (
	Version = "dev"
	Commit  string
	Date    string // RFC 3339
)

// Info is what `skbtrace version --json` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
}

// Get returns this build's Info. A plain `go build` in a git checkout has no
// linker flags but the toolchain's VCS stamp, which fills Commit and Date.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		i.fillVCS(bi.Settings)
	}
	return i
}

// fillVCS fills what the linker flags left empty from the VCS stamp.
func (i *Info) fillVCS(settings []debug.BuildSetting) {
	for _, s := range settings {
		switch {
		case s.Key == "vcs.revision" && i.Commit == "":
			i.Commit = s.Value
		case s.Key == "vcs.time" && i.Date == "":
			i.Date = s.Value
		}
	}
}
