package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/npmserver"
)

// proxyMCPConfig writes a config of the chaos upstream at url for models
// and the everything server over stdio as the MCP server "everything",
// with tenants if given (their JSON, without braces).
func proxyMCPConfig(t *testing.T, url, tenants string) string {
	t.Helper()
	server := npmserver.EverythingStdio(t)
	command, _ := json.Marshal(append([]string{server.Path}, server.Args[1:]...))
	text := fmt.Sprintf(`{
	"upstreams": {"default": {"url": %q}},
	"mcp_servers": {"everything": {"command": %s, "tools": {"echo": "read-only"}}}`, url, command)
	if tenants != "" {
		text += `,
	"tenants": {` + tenants + `}`
	}
	file := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(file, []byte(text+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// connectProxyMCP connects the Go SDK's client to endpoint with token
// (none if "").
func connectProxyMCP(t *testing.T, endpoint, token string) (*mcp.ClientSession, error) {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint}
	if token != "" {
		tr.HTTPClient = &http.Client{Transport: bearer{token}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), tr, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

// TestProxyServesAnMCPServerBesideModels: rebound proxy with the chaos
// upstream for models and the everything server (over stdio, the proxy's
// child) in "mcp_servers" answers the official Go SDK's client at
// /mcp/everything (its tools listed, echo called) and a model call at the
// same address; its server ends with the proxy.
func TestProxyServesAnMCPServerBesideModels(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	url, logs, stop := startProxy(t, "--config", proxyMCPConfig(t, upstream, ""))
	cs, err := connectProxyMCP(t, url+"/mcp/everything", "")
	if err != nil {
		t.Fatalf("connect: %v (logs %s)", err, logs)
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "echo" }) {
		t.Errorf("tools/list has no echo: %d tools", len(tools.Tools))
	}
	if got := textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "through the proxy"}})); !strings.Contains(got, "through the proxy") {
		t.Errorf("echo answered %q", got)
	}
	if n := len(everythingChildren(t)); n != 1 {
		t.Errorf("%d everything servers are the proxy's children, want the session's 1", n)
	}
	if resp, body := post(t, url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Errorf("model call: %d %s", resp.StatusCode, body)
	}
	// The session left open: the proxy's stop ends it, and its server.
	if code := stop(); code != 0 {
		t.Errorf("exit code %d (logs %s)", code, logs)
	}
	if kids := everythingChildren(t); len(kids) != 0 {
		t.Errorf("everything servers %v outlive the proxy", kids)
	}
}

// everythingChildren returns the pids of this process's children that run
// the everything server: the proxy's, run in this process. No test that
// runs one another way runs beside the test that calls it (neither is
// parallel), and those of parallel tests are grandchildren.
func everythingChildren(t *testing.T) []int {
	var pids []int
	for _, pid := range children(t, os.Getpid()) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "server-everything") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestProxyRefusesAnMCPConfigMistakeInOneLine: a tenant that names a
// server the config does not have stops the proxy at start, in one line.
func TestProxyRefusesAnMCPConfigMistakeInOneLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(file, []byte(`{"upstreams": {"default": {"url": "http://127.0.0.1:1"}},
	"tenants": {"team": {"tokens_env": "PATH", "mcp": {"nowhere": ["*"]}}}}`), 0o600)
	var stderr lockedBuffer
	code := runProxy(t.Context(), []string{"--addr", "127.0.0.1:0", "--config", file}, &lockedBuffer{}, &stderr)
	want := `rebound proxy: config: tenants.team.mcp.nowhere: unknown MCP server "nowhere" (not in mcp_servers)` + "\n"
	if code != 2 || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr.String(), want)
	}
}

