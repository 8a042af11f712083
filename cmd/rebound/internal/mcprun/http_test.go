package mcprun

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/front"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/npmserver"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// sdkUpstream serves a Go SDK server over streamable HTTP and counts the
// sessions it opened.
func sdkUpstream(t *testing.T) (url string, sessions *atomic.Int32) {
	t.Helper()
	sessions = &atomic.Int32{}
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, &mcp.ServerOptions{
		InitializedHandler: func(context.Context, *mcp.InitializedRequest) { sessions.Add(1) },
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(up.Close)
	return up.URL, sessions
}

// serveFront serves a front to upstreamURL with at most max sessions.
func serveFront(t *testing.T, upstreamURL string, max int) (*endpoint, string) {
	t.Helper()
	return serveFrontTo(t, frontdoor.Options{}, func() reboundmcp.Upstream { return reboundmcp.HTTP(upstreamURL, nil) }, max)
}

// serveFrontTo serves a front with door's rule, each session to an
// upstream of its own, at most max sessions.
func serveFrontTo(t *testing.T, door frontdoor.Options, upstream func() reboundmcp.Upstream, max int) (*endpoint, string) {
	t.Helper()
	d, err := frontdoor.New(door)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := newFront(ctx, d, func() *reboundmcp.Transport {
		return reboundmcp.New(upstream(), reboundmcp.Options{})
	}, max, 0)
	srv := httptest.NewServer(f)
	t.Cleanup(func() { cancel(); f.closeAll(); srv.Close() })
	return f, srv.URL + Path
}

// send makes a request and returns its status, the session it names and
// its body's JSON-RPC error code (0 for none).
func send(t *testing.T, method, url, body string, header ...string) (status int, session string, code int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var msg struct {
		Error struct{ Code int } `json:"error"`
	}
	if resp.Header.Get("Content-Type") == "application/json" {
		json.Unmarshal(data, &msg)
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), msg.Error.Code
}

// TestFrontRefusesWhatOpensNoSession: only an initialize opens a session
// (and so an upstream connection); a request naming a session the front
// does not know gets the 404 and -32001 the SDKs' clients read as a lost
// session; nothing refused reaches the upstream.
func TestFrontRefusesWhatOpensNoSession(t *testing.T) {
	upURL, sessions := sdkUpstream(t)
	_, url := serveFront(t, upURL, 4)
	for _, c := range []struct {
		method, url, body string
		header            []string
		status, code      int
	}{
		{"POST", url, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil, 400, codeServerError},
		{"POST", url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil, 400, codeServerError},
		{"POST", url, `not json`, nil, 400, -32700},
		// Read by reboundmcp.DecodeMessage, as every message is: a member
		// given twice, or spelled another way, is JSON but no message.
		{"POST", url, `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"initialize"}`, nil, 400, -32600},
		{"POST", url, `{"jsonrpc":"2.0","ID":1,"method":"initialize"}`, nil, 400, -32600},
		{"POST", url, initialize, []string{"Content-Type", "text/plain"}, 415, codeServerError},
		{"POST", url, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, []string{"Mcp-Session-Id", "gone"}, 404, codeSessionNotFound},
		{"GET", url, "", nil, 400, codeServerError},
		{"DELETE", url, "", []string{"Mcp-Session-Id", "gone"}, 404, codeSessionNotFound},
		{"PUT", url, initialize, nil, 405, codeServerError},
		{"POST", strings.TrimSuffix(url, Path) + "/other", initialize, nil, 404, codeServerError},
		{"POST", url, strings.Repeat(" ", maxBody) + initialize, nil, 413, codeServerError},
	} {
		status, _, code := send(t, c.method, c.url, c.body, c.header...)
		if status != c.status || code != c.code {
			t.Errorf("%s %s %.40q %v: %d, JSON-RPC code %d; want %d, %d", c.method, c.url, c.body, c.header, status, code, c.status, c.code)
		}
	}
	if n := sessions.Load(); n != 0 {
		t.Errorf("the upstream opened %d sessions for refused requests", n)
	}
}

// TestFrontBoundsSessions: past --max-sessions an initialize gets a 503
// with Retry-After and opens nothing; a DELETE frees a place, and ends
// its upstream connection before it is answered.
func TestFrontBoundsSessions(t *testing.T) {
	upURL, sessions := sdkUpstream(t)
	f, url := serveFront(t, upURL, 1)
	status, first, _ := send(t, "POST", url, initialize)
	if status != 200 || first == "" {
		t.Fatalf("first initialize: %d, session %q", status, first)
	}
	if status, _, _ := send(t, "POST", url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id", first); status != 202 {
		t.Fatalf("initialized: %d", status)
	}
	if status, _, code := send(t, "POST", url, initialize); status != 503 || code != codeServerError {
		t.Errorf("initialize past the bound: %d, code %d; want 503", status, code)
	}
	if status, _, _ := send(t, "DELETE", url, "", "Mcp-Session-Id", first); status != 204 {
		t.Errorf("DELETE: %d, want 204", status)
	}
	f.mu.Lock()
	open := len(f.sessions)
	f.mu.Unlock()
	if open != 0 {
		t.Errorf("%d sessions open after DELETE", open)
	}
	if status, second, _ := send(t, "POST", url, initialize); status != 200 || second == first {
		t.Errorf("initialize after DELETE: %d, session %q", status, second)
	}
	if n := sessions.Load(); n < 1 {
		t.Errorf("the upstream saw %d sessions initialized", n)
	}
}

// TestFrontDoor: the door comes before anything of MCP: a browser's
// pre-flight from an allowed origin is answered with CORS headers, a
// foreign page gets a 403 and a request without the token a 401, each
// with a JSON-RPC error body, and none opens a session.
func TestFrontDoor(t *testing.T) {
	door, err := frontdoor.New(frontdoor.Options{Tokens: []string{"tok"}, AllowOrigins: []string{"http://localhost:5173"}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(t.Context(), door, nil, 1, 0) // no session may start: nil would panic
	for _, c := range []struct {
		method string
		header []string
		status int
	}{
		{"OPTIONS", []string{"Origin", "http://localhost:5173", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "mcp-session-id"}, 204},
		{"POST", []string{"Origin", "https://evil.example", "Authorization", "Bearer tok"}, 403},
		{"POST", []string{"Origin", "http://localhost:5173"}, 401},
		{"POST", []string{"Authorization", "Bearer wrong"}, 401},
	} {
		r := httptest.NewRequest(c.method, "http://mcp.example.com"+Path, strings.NewReader(initialize))
		for i := 0; i+1 < len(c.header); i += 2 {
			r.Header.Set(c.header[i], c.header[i+1])
		}
		w := httptest.NewRecorder()
		f.ServeHTTP(w, r)
		var msg struct{ Error struct{ Message string } }
		json.Unmarshal(w.Body.Bytes(), &msg)
		switch {
		case w.Code != c.status:
			t.Errorf("%s %v: %d, want %d", c.method, c.header, w.Code, c.status)
		case c.status == 204 && w.Header().Get("Access-Control-Allow-Origin") != "http://localhost:5173":
			t.Errorf("pre-flight: headers %v", w.Header())
		case c.status != 204 && msg.Error.Message == "":
			t.Errorf("%s %v: body %q, want a JSON-RPC error", c.method, c.header, w.Body)
		}
	}
	if len(f.sessions) != 0 {
		t.Errorf("%d sessions opened", len(f.sessions))
	}
}

// TestFrontFailedInitializeHoldsNoSession: an initialize answered with an
// error (the server is down) leaves no session behind: a client that got
// an error has no session to use or DELETE, so one kept would hold a
// place of --max-sessions (and an upstream that keeps restarting) until
// --session-timeout, and a client retrying its connect would fill them all.
func TestFrontFailedInitializeHoldsNoSession(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/mcp"
	down.Close() // nothing listens there now: every connection is refused
	f, url := serveFront(t, downURL, 1)
	for i := range 3 {
		status, _, code := send(t, "POST", url, initialize)
		if status != 200 {
			t.Fatalf("initialize %d with the server down: %d, JSON-RPC code %d; want 200 and an error answer", i+1, status, code)
		}
		f.mu.Lock()
		open := len(f.sessions)
		f.mu.Unlock()
		if open != 0 {
			t.Fatalf("after initialize %d failed: %d sessions open, want 0", i+1, open)
		}
	}
}

// TestFrontSessionAnswersOnlyTheTokenThatOpenedIt: with tokens, a client
// that holds another valid token and the session's ID gets, for a call
// or a DELETE, the same 404 as for a session that does not exist; the
// session goes on for the client that opened it.
func TestFrontSessionAnswersOnlyTheTokenThatOpenedIt(t *testing.T) {
	upURL, _ := sdkUpstream(t)
	f, url := serveFrontTo(t, frontdoor.Options{Tokens: []string{"tok-a", "tok-b"}}, func() reboundmcp.Upstream { return reboundmcp.HTTP(upURL, nil) }, 4)
	a, b := []string{"Authorization", "Bearer tok-a"}, []string{"Authorization", "Bearer tok-b"}
	status, id, _ := send(t, "POST", url, initialize, a...)
	if status != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", status, id)
	}
	inSession := func(token []string) []string { return append([]string{"Mcp-Session-Id", id}, token...) }
	if status, _, _ := send(t, "POST", url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, inSession(a)...); status != 202 {
		t.Fatalf("initialized: %d", status)
	}
	for _, c := range []struct{ method, body string }{
		{"POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`},
		{"POST", `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"DELETE", ""},
	} {
		if status, _, code := send(t, c.method, url, c.body, inSession(b)...); status != 404 || code != codeSessionNotFound {
			t.Errorf("%s %.40s with another token: %d, JSON-RPC code %d; want 404, %d as for an unknown session", c.method, c.body, status, code, codeSessionNotFound)
		}
	}
	if status, _, _ := send(t, "POST", url, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, inSession(a)...); status != 200 {
		t.Errorf("tools/list with the session's own token: %d, want 200", status)
	}
	f.mu.Lock()
	open := len(f.sessions)
	f.mu.Unlock()
	if open != 1 {
		t.Errorf("%d sessions open, want the one", open)
	}
}

// post sends one JSON-RPC message in a session, as a client without a
// GET stream does, and returns the status and the body.
func post(t *testing.T, url, session, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestFrontSessionOutlivesTheServersNotifications: the reference
// everything server sends notifications/tools/list_changed right after
// notifications/initialized; to a client that has no GET stream open it
// has nowhere to go, and is dropped, while the session goes on: each of
// the client's plain requests after it is answered.
func TestFrontSessionOutlivesTheServersNotifications(t *testing.T) {
	server := npmserver.EverythingStdio(t)
	_, url := serveFrontTo(t, frontdoor.Options{}, func() reboundmcp.Upstream { return reboundmcp.Command(server) }, 4)
	status, id, _ := send(t, "POST", url, initialize)
	if status != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", status, id)
	}
	if status, body := post(t, url, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != 202 {
		t.Fatalf("initialized: %d %s", status, body)
	}
	for i, c := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, `"name":"echo"`},
		{`{"jsonrpc":"2.0","id":3,"method":"ping"}`, `"result":{}`},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"message":"still here"}}}`, "still here"},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`, `"name":"echo"`},
	} {
		if status, body := post(t, url, id, c.body); status != 200 || !strings.Contains(body, c.want) {
			t.Fatalf("request %d after initialized, %.50s: %d %s; want 200 and %s", i+1, c.body, status, body, c.want)
		}
	}
}

// TestFrontsOwnPathsNeedNoClientToken: /healthz and /readyz are answered
// without a token, /readyz 503 once draining; /metrics only to the admin
// token (a client token opens nothing), its refusal a JSON-RPC error.
func TestFrontsOwnPathsNeedNoClientToken(t *testing.T) {
	door, err := frontdoor.New(frontdoor.Options{Tokens: []string{"tok"}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFront(t.Context(), door, nil, 1, 0) // no session may start: nil would panic
	f.metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "rebound_calls 1\n") })
	f.admin = front.Admin{Token: frontdoor.NewAdminToken("adm"), Server: "rebound mcp", Pages: "the admin pages (/metrics)"}
	serve := func(path, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://mcp.example.com"+path, nil)
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		w := httptest.NewRecorder()
		f.ServeHTTP(w, r)
		return w
	}
	if w := serve("/healthz", ""); w.Code != 200 {
		t.Errorf("/healthz: %d", w.Code)
	}
	if w := serve("/readyz", ""); w.Code != 200 {
		t.Errorf("/readyz: %d", w.Code)
	}
	if w := serve("/metrics", "adm"); w.Code != 200 || w.Body.String() != "rebound_calls 1\n" {
		t.Errorf("/metrics with the admin token: %d %q", w.Code, w.Body)
	}
	w := serve("/metrics", "tok")
	var msg struct{ Error struct{ Message string } }
	if json.Unmarshal(w.Body.Bytes(), &msg); w.Code != 401 || msg.Error.Message == "" {
		t.Errorf("/metrics with a client token: %d %q, want a 401 with a JSON-RPC error", w.Code, w.Body)
	}
	f.draining.Store(true)
	if w := serve("/readyz", ""); w.Code != 503 {
		t.Errorf("/readyz while draining: %d, want 503", w.Code)
	}
}
