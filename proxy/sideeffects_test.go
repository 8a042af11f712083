package proxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/proxy"
)

// flakyUpstream is a loopback upstream that reads each request's body
// whole and then, for the first drops requests, closes the connection
// without answering (the provider may have created what was asked);
// after, it answers 200.
func flakyUpstream(t *testing.T, drops int32) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if hits.Add(1) > drops {
			io.WriteString(w, `{"id":"file-1"}`)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

const fileUpload = `{"purpose":"batch","file":"…"}`

// noWait is the proxy's recommended policy without its waits: these tests
// count attempts, not time.
var noWait = &rebound.Policy{MaxAttempts: proxy.DefaultMaxAttempts, BaseDelay: rebound.NoDelay}

// TestProxyCreatesOnceAfterDroppedConnection: a POST that creates
// something at the provider (a file, a batch, a run…) is not sent again
// after a connection dropped once the upstream had it: the provider may
// have created it.
func TestProxyCreatesOnceAfterDroppedConnection(t *testing.T) {
	for _, path := range []string{"/v1/files", "/v1/batches", "/v1/fine_tuning/jobs", "/v1/uploads", "/v1/vector_stores",
		"/v1/assistants", "/v1/threads/thread_1/runs", "/v1/threads/thread_1/messages", "/v1/messages/batches", "/v1/made-up"} {
		up, hits := flakyUpstream(t, 1<<30)
		front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, Policy: noWait})
		resp, body := do(t, "POST", front.URL+path, fileUpload)
		if hits.Load() != 1 || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("POST %s: %d upstream requests, answered %d; want 1, 502", path, hits.Load(), resp.StatusCode)
		}
		if !strings.Contains(body, "not sent again") {
			t.Errorf("POST %s: the client is not told the request may have been carried out: %s", path, body)
		}
	}
}

// TestProxyModelCallThatActsIsSentOnceHoweverSpelled: a model call whose
// body asks the provider to act (an MCP server, a stored conversation),
// with its names escaped or folded, is sent once after a dropped
// connection, as with them plain.
func TestProxyModelCallThatActsIsSentOnceHoweverSpelled(t *testing.T) {
	for _, c := range []struct{ path, body string }{
		{"/v1/messages", `{"model":"m","mcp_servers":[{"type":"url","url":"https://x.example"}]}`},
		{"/v1/messages", `{"model":"m","mcp_serv\u0065rs":[{"type":"url","url":"https://x.example"}]}`},
		{"/v1/responses", `{"model":"m","tools":[{"type":"m\u0063p","server_url":"https://x.example"}]}`},
		{"/v1/responses", `{"model":"m","conv\u0065rsation":"conv_1","input":"hi"}`},
	} {
		up, hits := flakyUpstream(t, 1<<30)
		front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, Policy: noWait})
		resp, _ := do(t, "POST", front.URL+c.path, c.body, "Content-Type", "application/json")
		if hits.Load() != 1 || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("POST %s %s: %d upstream requests, answered %d; want 1, 502", c.path, c.body, hits.Load(), resp.StatusCode)
		}
	}
}

// TestProxyRetriesSideEffectWithIdempotencyKey: the client's
// Idempotency-Key vouches that the provider carries a request out once,
// however often it comes.
func TestProxyRetriesSideEffectWithIdempotencyKey(t *testing.T) {
	up, hits := flakyUpstream(t, 1)
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, Policy: noWait})
	resp, _ := do(t, "POST", front.URL+"/v1/files", fileUpload, "Idempotency-Key", "upload-7")
	if resp.StatusCode != 200 || hits.Load() != 2 {
		t.Fatalf("answered %d after %d upstream requests; want 200 after 2", resp.StatusCode, hits.Load())
	}
}