// TestProxyTenantReachesOnlyItsMCPTools: with tenants, "a" given the
// everything server's echo lists only echo, and a call of another tool is
// refused with an error naming it; "b", given no server, gets 404, as if
// there were none; a session answers only the token that opened it.
func TestProxyTenantReachesOnlyItsMCPTools(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	v := fmt.Sprintf("TEST_PROXY_MCP_%d_", tenantsConfigs.Add(1))
	t.Setenv(v+"A", "tok-a")
	t.Setenv(v+"B", "tok-b")
	url, logs, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, fmt.Sprintf(
		`"a": {"tokens_env": %q, "mcp": {"everything": ["echo"]}}, "b": {"tokens_env": %q}`, v+"A", v+"B")))
	cs, err := connectProxyMCP(t, url+"/mcp/everything", "tok-a")
	if err != nil {
		t.Fatalf("connect: %v (logs %s)", err, logs)
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "echo" {
		t.Fatalf("tools/list for a: %v, %v; want echo alone", tools, err)
	}
	if got := textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "mine"}})); !strings.Contains(got, "mine") {
		t.Errorf("echo answered %q", got)
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get-env", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `tool "get-env" is not one this caller may use`) {
		t.Errorf("a tool not given: %v, want an error naming it", err)
	}
	if _, err := connectProxyMCP(t, url+"/mcp/everything", "tok-b"); err == nil || !strings.Contains(err.Error(), "Not Found") {
		t.Errorf("b, given no server: %v, want 404", err)
	}
	// b with a's session ID: the session is not b's.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/mcp/everything", strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer tok-b")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("b with a's session: %d, want 404", resp.StatusCode)
	}
}

// TestProxyServesAStreamableHTTPMCPServer: a server of "mcp_servers" given
// by url (the everything server's streamable HTTP mode, in front of which
// a recorder notes the headers) is served at /mcp/NAME; headers_env's
// header reaches it with its variable's value.
func TestProxyServesAStreamableHTTPMCPServer(t *testing.T) {
	server := npmserver.EverythingHTTP(t)
	target, _ := neturl.Parse(server.URL)
	var auth atomic.Value
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		httputil.NewSingleHostReverseProxy(&neturl.URL{Scheme: target.Scheme, Host: target.Host}).ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	v := fmt.Sprintf("TEST_PROXY_MCP_%d_AUTH", tenantsConfigs.Add(1))
	t.Setenv(v, "Bearer upstream-key")
	upstream, _ := startChaos(t, "--mode", "ok")
	file := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(file, []byte(fmt.Sprintf(`{"upstreams": {"default": {"url": %q}},
	"mcp_servers": {"web": {"url": %q, "headers_env": {"Authorization": %q}}}}`, upstream, front.URL+"/mcp", v)), 0o600)
	url, logs, _ := startProxy(t, "--config", file)
	cs, err := connectProxyMCP(t, url+"/mcp/web", "")
	if err != nil {
		t.Fatalf("connect: %v (logs %s)", err, logs)
	}
	if got := textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "over http"}})); !strings.Contains(got, "over http") {
		t.Errorf("echo answered %q", got)
	}
	if got, _ := auth.Load().(string); got != "Bearer upstream-key" {
		t.Errorf("the server got Authorization %q", got)
	}
}

