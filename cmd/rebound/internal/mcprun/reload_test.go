package mcprun

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/tool"
)

// TestReloadToolsKeepsTheRulesOfABadFile: SIGHUP's reload takes a good
// --config's rules for the sessions to come, keeps the live ones when the
// file is bad (one "config refused" line), and without a file logs that
// it is ignored.
func TestReloadToolsKeepsTheRulesOfABadFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tools.json")
	var log bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&log, nil))
	var live atomic.Pointer[reboundmcp.Options]
	live.Store(&reboundmcp.Options{Name: "srv"})

	os.WriteFile(file, []byte(`{"tools": {"search": "read-only"}}`), 0o600)
	reloadTools(file, &live, logger)
	if o := live.Load(); o.Tools["search"] != tool.ReadOnly || o.Name != "srv" {
		t.Fatalf("after a good file: %+v", o)
	}
	os.WriteFile(file, []byte(`{"tools": {"search": "maybe"}}`), 0o600)
	reloadTools(file, &live, logger)
	if o := live.Load(); o.Tools["search"] != tool.ReadOnly {
		t.Errorf("a bad file changed the rules: %+v", o.Tools)
	}
	reloadTools("", &live, logger)
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	for i, want := range []string{`"msg":"config loaded"`, `"msg":"config refused"`, `"msg":"SIGHUP ignored: there is no --config to re-read"`} {
		if i >= len(lines) || !strings.Contains(lines[i], want) {
			t.Errorf("log line %d: want %s in\n%s", i, want, log.String())
		}
	}
}
