package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// wire counts, for the SDK's client, the requests it sends and those that
// carry a session, and the session IDs answers give.
type wire struct {
	mu                        sync.Mutex
	requests, inSession, gave int
	methods                   map[string]int // HTTP methods
}

func (c *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if c.methods == nil {
		c.methods = map[string]int{}
	}
	c.methods[r.Method]++
	if r.Header.Get("Mcp-Session-Id") != "" {
		c.inSession++
	}
	if err == nil && resp.Header.Get("Mcp-Session-Id") != "" {
		c.gave++
	}
	return resp, err
}

func (c *wire) counts() (requests, inSession, gave int, methods map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests, c.inSession, c.gave, c.methods
}

// TestMCPHTTPServesTheStatelessProtocol: the Go SDK's client with its
// default options speaks the stateless protocol to rebound mcp --addr:
// discover, then every request POSTed on its own, none with a session;
// two such clients share one server, started once. A read-only call the
// server dies under is answered by the next server; a side-effecting one
// runs once, and its caller is told it may have taken effect. A client
// asking for 2025-11-25 still gets a session, and a server of its own.
func TestMCPHTTPServesTheStatelessProtocol(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "starts")
	cmd, endpoint := startHTTP(t, nil, append([]string{"--name", "test"}, testServer(mark)...)...)
	connect := func(version string) (*mcp.ClientSession, *wire) {
		t.Helper()
		w := &wire{}
		client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
		var opts *mcp.ClientSessionOptions
		if version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: w}}, opts)
		if err != nil {
			t.Fatalf("connect (%q): %v", version, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs, w
	}

	one, oneWire := connect("")
	if v := one.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("protocol %q, want 2026-07-28", v)
	}
	if info := one.InitializeResult().ServerInfo; info == nil || info.Name != "rebound-test" {
		t.Errorf("server info %+v, want the server's", info)
	}
	tools, err := one.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 5 {
		t.Fatalf("tools/list: %v %+v, want the server's 5 tools", err, tools)
	}
	pid := callInt(t, one, "pid")
	two, twoWire := connect("")
	if again := callInt(t, two, "pid"); again != pid {
		t.Errorf("a second stateless client was answered by server %d, the first by %d: want one server", again, pid)
	}
	if starts := serverStarts(t, mark); len(starts) != 1 {
		t.Errorf("server starts %v for two stateless clients, want one", starts)
	}

	if next := callInt(t, one, "first_start_dies"); next == pid {
		t.Errorf("first_start_dies answered by the server it killed, %d", pid)
	} else if starts := serverStarts(t, mark); len(starts) != 2 || starts[1] != next {
		t.Errorf("starts %v, answer from %d: want the call answered by the second start", starts, next)
	}
	_, err = two.CallTool(t.Context(), &mcp.CallToolParams{Name: "exit", Arguments: map[string]any{}})
	want := `reboundmcp: MCP server test died while tool "exit" ran: the call may have taken effect, and was not sent again`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("tools/call exit: %v, want an error with %q", err, want)
	}
	data, _ := os.ReadFile(mark)
	if n := strings.Count(string(data), "exit\n"); n != 1 {
		t.Errorf("the side-effecting tool ran %d times, want once", n)
	}
	callInt(t, two, "pid")

	for name, w := range map[string]*wire{"first": oneWire, "second": twoWire} {
		requests, inSession, gave, methods := w.counts()
		if requests < 3 || inSession != 0 || gave != 0 || methods["POST"] != requests {
			t.Errorf("%s stateless client: %d requests (%v), %d with a session, %d answers giving one; want POSTs alone, no session", name, requests, methods, inSession, gave)
		}
	}

	old, oldWire := connect("2025-11-25")
	if v := old.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Errorf("protocol %q, want 2025-11-25", v)
	}
	if own := callInt(t, old, "pid"); own == pid {
		t.Errorf("the session was answered by the stateless clients' server %d", own)
	}
	if _, inSession, gave, _ := oldWire.counts(); inSession == 0 || gave == 0 {
		t.Errorf("client of 2025-11-25: %d requests with a session, %d answers giving one; want a session", inSession, gave)
	}
	stop(t, cmd)
}

// TestProxyMCPStatelessAndSessionClientsOfATenant: through rebound proxy,
// a tenant given the everything server's echo is served with the
// stateless protocol and with sessions alike: it lists echo alone, echo
// answers, another tool is refused with an error naming it; and every
// access line of its calls names the tenant, but the initialize of the
// upstream the stateless clients share, which is no one tenant's.
func TestProxyMCPStatelessAndSessionClientsOfATenant(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	v := fmt.Sprintf("TEST_PROXY_MCP_%d_", tenantsConfigs.Add(1))
	t.Setenv(v+"A", "tok-a")
	url, logs, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, fmt.Sprintf(`"a": {"tokens_env": %q, "mcp": {"everything": ["echo"]}}`, v+"A")))
	for _, version := range []string{"", "2025-11-25"} {
		w := &wire{}
		client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
		tr := &mcp.StreamableClientTransport{Endpoint: url + "/mcp/everything", HTTPClient: &http.Client{Transport: bearerOver{"tok-a", w}}}
		cs, err := client.Connect(t.Context(), tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connect (%q): %v (logs %s)", version, err, logs)
		}
		if _, inSession, _, _ := w.counts(); (inSession == 0) != (version == "") {
			t.Errorf("client of %q: %d requests with a session", version, inSession)
		}
		tools, err := cs.ListTools(t.Context(), nil)
		if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
			t.Errorf("tools/list (%q): %v, %v; want echo alone", version, tools, err)
		}
		if got := textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "mine"}})); !strings.Contains(got, "mine") {
			t.Errorf("echo (%q) answered %q", version, got)
		}
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get-env", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `tool "get-env" is not one this caller may use`) {
			t.Errorf("a tool not given (%q): %v, want an error naming it", version, err)
		}
		cs.Close()
	}
	lines, shared := 0, 0
	for line := range strings.Lines(logs.String()) {
		var l struct{ Msg, Kind, Method, Tenant string }
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "request" || l.Kind != "mcp" {
			continue
		}
		lines++
		if l.Tenant == "" && l.Method == "initialize" && shared == 0 {
			shared++
			continue
		}
		if l.Tenant != "a" {
			t.Errorf("access line without the tenant: %s", line)
		}
	}
	if lines < 4 { // each client's tools/list and echo
		t.Errorf("%d MCP access lines, want at least 4; logs:\n%s", lines, logs)
	}
}

// bearerOver adds a token to every request, sent through next.
type bearerOver struct {
	token string
	next  http.RoundTripper
}

func (b bearerOver) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// BenchmarkMCPHTTPCall is a tools/call of pid through rebound mcp --addr
// by the Go SDK's client, round trip: over the stateless protocol (every
// call a POST of its own to the shared server) and in a session.
func BenchmarkMCPHTTPCall(b *testing.B) {
	cmd := commandProcess(b, append([]string{"mcp", "--addr", "127.0.0.1:0", "--log", "warn"}, testServer("")...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		b.Fatalf("first line %q", line)
	}
	for _, c := range []struct{ name, version string }{{"stateless", ""}, {"session", "2025-11-25"}} {
		b.Run(c.name, func(b *testing.B) {
			client := mcp.NewClient(&mcp.Implementation{Name: "rebound-bench", Version: "1"}, nil)
			cs, err := client.Connect(b.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: c.version})
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			params := &mcp.CallToolParams{Name: "pid", Arguments: map[string]any{}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cs.CallTool(b.Context(), params); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
