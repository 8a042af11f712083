package reboundmcp

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/internal/npmserver"
)

// listTools connects the SDK's client over t and returns each tool's
// annotations as a short string, by name.
func listTools(t *testing.T, tr mcp.Transport) map[string]string {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "npmservers-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	tools := map[string]string{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		tools[tool.Name] = hints(tool.Annotations)
	}
	return tools
}

// hints names the annotations a tool gives: readOnly, idempotent,
// destructive=true|false, or none.
func hints(a *mcp.ToolAnnotations) string {
	if a == nil {
		return "none"
	}
	var h []string
	if a.ReadOnlyHint {
		h = append(h, "readOnly")
	}
	if a.IdempotentHint {
		h = append(h, "idempotent")
	}
	if a.DestructiveHint != nil {
		h = append(h, fmt.Sprintf("destructive=%v", *a.DestructiveHint))
	}
	if a.OpenWorldHint != nil {
		h = append(h, fmt.Sprintf("openWorld=%v", *a.OpenWorldHint))
	}
	if len(h) == 0 {
		return "none"
	}
	return strings.Join(h, ",")
}

func logTools(t *testing.T, server string, tools map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(tools)) {
		t.Logf("%s %s: %s", server, name, tools[name])
	}
}

// The tests of this module lean on what the real servers say of their
// tools; this checks that they still say it.
func TestNpmServersAnnotateTheirTools(t *testing.T) {
	memory := listTools(t, &mcp.CommandTransport{Command: npmserver.MemoryStdio(t, filepath.Join(t.TempDir(), "memory.jsonl"))})
	logTools(t, "memory", memory)
	if memory["read_graph"] != "readOnly" && !strings.HasPrefix(memory["read_graph"], "readOnly,") {
		t.Errorf("memory's read_graph is %q, want readOnly", memory["read_graph"])
	}
	if h := memory["create_entities"]; h == "" || strings.Contains(h, "readOnly") || strings.Contains(h, "idempotent") {
		t.Errorf("memory's create_entities is %q, want neither readOnly nor idempotent", h)
	}

	stdio := listTools(t, &mcp.CommandTransport{Command: npmserver.EverythingStdio(t)})
	logTools(t, "everything", stdio)
	if len(stdio) == 0 {
		t.Error("the everything server lists no tools")
	}
	srv := npmserver.EverythingHTTP(t)
	overHTTP := listTools(t, &mcp.StreamableClientTransport{Endpoint: srv.URL})
	if !maps.Equal(stdio, overHTTP) {
		t.Errorf("the everything server's tools over HTTP %v differ from over stdio %v", overHTTP, stdio)
	}
}
