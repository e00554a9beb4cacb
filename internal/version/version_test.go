package version

import (
	"runtime/debug"
	"testing"
)

func TestVCSStampFillsOnlyWhatTheLinkerLeftEmpty(t *testing.T) {
	stamp := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.time", Value: "2026-11-26T16:29:49Z"}, {Key: "vcs.modified", Value: "true"}}

	i := Info{Version: "dev"}
	i.fillVCS(stamp)
	if i.Commit != "abc123" || i.Date != "2026-11-26T16:29:49Z" || i.Version != "dev" {
		t.Errorf("without linker flags: %+v", i)
	}

	i = Info{Version: "1.2.3", Commit: "def456", Date: "2026-01-02T03:04:05Z"}
	i.fillVCS(stamp)
	if i.Commit != "def456" || i.Date != "2026-01-02T03:04:05Z" {
		t.Errorf("the linker's values must win: %+v", i)
	}
}
