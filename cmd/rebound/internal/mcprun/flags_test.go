package mcprun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// TestMCPConfigFile: the per-tool rules are read strictly: each rule's
// name, nothing unknown, nothing after the object; the first bad entry
// (in name order) is named.
func TestMCPConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := filepath.Join(dir, "c.json")
		os.WriteFile(f, []byte(s), 0o600)
		return f
	}
	rules, err := readToolRules(write(`{"tools": {"create_entities": "side-effects", "search": "read-only", "set": "idempotent"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]reboundmcp.ToolRule{"create_entities": reboundmcp.ToolSideEffects, "search": reboundmcp.ToolReadOnly, "set": reboundmcp.ToolIdempotent}
	if len(rules) != len(want) {
		t.Errorf("rules %v, want %v", rules, want)
	}
	for name, r := range want {
		if rules[name] != r {
			t.Errorf("rules[%s] = %v, want %v", name, rules[name], r)
		}
	}
	for _, c := range []struct{ file, want string }{
		{`{"tools": {"b": "Read-Only", "a": "read-only"}}`, `tools["b"] is "Read-Only"`},
		{`{"tools": {"a": true}}`, `tools["a"] is true`},
		{`{"tools": {"a": "read-only"}, "servers": {}}`, `unknown field "servers"`},
		{`{"tools": {"a": "read-only"}} {}`, "something after the object"},
		{`{}`, `no "tools" object`},
		{`[]`, "cannot unmarshal array"},
		{`{"tools": {"a": "read-only",}}`, "invalid character"},
		{`{"tools": {"create": "side-effects", "b": "read-only", "create": "read-only"}}`, `tools["create"] is given twice`},
	} {
		_, err := readToolRules(write(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.file, err, c.want)
		}
	}
}
