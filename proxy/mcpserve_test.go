package proxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/proxy"
)

// TestMCPRefusalsHaveAnAccessLine: a request to an MCP server that the
// proxy answers itself (no token, a server the tenant is not given, a
// tool call past the tenant's rate) has its "msg":"request" line of kind
// mcp, with its status, outcome and tenant; a request passed on has none
// of the proxy's (its lines are the handler's). A tools/call whose method
// is spelled twice, or escaped, is counted against the rate all the same.
func TestMCPRefusalsHaveAnAccessLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := map[string]string{"A_TOKENS": "tok-a", "B_TOKENS": "tok-b"}
		c := config(t, `{
		"upstreams": {"default": {"url": "http://127.0.0.1:1"}},
		"mcp_servers": {"m": {"command": ["node"]}},
		"tenants": {"a": {"tokens_env": "A_TOKENS", "requests_per_minute": 1, "mcp": {"m": ["*"]}},
		            "b": {"tokens_env": "B_TOKENS"}}}`, env)
		var logs bytes.Buffer
		p, err := proxy.New(proxy.Options{Config: c, Getenv: mapEnv(env), Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			MCPServer: func(name string, _ proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
				return callerEcho{name, &atomic.Int64{}}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		serve := func(token, body string) int {
			req := httptest.NewRequest("POST", "http://127.0.0.1/mcp/m", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			return rec.Code
		}
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
		for _, c := range []struct {
			token, body string
			status      int
		}{
			{"", call, 401},
			{"tok-b", call, 404},
			{"tok-a", call, 200},
			{"tok-a", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, 200},
			{"tok-a", `{"jsonrpc":"2.0","id":3,"method":"tools\/call","params":{"name":"x"}}`, 429},
			{"tok-a", `{"jsonrpc":"2.0","id":4,"method":"tools/call","Method":"tools/list"}`, 429},
		} {
			if got := serve(c.token, c.body); got != c.status {
				t.Errorf("%s %s: %d, want %d", c.token, c.body, got, c.status)
			}
		}
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var l map[string]any
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if l["msg"] != "request" {
				continue
			}
			if l["kind"] != "mcp" || l["server"] != "m" || l["path"] != "/mcp/m" {
				t.Errorf("line %s", line)
			}
			if _, ok := l["latency_ms"].(float64); !ok {
				t.Errorf("latency_ms in %s", line)
			}
			tenant, _ := l["tenant"].(string)
			got = append(got, fmt.Sprintf("%s:%v:%v", tenant, l["outcome"], l["status"]))
		}
		want := []string{":unauthorized:401", "b:server_not_given:404", "a:tenant_rate_limit:429", "a:tenant_rate_limit:429"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("access lines %v, want %v", got, want)
		}
		if strings.Contains(logs.String(), `"params"`) || strings.Contains(logs.String(), "tok-") {
			t.Errorf("a body or a token in the log:\n%s", logs.String())
		}
	})
}