// TestProxyMCPServerKilledIsRestarted: the everything server behind the
// proxy killed between calls, the next call of echo (read-only in the
// config) is answered by a server started again, the session going on as
// under rebound mcp.
func TestProxyMCPServerKilledIsRestarted(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	url, logs, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, ""))
	cs, err := connectProxyMCP(t, url+"/mcp/everything", "")
	if err != nil {
		t.Fatalf("connect: %v (logs %s)", err, logs)
	}
	echo := func(msg string) string {
		return textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}}))
	}
	echo("before")
	first := everythingChildren(t)
	if len(first) != 1 {
		t.Fatalf("everything servers %v, want 1", first)
	}
	if err := syscall.Kill(first[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := echo("after"); !strings.Contains(got, "after") {
		t.Errorf("echo after the kill answered %q", got)
	}
	if now := everythingChildren(t); len(now) != 1 || now[0] == first[0] {
		t.Errorf("everything servers %v after the kill of %d, want another one", now, first[0])
	}
}

// TestProxySIGHUPAddsAndRemovesMCPServers: a SIGHUP with a config that
// adds an MCP server makes it reachable without a restart while the
// session of the server it keeps goes on; one that removes that server
// lets a call in flight on it finish, ends its sessions and leaves the
// other's.
func TestProxySIGHUPAddsAndRemovesMCPServers(t *testing.T) {
	server := npmserver.EverythingStdio(t)
	command, _ := json.Marshal(append([]string{server.Path}, server.Args[1:]...))
	upstream, _ := startChaos(t, "--mode", "ok")
	file := filepath.Join(t.TempDir(), "config.json")
	write := func(names ...string) {
		var servers []string
		for _, n := range names {
			servers = append(servers, fmt.Sprintf(`%q: {"command": %s}`, n, command))
		}
		text := fmt.Sprintf(`{"upstreams": {"default": {"url": %q}}, "mcp_servers": {%s}}`, upstream, strings.Join(servers, ", "))
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var proc *loggedProxy
	reload := func() {
		t.Helper()
		if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if l := proc.next(t); l["msg"] != "config loaded" {
			t.Fatalf("after SIGHUP the log says %v (log %q)", l, proc.lines())
		}
	}
	write("one")
	proc = startLoggedProxy(t, "--config", file)
	proc.next(t) // loaded at start
	echo := func(cs *mcp.ClientSession, msg string) (string, error) {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		if err != nil {
			return "", err
		}
		return text(t, res, nil), nil
	}
	one, err := connectProxyMCP(t, proc.url+"/mcp/one", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := echo(one, "first"); err != nil || !strings.Contains(got, "first") {
		t.Fatalf("one: %q, %v", got, err)
	}
	write("one", "two")
	reload()
	two, err := connectProxyMCP(t, proc.url+"/mcp/two", "")
	if err != nil {
		t.Fatalf("two, added by the reload: %v", err)
	}
	if got, err := echo(two, "added"); err != nil || !strings.Contains(got, "added") {
		t.Errorf("two: %q, %v", got, err)
	}
	if got, err := echo(one, "kept"); err != nil || !strings.Contains(got, "kept") {
		t.Errorf("one's session after the reload that kept it: %q, %v", got, err)
	}
	// A call in flight on the server the next reload removes finishes.
	finished := slowCall(t, proc.url+"/mcp/one")
	write("two")
	reload()
	if got := <-finished; !strings.Contains(got, "completed") {
		t.Errorf("a call in flight on the server a reload removed: %q, want it to finish", got)
	}
	if _, err := echo(one, "gone"); err == nil {
		t.Error("one's session answered after the reload that removed one")
	}
	if got, err := echo(two, "still"); err != nil || !strings.Contains(got, "still") {
		t.Errorf("two's session after one was removed: %q, %v", got, err)
	}
}

// slowCall opens a session of the Go SDK's client with endpoint, a
// server of everything's, and calls its long-running tool (3 s), returning once the
// call is a second into its run: the channel then gives the call's text,
// or what went wrong.
func slowCall(t *testing.T, endpoint string) <-chan string {
	t.Helper()
	progressed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}})
	// A session, whose answers are event streams that carry progress (a
	// stateless client's are JSON, the answer alone).
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 3, "steps": 3}}
	params.SetProgressToken("slow")
	finished := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), params)
		switch {
		case err != nil:
			finished <- "error: " + err.Error()
		case res.IsError:
			finished <- "tool error"
		default:
			finished <- res.Content[0].(*mcp.TextContent).Text
		}
	}()
	select {
	case <-progressed:
		return finished
	case got := <-finished:
		t.Fatalf("the slow call ended before any progress: %s", got)
		return nil
	}
}

// TestProxySIGTERMLetsAToolCallInFlightFinish: at SIGTERM the proxy's MCP
// servers take no new session, finish the calls in flight within the
// drain, then end: the call is answered and the proxy exits 0.
func TestProxySIGTERMLetsAToolCallInFlightFinish(t *testing.T) {
	server := npmserver.EverythingStdio(t)
	command, _ := json.Marshal(append([]string{server.Path}, server.Args[1:]...))
	upstream, _ := startChaos(t, "--mode", "ok")
	file := filepath.Join(t.TempDir(), "config.json")
	text := fmt.Sprintf(`{"upstreams": {"default": {"url": %q}}, "mcp_servers": {"e": {"command": %s}}}`, upstream, command)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := startLoggedProxy(t, "--config", file)
	finished := slowCall(t, proc.url+"/mcp/e")
	proc.cmd.Process.Signal(syscall.SIGTERM)
	if got := <-finished; !strings.Contains(got, "completed") {
		t.Errorf("a call in flight at SIGTERM: %q, want it to finish", got)
	}
	if err := proc.cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}
