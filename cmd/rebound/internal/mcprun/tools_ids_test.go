package mcprun

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
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
	h, srv, id := helloSession(t)
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

// TestToolFilterCutsAListWhoseIDAnotherRequestShares: a caller given
// hello alone never sees block in a tools/list answer, even when it
// sends, beside its tools/list, another request under the same ID (a
// ping) whose answer comes first: the filter keeps the tools to cut by
// request ID, and the first answer under that ID must not take them.
func TestToolFilterCutsAListWhoseIDAnotherRequestShares(t *testing.T) {
	_, srv, id := helloSession(t)
	send(t, "POST", srv.URL, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25")
	leaked := 0
	for k := range 200 {
		var wg sync.WaitGroup
		var list string
		wg.Go(func() {
			list = sendBody(t, srv.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, 100+k), id)
		})
		wg.Go(func() {
			sendBody(t, srv.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 100+k), id)
		})
		wg.Wait()
		if strings.Contains(list, `"block"`) {
			leaked++
			if leaked == 1 {
				t.Errorf("a tools/list answer showed a tool not given: %s", list)
			}
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d tools/list answers showed tools not given", leaked, 200)
	}
}

// sendBody POSTs body in session and returns the answer's body.
func sendBody(t *testing.T, url, body, session string) string {
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

// helloSession serves the block server behind a Handler whose caller is
// given hello alone, and opens a session with it: the Handler, its test
// server (both closed with t) and the session's ID.
func helloSession(t *testing.T) (*Handler, *httptest.Server, string) {
	t.Helper()
	h := newHandler(t.Context(), func() *reboundmcp.Transport {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), blockServerEnv+"=1")
		return reboundmcp.New(reboundmcp.Command(cmd), reboundmcp.Options{})
	}, 4, 0)
	h.caller = func(*http.Request) proxy.MCPCaller { return proxy.MCPCaller{Tools: []string{"hello"}} }
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	status, id, _ := send(t, "POST", srv.URL, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if status != 200 || id == "" {
		t.Fatalf("initialize: %d %q", status, id)
	}
	return h, srv, id
}
