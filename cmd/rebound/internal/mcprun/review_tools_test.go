package mcprun

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// TestToolFilterKeepsNothingForAListTheSessionRefused: a caller given
// some tools whose tools/list POSTs the session's transport refuses (here
// for a Last-Event-ID header, which a POST may not carry) leaves nothing
// behind in the session's tool filter: the list of tools kept for each
// until its answer passes would otherwise grow with every such POST, a
// new ID each, for as long as the session lives.
func TestToolFilterKeepsNothingForAListTheSessionRefused(t *testing.T) {
	h := newHandler(t.Context(), func() *reboundmcp.Transport {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), blockServerEnv+"=1")
		return reboundmcp.New(reboundmcp.Command(cmd), reboundmcp.Options{})
	}, 4, 0)
	h.caller = func(*http.Request) proxy.MCPCaller { return proxy.MCPCaller{Tools: []string{"hello"}} }
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	status, id, _ := send(t, "POST", srv.URL, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != 200 || id == "" {
		t.Fatalf("initialize: %d %q", status, id)
	}
	const n = 100
	for i := range n {
		status, _, _ := send(t, "POST", srv.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 1000+i),
			"Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25", "Last-Event-ID", "x")
		if status != http.StatusBadRequest {
			t.Fatalf("a tools/list with Last-Event-ID: %d, want the transport's 400", status)
		}
	}
	h.mu.Lock()
	s := h.sessions[id]
	h.mu.Unlock()
	s.conn.filter.mu.Lock()
	kept := len(s.conn.filter.lists)
	s.conn.filter.mu.Unlock()
	if kept != 0 {
		t.Errorf("the tool filter keeps %d lists for %d tools/list POSTs the session refused, want 0", kept, n)
	}
}
