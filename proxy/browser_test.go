package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

const operatorKey = "sk-operator-key-0123456789"

// TestProxyRefusesForeignHost: without client tokens, a request whose
// Host is not a loopback name (a page that rebound its own name to
// 127.0.0.1) gets a 403 in its dialect, and the upstream sees nothing;
// loopback names, with or without a port, pass.
func TestProxyRefusesForeignHost(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey})
	for _, host := range []string{"example.com", "example.com:8080", "localhost.example.com", "127.0.0.1.example.com", "0.0.0.0:8080", "[::2]:8080"} {
		resp, body := doHost(t, host, "POST", front.URL+"/v1/messages", `{"model":"m"}`)
		if resp.StatusCode != 403 || !strings.HasPrefix(body, `{"type":"error","error":{"type":"permission_error"`) {
			t.Errorf("Host %s: %d %s, want a 403 in Anthropic's shape", host, resp.StatusCode, body)
		}
	}
	if s.hits != 0 {
		t.Fatalf("the upstream saw %d requests from foreign hosts", s.hits)
	}
	for _, host := range []string{"localhost", "LocalHost:8080", "127.0.0.1", "127.9.9.9:1", "[::1]", "[::1]:8080"} {
		if resp, body := doHost(t, host, "POST", front.URL+"/v1/messages", `{"model":"m"}`); resp.StatusCode != 200 {
			t.Errorf("Host %s: %d %s, want 200", host, resp.StatusCode, body)
		}
	}
}

// TestProxyRefusesForeignOrigin: a browser's request from a page the
// operator did not allow (its Origin, or Sec-Fetch-Site when it sends
// none) gets a 403, and the upstream sees nothing.
func TestProxyRefusesForeignOrigin(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey})
	for _, h := range [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://localhost:3000"}, // another local server's page
		{"Sec-Fetch-Site", "cross-site"},
	} {
		resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, h...)
		if resp.StatusCode != 403 || !strings.HasPrefix(body, `{"error":{"message":`) {
			t.Errorf("%s: %d %s, want a 403 in OpenAI's shape", h, resp.StatusCode, body)
		}
	}
	if s.hits != 0 {
		t.Errorf("the upstream saw %d requests from foreign pages", s.hits)
	}
}

// TestProxyPreflightNotForwarded: a browser's pre-flight OPTIONS never
// reaches the upstream; from a page not allowed it gets a 403.
func TestProxyPreflightNotForwarded(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Headers", "*")
		w.WriteHeader(204)
	})
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey})
	resp, body := do(t, "OPTIONS", front.URL+"/v1/chat/completions", "", "Origin", "https://evil.example",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type")
	if resp.StatusCode != 403 || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("pre-flight: %d %v %s, want a 403 without CORS headers", resp.StatusCode, resp.Header, body)
	}
	if s.hits != 0 {
		t.Errorf("the upstream saw %d pre-flights", s.hits)
	}
}

// TestProxyStripsUpstreamCORS: an upstream's CORS headers (OpenAI's
// "Access-Control-Allow-Origin: *") do not reach the client: they would
// let any page read what the operator's key bought.
func TestProxyStripsUpstreamCORS(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Expose-Headers", "X-Request-Id")
		w.Header().Set("X-Request-Id", "req-1")
		w.Write([]byte(`{}`))
	})
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey})
	resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`)
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "req-1" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	for k := range resp.Header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("the client got %s: %q", k, resp.Header.Get(k))
		}
	}
}

// doHost is do with the request's Host header set to host.
func doHost(t *testing.T, host, method, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	return roundTrip(t, req)
}

// roundTrip sends req as do does, and reads the answer.
func roundTrip(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestProxyTokensAndBrowsers: with client tokens any Host is answered
// (the token stands guard); a page's Origin is still judged, and an
// allowed page's pre-flight, which carries no token, is answered without
// one. "*" allows every origin, and only with tokens.
func TestProxyTokensAndBrowsers(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	const token = "tok-client-000001"
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey, Tokens: []string{token},
		AllowOrigins: []string{"https://App.Example:443"}})
	if resp, body := doHost(t, "proxy.example.com", "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer "+token); resp.StatusCode != 200 {
		t.Errorf("with a token, Host proxy.example.com: %d %s", resp.StatusCode, body)
	}
	if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer "+token, "Origin", "https://evil.example"); resp.StatusCode != 403 {
		t.Errorf("with a token, from another page: %d, want 403", resp.StatusCode)
	}
	resp, _ := do(t, "OPTIONS", front.URL+"/v1/chat/completions", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("an allowed page's pre-flight: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Origin", "https://app.example"); resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("an allowed page without its token: %d %v, want a 401 it can read", resp.StatusCode, resp.Header)
	}
	if s.hits != 1 {
		t.Errorf("the upstream saw %d requests, want 1", s.hits)
	}
	star, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey, Tokens: []string{token}, AllowOrigins: []string{"*"}})
	if resp, _ := do(t, "POST", star.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer "+token, "Origin", "https://any.example"); resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://any.example" {
		t.Errorf(`"*": %d %v`, resp.StatusCode, resp.Header)
	}
	if got := s.header.Get("Origin"); s.hits != 2 || got != "" {
		t.Errorf("the upstream got the page's Origin %q (%d requests)", got, s.hits)
	}
	for _, o := range []proxy.Options{
		{Upstream: up.URL, AllowOrigins: []string{"*"}},
		{Upstream: up.URL, AllowOrigins: []string{"https://app.example/path"}},
		{Upstream: up.URL, AllowOrigins: []string{"null"}},
		{Upstream: up.URL, AllowHosts: []string{"host:80"}},
		{Upstream: up.URL, AllowHosts: []string{""}},
	} {
		if _, err := proxy.New(o); err == nil {
			t.Errorf("hosts %q, origins %q: no error", o.AllowHosts, o.AllowOrigins)
		}
	}
}