// TestProxyRetriesPureCallsAfterDroppedConnection: a model call (chat,
// Responses, Messages, Gemini) and a GET have no side effects, and are
// retried as before.
func TestProxyRetriesPureCallsAfterDroppedConnection(t *testing.T) {
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[]}`},
		{"POST", "/v1/responses", `{"model":"m","input":"hi"}`},
		{"POST", "/v1/embeddings", `{"model":"m","input":"hi"}`},
		{"POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`},
		{"POST", "/v1beta/models/gemini-x:generateContent", `{"contents":[]}`},
		{"GET", "/v1/files/file-1", ""},
	} {
		up, hits := flakyUpstream(t, 1)
		front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, Policy: noWait})
		resp, _ := do(t, c.method, front.URL+c.path, c.body)
		if resp.StatusCode != 200 || hits.Load() != 2 {
			t.Errorf("%s %s: answered %d after %d upstream requests; want 200 after 2", c.method, c.path, resp.StatusCode, hits.Load())
		}
	}
}

// TestProxyRetriesSafePath: a path the route's config marks safe is
// retried as a model call is.
func TestProxyRetriesSafePath(t *testing.T) {
	up, hits := flakyUpstream(t, 1)
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`"}},
		"routes":[{"upstream":"a","safe_paths":["/tokenize"]}]}`, nil)
	front, _ := serveProxy(t, proxy.Options{Config: c, Policy: noWait})
	resp, _ := do(t, "POST", front.URL+"/tokenize", `{"model":"m"}`)
	if resp.StatusCode != 200 || hits.Load() != 2 {
		t.Fatalf("safe path: answered %d after %d upstream requests; want 200 after 2", resp.StatusCode, hits.Load())
	}
	hits.Store(0)
	resp, _ = do(t, "POST", front.URL+"/tokenize/v2", `{"model":"m"}`)
	if hits.Load() != 1 || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a path under a safe one: answered %d after %d upstream requests; want 502 after 1 (safe paths are exact)", resp.StatusCode, hits.Load())
	}
}

// TestProxySideEffectNotSentToFallback: after a dropped connection the
// first upstream may have created the thing; a fallback would create a
// second.
func TestProxySideEffectNotSentToFallback(t *testing.T) {
	a, aHits := flakyUpstream(t, 1<<30)
	b, bHits := flakyUpstream(t, 0)
	c := config(t, `{"upstreams":{"a":{"url":"`+a.URL+`"},"b":{"url":"`+b.URL+`"}},
		"routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}]}`, nil)
	front, _ := serveProxy(t, proxy.Options{Config: c, Policy: noWait})
	resp, _ := do(t, "POST", front.URL+"/v1/batches", `{"input_file_id":"file-1"}`)
	if aHits.Load() != 1 || bHits.Load() != 0 || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("answered %d; %d requests to the upstream, %d to the fallback; want 502, 1, 0", resp.StatusCode, aHits.Load(), bHits.Load())
	}
}

// TestProxySideEffectRetriedWhenNothingWasSent: a refused connection, or
// an upstream's 429 or 503, sent nothing that was carried out: the call
// goes on, to the same upstream or to a fallback.
func TestProxySideEffectRetriedWhenNothingWasSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	b, bHits := flakyUpstream(t, 0)
	c := config(t, `{"upstreams":{"a":{"url":"`+closed+`"},"b":{"url":"`+b.URL+`"}},
		"routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}]}`, nil)
	front, logs := serveProxy(t, proxy.Options{Config: c, Policy: noWait})
	if resp, _ := do(t, "POST", front.URL+"/v1/files", fileUpload); resp.StatusCode != 200 || bHits.Load() != 1 {
		t.Errorf("refused by the upstream: answered %d, %d requests to the fallback; want 200, 1", resp.StatusCode, bHits.Load())
	}

	front, logs = serveProxy(t, proxy.Options{Upstream: closed, Policy: noWait})
	do(t, "POST", front.URL+"/v1/files", fileUpload)
	if !strings.Contains(logs.String(), `"attempts":4`) {
		t.Errorf("refused connections to the only upstream: not attempted 4 times: %s", logs)
	}

	var hits atomic.Int32
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch hits.Add(1) {
		case 1:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			io.WriteString(w, `{"id":"file-1"}`)
		}
	}))
	t.Cleanup(busy.Close)
	front, _ = serveProxy(t, proxy.Options{Upstream: busy.URL, Policy: noWait})
	if resp, _ := do(t, "POST", front.URL+"/v1/files", fileUpload); resp.StatusCode != 200 || hits.Load() != 3 {
		t.Errorf("a 429, then a 503: answered %d after %d upstream requests; want 200 after 3", resp.StatusCode, hits.Load())
	}
}

