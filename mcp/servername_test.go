package reboundmcp

import (
	"os/exec"
	"testing"
)

// TestServerIsNamedAfterItsPackage: a server a package runner starts is
// named after the package, without scope, version or extras, so that the
// logs of several say which is which; any other command by its base name.
func TestServerIsNamedAfterItsPackage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"npx", "-y", "@modelcontextprotocol/server-memory"}, "server-memory"},
		{[]string{"npx", "--yes", "@modelcontextprotocol/server-filesystem@2025.1.14", "/tmp"}, "server-filesystem"},
		{[]string{"npx", "-p", "@scope/tools", "--", "tool-server", "--port", "1"}, "tool-server"},
		{[]string{"uvx", "mcp-server-fetch"}, "mcp-server-fetch"},
		{[]string{"uvx", "--from", "git+https://example.test/x", "mcp-server-git==0.6", "--repository", "."}, "mcp-server-git"},
		{[]string{"uvx", "mcp-server-time[tz]@latest"}, "mcp-server-time"},
		{[]string{"/usr/local/bin/bunx", "some-server"}, "some-server"},
		{[]string{"pipx", "run", "mcp-server-sqlite"}, "mcp-server-sqlite"},
		{[]string{"uv", "tool", "run", "mcp-server-fetch"}, "mcp-server-fetch"},
		{[]string{"npm", "exec", "--", "@scope/server-x"}, "server-x"},
		{[]string{"uv", "run", "server.py"}, "uv"},
		{[]string{"npx"}, "npx"},
		{[]string{"npx", "-y"}, "npx"},
		{[]string{"npx", "@scope/"}, "npx"},
		{[]string{"/opt/servers/memory-server", "--db", "x"}, "memory-server"},
		{[]string{"node", "dist/index.js"}, "node"},
	} {
		if got := commandName(c.args[0], c.args[1:]); got != c.want {
			t.Errorf("%q: %q, want %q", c.args, got, c.want)
		}
	}
	// Command names its Upstream so, and Options.Name is still the last word.
	up := Command(exec.Command("npx", "-y", "@modelcontextprotocol/server-memory"))
	if up.name != "server-memory" {
		t.Errorf("Command's name %q, want server-memory", up.name)
	}
	if tr := New(up, Options{Name: "memory"}); tr.o.Name != "memory" {
		t.Errorf("Options.Name gave way to %q", tr.o.Name)
	}
}
