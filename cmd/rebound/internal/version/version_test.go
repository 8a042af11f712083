package version

import (
	"runtime/debug"
	"testing"
)

func TestVersionLine(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/rebound-go/rebound", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "1f17c81d5e2a0000000000000000000000000000"},
			{Key: "vcs.time", Value: "2025-03-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{stamped, true, "rebound v1.2.3, revision 1f17c81d5e2a0000000000000000000000000000 (modified, 2025-03-01T10:00:00Z), go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, true, "rebound (devel), go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0"}, true, "rebound (devel), go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			true, "rebound (devel), revision abc, go1.26.0"},
		{nil, false, "rebound (devel)"},
	} {
		if got := Line(c.bi, c.ok); got != c.want {
			t.Errorf("Line(%+v) = %q, want %q", c.bi, got, c.want)
		}
	}
}
