// Package version says what "rebound version" prints: the build a
// binary was made from.
package version

import (
	"runtime/debug"
	"strings"
)

// Line describes the build bi (ok false: none recorded) in one line:
// "rebound v1.2.3, revision 1f17c81… (modified, 2025-03-01T10:00:00Z),
// go1.26.0", with "(devel)" for a version the build did not record.
func Line(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "rebound (devel)"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var b strings.Builder
	b.WriteString("rebound " + version)
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		b.WriteString(", revision " + rev)
		var notes []string
		if modified {
			notes = append(notes, "modified")
		}
		if at != "" {
			notes = append(notes, at)
		}
		if len(notes) > 0 {
			b.WriteString(" (" + strings.Join(notes, ", ") + ")")
		}
	}
	if bi.GoVersion != "" {
		b.WriteString(", " + bi.GoVersion)
	}
	return b.String()
}
