package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/proxy"
	"github.com/rebound-go/rebound/tool"
)

// TestConfigMCPServerMistakesAreEachOneLine: a server with both command
// and url, or neither, a bad tools value, a tenant naming an unknown
// server or giving no tools are each refused in a line naming the key.
func TestConfigMCPServerMistakesAreEachOneLine(t *testing.T) {
	_, err := proxy.ParseConfig([]byte(`{
		"upstreams": {"default": {"url": "http://127.0.0.1:1"}},
		"mcp_servers": {
			"both": {"command": ["node", "s.js"], "url": "http://127.0.0.1:2/mcp"},
			"neither": {"tools": {"x": "read-only"}},
			"rules": {"command": ["node"], "tools": {"add": "safe"}, "env_from": ["UNSET_VAR"]},
			"web": {"url": "http://127.0.0.1:3/mcp", "headers_env": {"Authorization": "UNSET_KEY"}, "env": {"A": "1"}}
		},
		"tenants": {"team": {"tokens_env": "TEAM", "mcp": {"nowhere": ["*"], "rules": [], "web": ["*", "get"]}}}
	}`), mapEnv(map[string]string{"TEAM": "tok"}))
	want := []string{
		`config: mcp_servers.both: both command and url: a server is one or the other`,
		`config: mcp_servers.neither: neither command nor url (want {"command": ["npx", "-y", "PACKAGE"]} or {"url": "https://HOST/mcp"})`,
		`config: mcp_servers.rules.env_from: environment variable "UNSET_VAR" is not set`,
		`config: mcp_servers.rules.tools.add: "safe" is not "read-only", "idempotent" or "side-effects"`,
		`config: mcp_servers.web: env and env_from go with command, not url`,
		`config: mcp_servers.web.headers_env.Authorization: environment variable "UNSET_KEY" is not set`,
		`config: tenants.team.mcp.nowhere: unknown MCP server "nowhere" (not in mcp_servers)`,
		`config: tenants.team.mcp.rules: no tools listed: list them, or ["*"] for all, or leave the server out`,
		`config: tenants.team.mcp.web: "*" with other tools: "*" stands alone`,
	}
	if err == nil {
		t.Fatal("accepted")
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// TestConfigMCPServerToolsShapeIsRefusedWithItsLine: a tools list where an
// object belongs is a JSON error with its line.
func TestConfigMCPServerToolsShapeIsRefusedWithItsLine(t *testing.T) {
	_, err := proxy.ParseConfig([]byte("{\"upstreams\": {\"default\": {\"url\": \"http://127.0.0.1:1\"}},\n\"mcp_servers\": {\"m\": {\"command\": [\"node\"], \"tools\": [\"add\"]}}}"), mapEnv(nil))
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("%v, want one line naming line 2", err)
	}
}

// TestConfigWithMCPServersNeedsAServer: a proxy that cannot serve MCP
// (no Options.MCPServer) refuses a config that has servers.
func TestConfigWithMCPServersNeedsAServer(t *testing.T) {
	c := config(t, `{"upstreams": {"default": {"url": "http://127.0.0.1:1"}}, "mcp_servers": {"m": {"command": ["node"]}}}`, nil)
	if _, err := proxy.New(proxy.Options{Config: c}); err == nil || !strings.Contains(err.Error(), "Options.MCPServer") {
		t.Errorf("New: %v, want a refusal naming Options.MCPServer", err)
	}
}

// callerEcho is an MCP server's handler that answers with the caller the
// proxy put in the request's context, and the body it was given.
type callerEcho struct {
	name   string
	closed *atomic.Int64
}

func (h callerEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := proxy.MCPCallerFrom(r.Context())
	body, _ := io.ReadAll(r.Body)
	json.NewEncoder(w).Encode(map[string]any{"server": h.name, "ok": ok, "holder": c.Holder, "tenant": c.Tenant, "tools": c.Tools, "body": string(body), "path": r.URL.Path})
}

func (h callerEcho) Close() error { h.closed.Add(1); return nil }

// TestMCPServersAreServedBeforeRoutesToTheirTenants: /mcp/NAME goes to
// the server's handler, not upstream, with the caller's tenant and tools;
// a tenant not given the server gets 404, a request with no token 401, a
// page of another origin a 403, each a JSON-RPC error; a
// path of no server goes to the routes as before; the spec the handler is
// made from is the config's; Close closes the handlers.
func TestMCPServersAreServedBeforeRoutesToTheirTenants(t *testing.T) {
	upstream := &atomic.Int64{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(up.Close)
	env := map[string]string{"A_TOKENS": "tok-a", "B_TOKENS": "tok-b", "PATH": "/bin", "SECRET": "s"}
	c := config(t, fmt.Sprintf(`{
		"upstreams": {"default": {"url": %q}},
		"mcp_servers": {
			"everything": {"command": ["node", "e.js"], "env": {"X": "1"}, "env_from": ["SECRET"], "tools": {"echo": "read-only"}, "trust_annotations": false},
			"web": {"url": "http://127.0.0.1:9/mcp"}
		},
		"tenants": {
			"a": {"tokens_env": "A_TOKENS", "mcp": {"everything": ["echo"], "web": ["*"]}},
			"b": {"tokens_env": "B_TOKENS"}
		}}`, up.URL), env)
	closed := &atomic.Int64{}
	var specs = map[string]proxy.MCPServerConfig{}
	p, err := proxy.New(proxy.Options{Config: c, Getenv: mapEnv(env), MCPServer: func(name string, s proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
		specs[name] = s
		return callerEcho{name, closed}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	s := specs["everything"]
	if got := s.Environ(mapEnv(env)); !slices.Equal(got, []string{"PATH=/bin", "SECRET=s", "X=1"}) {
		t.Errorf("Environ: %q", got)
	}
	if s.Trusted() || s.ToolKinds()["echo"] != tool.ReadOnly || !specs["web"].Trusted() {
		t.Errorf("spec: trusted %v, tools %v", s.Trusted(), s.ToolKinds())
	}

	resp, body := do(t, "POST", front.URL+"/mcp/everything", `{"jsonrpc":"2.0"}`, "Authorization", "Bearer tok-a")
	var got map[string]any
	json.Unmarshal([]byte(body), &got)
	if resp.StatusCode != 200 || got["tenant"] != "a" || fmt.Sprint(got["tools"]) != "[echo]" || got["body"] != `{"jsonrpc":"2.0"}` || got["holder"] == "" || got["ok"] != true {
		t.Errorf("tenant a: %d %s", resp.StatusCode, body)
	}
	if _, body := do(t, "GET", front.URL+"/mcp/web", "", "Authorization", "Bearer tok-a"); !strings.Contains(body, `"tools":null`) {
		t.Errorf(`tenant a, web (["*"]): %s`, body)
	}
	if resp, body := do(t, "POST", front.URL+"/mcp/everything", `{}`, "Authorization", "Bearer tok-b"); resp.StatusCode != 404 || !strings.Contains(body, `"jsonrpc":"2.0"`) {
		t.Errorf("tenant b, not given the server: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "POST", front.URL+"/mcp/everything/more", `{}`, "Authorization", "Bearer tok-a"); resp.StatusCode != 404 || !strings.Contains(body, "the MCP endpoint is /mcp/everything") {
		t.Errorf("a path under the server's: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "POST", front.URL+"/mcp/everything", `{}`); resp.StatusCode != 401 {
		t.Errorf("no token: %d", resp.StatusCode)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", front.URL+"/mcp/everything", strings.NewReader(`{}`))
	req.Header.Set("Origin", "https://elsewhere.example")
	req.Header.Set("Authorization", "Bearer tok-a")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), `"jsonrpc":"2.0"`) {
			t.Errorf("a page of another origin: %d %s, want a 403 in JSON-RPC", resp.StatusCode, b)
		}
	}
	if upstream.Load() != 0 {
		t.Errorf("%d MCP requests went upstream", upstream.Load())
	}
	if resp, _ := do(t, "POST", front.URL+"/mcp/other", `{}`, "Authorization", "Bearer tok-a"); resp.StatusCode != 200 || upstream.Load() != 1 {
		t.Errorf("/mcp/other, no such server: %d, %d upstream; want it routed", resp.StatusCode, upstream.Load())
	}
	if err := p.Close(); err != nil || closed.Load() != 2 {
		t.Errorf("Close: %v, %d closed", err, closed.Load())
	}
}

// TestReloadKeepsUnchangedMCPServersAndReplacesOthers: a reload keeps
// the handler of a server whose config is unchanged (not made again),
// makes one for a server added or changed, and CloseReplaced closes those
// of the servers removed or changed, once, and no other.
func TestReloadKeepsUnchangedMCPServersAndReplacesOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		closed := map[string]int{}
		made := map[string]int{}
		var mu sync.Mutex
		mk := func(name string, s proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
			mu.Lock()
			defer mu.Unlock()
			made[name+":"+s.Command[0]]++
			return closerFunc(func() { mu.Lock(); closed[name+":"+s.Command[0]]++; mu.Unlock() }), nil
		}
		servers := func(js string) *proxy.FileConfig {
			return config(t, `{"upstreams": {"default": {"url": "http://127.0.0.1:1"}}, "mcp_servers": {`+js+`}}`, nil)
		}
		p, err := proxy.New(proxy.Options{Config: servers(`"keep": {"command": ["a"]}, "change": {"command": ["a"]}, "drop": {"command": ["a"]}`), MCPServer: mk})
		if err != nil {
			t.Fatal(err)
		}
		q, err := p.Reload(servers(`"keep": {"command": ["a"]}, "change": {"command": ["b"]}, "add": {"command": ["a"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"keep:a": 1, "change:a": 1, "drop:a": 1, "change:b": 1, "add:a": 1}; !maps.Equal(made, want) {
			t.Errorf("made %v, want %v", made, want)
		}
		if len(closed) != 0 {
			t.Errorf("closed %v before CloseReplaced", closed)
		}
		q.CloseReplaced(0)
		q.CloseReplaced(0)
		synctest.Wait() // closed by a goroutine of the proxy's
		if want := map[string]int{"change:a": 1, "drop:a": 1}; !maps.Equal(closed, want) {
			t.Errorf("CloseReplaced closed %v, want %v", closed, want)
		}
		q.Close()
		if want := map[string]int{"change:a": 1, "drop:a": 1, "keep:a": 1, "change:b": 1, "add:a": 1}; !maps.Equal(closed, want) {
			t.Errorf("Close closed %v, want %v", closed, want)
		}
	})
}

// closerFunc is a handler that answers 204 and runs itself when closed.
type closerFunc func()

func (closerFunc) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}
func (f closerFunc) Close() error { f(); return nil }

// TestTenantRequestsPerMinuteCountsToolCalls: a tenant at one request a
// minute has its first tools/call passed and its second refused with a
// 429, Retry-After and a JSON-RPC error, counted as a rate-limit refusal;
// a tools/list is not counted.
func TestTenantRequestsPerMinuteCountsToolCalls(t *testing.T) {
	env := map[string]string{"A_TOKENS": "tok-a"}
	c := config(t, `{
		"upstreams": {"default": {"url": "http://127.0.0.1:1"}},
		"mcp_servers": {"m": {"command": ["node"]}},
		"tenants": {"a": {"tokens_env": "A_TOKENS", "requests_per_minute": 1, "mcp": {"m": ["*"]}}}}`, env)
	p, err := proxy.New(proxy.Options{Config: c, Getenv: mapEnv(env), MCPServer: func(name string, _ proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
		return callerEcho{name, &atomic.Int64{}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	if resp, body := do(t, "POST", front.URL+"/mcp/m", call, "Authorization", "Bearer tok-a"); resp.StatusCode != 200 {
		t.Fatalf("first call: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "POST", front.URL+"/mcp/m", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, "Authorization", "Bearer tok-a"); resp.StatusCode != 200 {
		t.Errorf("tools/list: %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, "POST", front.URL+"/mcp/m", call, "Authorization", "Bearer tok-a")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, `tenant \"a\" is over its rate limit`) {
		t.Errorf("second call: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var refused float64
	for f := range p.Figures {
		if proxy.ProxySeries[f.Series].Name == "rebound.proxy.tenant.refusals" && slices.Contains(f.Labels, proxy.Label{Key: "reason", Value: "rate_limit"}) {
			refused += f.Value
		}
	}
	if refused != 1 {
		t.Errorf("rate-limit refusals %v, want 1", refused)
	}
}
