package chromium

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNeedFindsABrowserThatRuns: Need returns a Chromium (installed if it
// was missing) that starts, in Home's folders, and says its version.
func TestNeedFindsABrowserThatRuns(t *testing.T) {
	path := Need(t)
	cmd := exec.CommandContext(t.Context(), path, "--headless", "--no-sandbox", "--version")
	env, _ := Home(t)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Chromium") {
		t.Fatalf("%s --version: %v: %s", path, err, out)
	}
	t.Logf("%s: %s", path, strings.TrimSpace(string(out)))
}

func TestLastLineSkipsTrailingBlankLines(t *testing.T) {
	if got := lastLine("Reading lists\nE: Unable to locate package chromium\n\n"); got != "E: Unable to locate package chromium" {
		t.Fatalf("lastLine: %q", got)
	}
}
