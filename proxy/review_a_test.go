package proxy_test

// The tests of this file come from an adversarial review of the proxy:
// each names a defect it found (or a property that held), and now shows it
// fixed.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

// seen is what a review upstream received.
type seen struct {
	mu      sync.Mutex
	hits    int
	rawPath string // the request target's path as sent
	header  http.Header
	body    string
}

func reviewUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) (*httptest.Server, *seen) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.hits++
		n := s.hits
		s.rawPath, _, _ = strings.Cut(r.RequestURI, "?")
		s.header, s.body = r.Header.Clone(), string(b)
		s.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

func newReviewProxy(t *testing.T, o proxy.Options) (*httptest.Server, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return front, &logs
}

func config(t *testing.T, js string, env map[string]string) *proxy.FileConfig {
	t.Helper()
	c, err := proxy.ParseConfig([]byte(js), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func do(t *testing.T, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no redirects, no transparent gzip
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestReviewDuplicateModelKey: a body with two top-level "model" keys is
// routed by the first, while the upstream (Go, Python, JS parsers: last
// wins) serves the second. A config whose routes list only some models (an
// unknown one is a 404) is thereby bypassed, and a fallback's renaming
// leaves the second key in place.
func TestReviewDuplicateModelKey(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"upstreams":{"a":{"url":"`+up.URL+`","key_env":"K"}},
		"routes":[{"model":"cheap-model","upstream":"a"}]}`, map[string]string{"K": "sk-operator-key-0123456789"})
	front, _ := newReviewProxy(t, proxy.Options{Config: c, Getenv: func(string) string { return "sk-operator-key-0123456789" }})

	if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"expensive-model"}`); resp.StatusCode != 404 {
		t.Fatalf("an unlisted model: %d, want 404 (the allow-list the operator relies on)", resp.StatusCode)
	}
	resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"cheap-model","model":"expensive-model"}`)
	var got struct{ Model string }
	json.Unmarshal([]byte(s.body), &got)
	if resp.StatusCode == 200 && got.Model == "expensive-model" {
		t.Errorf("routed as cheap-model, but the upstream (last key wins) served %q with the operator's key", got.Model)
	}
}

// TestReviewEncodedPath: "Every request goes to the upstream with the same
// path": an escaped slash in the path must stay escaped.
func TestReviewEncodedPath(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	do(t, "GET", front.URL+"/v1/files/file-a%2Fb/content", "")
	if s.rawPath != "/v1/files/file-a%2Fb/content" {
		t.Errorf("upstream got path %q, want /v1/files/file-a%%2Fb/content", s.rawPath)
	}
}

// TestReviewPathEscapesBase: a request path with dot segments leaves the
// upstream's base path (e.g. an Azure deployment or a gateway prefix) once
// the upstream normalises it, carrying the operator's key there.
func TestReviewPathEscapesBase(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL + "/openai/deployments/d1", UpstreamKey: "sk-operator-key-0123456789",
		Tokens: []string{"tok-client-000001"}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /../../../admin/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-client-000001\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.hits > 0 && !strings.HasPrefix(path.Clean(s.rawPath), "/openai/deployments/d1/") {
		t.Errorf("upstream got %q (%s once normalised) with key %q: outside the base path", s.rawPath, path.Clean(s.rawPath), s.header.Get("Authorization"))
	}
}

// TestReviewAbsoluteTarget: a proxy-style absolute request target does not
// redirect the request (or the key) to another host. (Holds.)
func TestReviewAbsoluteTarget(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	evil, e := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: "sk-operator-key-0123456789", Tokens: []string{"tok-client-000001"}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s/v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-client-000001\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", evil.URL, strings.TrimPrefix(evil.URL, "http://"))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if e.hits != 0 || s.hits != 1 {
		t.Errorf("evil got %d, upstream %d", e.hits, s.hits)
	}
}

// TestReviewTokenHeaders: with client tokens, a Gemini SDK (x-goog-api-key)
// or an Azure OpenAI SDK (api-key) puts the token where it puts its key;
// the proxy admits only Authorization: Bearer and x-api-key, so these
// SDKs, "changing only their base URL", get a 401.
func TestReviewTokenHeaders(t *testing.T) {
	up, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: "sk-operator-key-0123456789", Tokens: []string{"tok-client-000001"}})
	for _, c := range []struct{ path, header string }{
		{"/v1beta/models/gemini-2.0-flash:generateContent", "X-Goog-Api-Key"},
		{"/openai/deployments/d/chat/completions", "Api-Key"},
		{"/v1/chat/completions", "Authorization"}, // "bearer" in lower case, as RFC 6750 allows
	} {
		v := "tok-client-000001"
		if c.header == "Authorization" {
			v = "bearer " + v
		}
		if resp, body := do(t, "POST", front.URL+c.path, `{}`, c.header, v); resp.StatusCode == 401 {
			t.Errorf("token in %s: %d %s", c.header, resp.StatusCode, body)
		}
	}
}

// TestReviewUndecodableEncoding: clients such as httpx with brotli or
// zstandard installed send Accept-Encoding: br / zstd; the proxy passes it
// on, the upstream compresses its error, and rebound's classifier, which
// decodes only gzip and deflate, cannot read it: an exhausted quota is then
// a plain rate limit, retried 4 times and never handed to the fallback.
func TestReviewUndecodableEncoding(t *testing.T) {
	const quota = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.Contains(r.Header.Get("Accept-Encoding"), "br") {
			w.Header().Set("Content-Encoding", "br")
			w.WriteHeader(429)
			w.Write(brotliStored([]byte(quota)))
			return
		}
		w.WriteHeader(429)
		io.WriteString(w, quota)
	})
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Accept-Encoding", "gzip, deflate, br, zstd")
	if s.hits != 1 {
		t.Errorf("quota, compressed as the client allowed: %d upstream requests (status %d), want 1", s.hits, resp.StatusCode)
	}
}

// brotliStored encodes b as a brotli stream of one uncompressed
// meta-block (RFC 7932 §9.2), len(b) ≤ 65536.
func brotliStored(b []byte) []byte {
	var out []byte
	var acc uint64
	var n uint
	put := func(v uint64, bits uint) {
		acc |= v << n
		n += bits
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	flush := func() {
		if n > 0 {
			out = append(out, byte(acc))
			acc, n = 0, 0
		}
	}
	put(0, 1)                 // WBITS = 16
	put(0, 1)                 // ISLAST = 0
	put(0, 2)                 // MNIBBLES = 4
	put(uint64(len(b)-1), 16) // MLEN - 1
	put(1, 1)                 // ISUNCOMPRESSED
	flush()
	out = append(out, b...)
	put(1, 1) // ISLAST
	put(1, 1) // ISLASTEMPTY
	flush()
	return out
}

// TestReviewBreakerEviction: a client sending 1024 made-up model names
// evicts the open breaker of a dead upstream's real model: the next call
// for it goes to the dead upstream again (attempts and latency) instead
// of the 503 at once.
func TestReviewBreakerEviction(t *testing.T) {
	var dead atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "chat") {
			dead.Add(1)
		}
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	})
	one := rebound.Policy{MaxAttempts: 1}
	front, _ := newReviewProxy(t, proxy.Options{Upstream: "http://upstream.invalid", Base: base, Policy: &one,
		Breaker: func(key string) rebound.Breaker {
			return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: 1 << 40})
		}})
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"gpt-real"}`) // opens its breaker
	if _, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"gpt-real"}`); !strings.Contains(body, "circuit open") {
		t.Fatalf("breaker not open: %s", body)
	}
	for i := range 1024 {
		do(t, "POST", front.URL+"/v1/other", fmt.Sprintf(`{"model":"made-up-%d"}`, i))
	}
	before := dead.Load()
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"gpt-real"}`)
	if dead.Load() != before {
		t.Errorf("after 1024 made-up models, gpt-real's open breaker was forgotten: the dead upstream was called again")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestReviewFallbackGetsClientKey: with pass_client_key, the key a client
// sent for the route's upstream goes on to a fallback on another host
// (another company's endpoint of the same dialect).
func TestReviewFallbackGetsClientKey(t *testing.T) {
	primary, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
	other, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"pass_client_key":true,"upstreams":{"p":{"url":"`+primary.URL+`"},"o":{"url":"`+other.URL+`"}},
		"routes":[{"upstream":"p","fallbacks":[{"upstream":"o","model":"other-model"}]}],"policy":{"max_attempts":1}}`, nil)
	front, _ := newReviewProxy(t, proxy.Options{Config: c})
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer sk-client-primary-key-0123")
	if got := s.header.Get("Authorization"); got != "" {
		t.Errorf("the fallback on another host got the client's key for the primary: %q", got)
	}
}

// TestReviewUpstreamEchoesKey: an upstream that echoes the key it was sent
// in its error body hands the operator's key to a token-holding client.
func TestReviewUpstreamEchoesKey(t *testing.T) {
	up, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Debug-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	})
	const key = "operator-upstream-key-998877"
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: key, Tokens: []string{"tok-client-000001"}})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer tok-client-000001")
	if strings.Contains(body, key) || strings.Contains(fmt.Sprint(resp.Header), key) {
		t.Errorf("the client read the operator's key: %v %s", resp.Header, body)
	}
}

// TestReviewWebsocket: an Upgrade (OpenAI's Realtime API is a websocket on
// /v1/realtime) got a 502 after the upstream had switched protocols.
//
// The review asked for a 101 the client can use; the fix it proposes, and
// this test now asks for, is a 501 in the request's dialect before the
// upstream is contacted: the engine retries, paces and classifies HTTP
// exchanges, and has nothing to offer a websocket, which is documented as
// not proxied.
func TestReviewWebsocket(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		conn, brw, _ := w.(http.Hijacker).Hijack()
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")
		brw.Flush()
	})
	front, logs := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	resp, body := do(t, "GET", front.URL+"/v1/realtime?model=gpt-realtime", "", "Connection", "Upgrade", "Upgrade", "websocket")
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(body, `"error"`) || s.hits != 0 {
		t.Errorf("websocket upgrade: %d %s (%d upstream requests)\n%s", resp.StatusCode, body, s.hits, logs)
	}
}

// TestReviewClientGoneCancelsUpstream: a client that leaves mid-stream
// cancels the upstream request. (Holds.)
func TestReviewClientGoneCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	req, _ := http.NewRequest("POST", front.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	<-cancelled // hangs (test timeout) if the upstream is never cancelled
}

// TestReviewParallel: streams, plain answers and fallbacks in parallel
// under -race. (Holds.)
func TestReviewParallel(t *testing.T) {
	primary, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n%3 == 0 {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	})
	second, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"upstreams":{"p":{"url":"`+primary.URL+`"},"s":{"url":"`+second.URL+`"}},
		"routes":[{"upstream":"p","fallbacks":[{"upstream":"s","model":"y"}]}],"policy":{"max_attempts":2,"base_delay_ms":1,"max_delay_ms":2}}`, nil)
	front, _ := newReviewProxy(t, proxy.Options{Config: c})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"model":"m%d","stream":true}`, i%5)))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
}

// TestReviewHugeModelName: the model name is the client's, up to the body
// cap (32 MiB), and becomes a breaker key (1024 kept), a metric label
// (2000 series per instrument, kept for ever) and a field of every access
// line: 1024 requests of 32 MiB model names pin 32 GiB.
func TestReviewHugeModelName(t *testing.T) {
	up, _ := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	var keyLen atomic.Int64
	front, logs := newReviewProxy(t, proxy.Options{Upstream: up.URL, Breaker: func(key string) rebound.Breaker {
		keyLen.Store(int64(len(key)))
		return breaker.New(key, proxy.RecommendedBreaker())
	}})
	model := strings.Repeat("m", 1<<20)
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"`+model+`"}`)
	front.Close()
	if keyLen.Load() > 1024 || logs.Len() > 64<<10 {
		t.Errorf("a 1 MiB model name: breaker key of %d bytes kept, access log of %d bytes", keyLen.Load(), logs.Len())
	}
}

// TestReviewEncodedDotSegments: dot segments escaped as %2e are refused
// too (the upstream, or a server before it, may decode them first), in the
// request's dialect.
func TestReviewEncodedDotSegments(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL + "/base"})
	for _, p := range []string{"/v1/%2e%2e/%2E%2E/admin", "/v1/./messages", "/v1/a/%2e"} {
		resp, body := do(t, "POST", front.URL+p, `{}`)
		if resp.StatusCode != 400 || !strings.Contains(body, "segments") {
			t.Errorf("%s: %d %s", p, resp.StatusCode, body)
		}
	}
	if s.hits != 0 {
		t.Errorf("the upstream got %d requests", s.hits)
	}
}

// TestReviewH2CUpgradeIgnored: the 501 for upgrades leaves out h2c, which
// curl --http2 asks for on every plain-HTTP request and does without.
func TestReviewH2CUpgradeIgnored(t *testing.T) {
	up, s := reviewUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := newReviewProxy(t, proxy.Options{Upstream: up.URL})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA")
	if resp.StatusCode != 200 || s.header.Get("Upgrade") != "" {
		t.Errorf("h2c upgrade: %d %s, upstream saw Upgrade %q", resp.StatusCode, body, s.header.Get("Upgrade"))
	}
}
