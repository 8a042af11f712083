package proxy

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
)

// TestMCPBodiesAreHeldInTheBodyMemory: a request to an MCP server reads
// its body as a model call's is read: its bytes are reserved from the
// proxy's body memory until the server's handler has answered (a tool
// call may take minutes), and past the bound a request waits, then gets a
// 503 with Retry-After as a JSON-RPC error, and the handler never sees it.
func TestMCPBodiesAreHeldInTheBodyMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := ParseConfig([]byte(`{"upstreams": {"default": {"url": "http://upstream.test"}},
			"mcp_servers": {"tools": {"command": ["node", "server.js"]}}}`), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		seen := 0
		p, err := New(Options{Config: c, MaxBody: 64 << 10, MaxBodyMemory: 128 << 10,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			MCPServer: func(string, MCPServerConfig, *slog.Logger, rebound.Observer) (http.Handler, error) {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					seen++
					<-release
					io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
				}), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"x":"` + strings.Repeat("x", 64<<10-100) + `"}}}`
		serve := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("POST", "http://127.0.0.1/mcp/tools", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			p.ServeHTTP(rec, req)
			return rec
		}
		held := make(chan *httptest.ResponseRecorder)
		go func() { held <- serve() }()
		synctest.Wait() // with the handler, waiting for its answer
		if got := p.memory.inUse(); got < int64(len(body)) {
			t.Errorf("during the call: %d bytes reserved, want at least the body's %d", got, len(body))
		}
		refused := serve()
		if refused.Code != 503 || refused.Header().Get("Retry-After") == "" || !strings.Contains(refused.Body.String(), `"jsonrpc":"2.0"`) {
			t.Errorf("past the bound: %d %v %s, want a 503 with Retry-After as a JSON-RPC error", refused.Code, refused.Header(), refused.Body)
		}
		if seen != 1 {
			t.Errorf("the handler saw %d requests, want 1", seen)
		}
		close(release)
		if rec := <-held; rec.Code != 200 {
			t.Errorf("the first: %d %s", rec.Code, rec.Body)
		}
		if got := p.memory.inUse(); got != 0 {
			t.Errorf("all done: %d bytes still reserved", got)
		}
	})
}
