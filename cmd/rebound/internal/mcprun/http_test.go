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

	"github.com/rebound-go/rebound/internal/frontdoor"
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
func serveFront(t *testing.T, upstreamURL string, max int) (*front, string) {
	t.Helper()
	door, _ := frontdoor.New(frontdoor.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	f := newFront(ctx, door, func() *reboundmcp.Transport {
		return reboundmcp.New(reboundmcp.HTTP(upstreamURL, nil), reboundmcp.Options{})
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