// TestSafePathsConfigErrors: a safe path is a whole path, as the client
// sends it; anything else is a one-line config error.
func TestSafePathsConfigErrors(t *testing.T) {
	for _, c := range []struct{ paths, want string }{
		{`["v1/tokenize"]`, `routes[0].safe_paths[0]: "v1/tokenize" does not start with /`},
		{`["/v1/tokenize","/v1/*"]`, `routes[0].safe_paths[1]: "/v1/*" has a "*": safe paths are exact paths, not patterns`},
		{`["/v1/tokenize?x=1"]`, `routes[0].safe_paths[0]: "/v1/tokenize?x=1" has a query or fragment`},
		{`["/v1/./tokenize"]`, `routes[0].safe_paths[0]: "/v1/./tokenize" has "." or ".." segments`},
		{`[""]`, `routes[0].safe_paths[0]: "" does not start with /`},
		{`["/v1/a%2Fb"]`, `routes[0].safe_paths[0]: "/v1/a%2Fb" has an escape: give the path decoded`},
		{`"/v1/tokenize"`, `routes.safe_paths: line 1, column 101: string given, want []string`},
	} {
		_, err := proxy.ParseConfig([]byte(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"routes":[{"upstream":"a","safe_paths":`+c.paths+`}]}`), nil)
		if err == nil || err.Error() != "config: "+c.want {
			t.Errorf("safe_paths %s: %v, want config: %s", c.paths, err, c.want)
		}
	}
	_, err := proxy.ParseConfig([]byte(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"routes":[{"upstream":"a","path_prefix":"/v1/","safe_paths":["/tokenize"]}]}`), nil)
	want := `config: routes[0].safe_paths[0]: "/tokenize" is outside the route's path_prefix "/v1/": no request to it comes by the route`
	if err == nil || err.Error() != want {
		t.Errorf("a safe path outside the route's prefix: %v, want %s", err, want)
	}
}

// TestProxyIdempotencyKeyBindsItsUpstream: an Idempotency-Key lets the
// upstream it was sent to carry a request out once however often it
// comes, not a fallback, which knows nothing of the first: once an
// attempt was made, a request with side effects stays with its upstream.
func TestProxyIdempotencyKeyBindsItsUpstream(t *testing.T) {
	a, aHits := flakyUpstream(t, 1<<30)
	b, bHits := flakyUpstream(t, 0)
	c := config(t, `{"upstreams":{"a":{"url":"`+a.URL+`"},"b":{"url":"`+b.URL+`"}},
		"routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}]}`, nil)
	front, _ := serveProxy(t, proxy.Options{Config: c, Policy: noWait})
	resp, _ := do(t, "POST", front.URL+"/v1/files", fileUpload, "Idempotency-Key", "upload-7")
	if aHits.Load() < 2 || bHits.Load() != 0 || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("answered %d; %d requests to the upstream, %d to the fallback; want 502, 2 or more, 0", resp.StatusCode, aHits.Load(), bHits.Load())
	}
	resp, _ = do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Idempotency-Key", "chat-7")
	if bHits.Load() != 1 || resp.StatusCode != 200 {
		t.Fatalf("a model call: answered %d, %d requests to the fallback; want 200, 1", resp.StatusCode, bHits.Load())
	}
}
