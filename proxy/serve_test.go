package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestProxyKeepsUnderTheBasePath: a request path with dot segments, once
// the upstream normalises it, would leave the upstream's base path (an
// Azure deployment, a gateway's prefix) with the operator's key: it never
// reaches the upstream outside it.
func TestProxyKeepsUnderTheBasePath(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL + "/openai/deployments/d1", UpstreamKey: "sk-operator-key-0123456789",
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

// TestProxyRefusesEscapedDotSegments: dot segments escaped as %2e are
// refused too (the upstream, or a server before it, may decode them
// first), in the request's dialect.
func TestProxyRefusesEscapedDotSegments(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL + "/base"})
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

// TestProxyIgnoresAbsoluteTarget: a proxy-style absolute request target
// does not send the request (or the key) to another host.
func TestProxyIgnoresAbsoluteTarget(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	evil, e := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL, UpstreamKey: "sk-operator-key-0123456789", Tokens: []string{"tok-client-000001"}})
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

// TestProxyRefusesUpgrades: an Upgrade (OpenAI's Realtime API is a
// websocket on /v1/realtime) gets a 501 in the request's dialect before
// the upstream is contacted: the engine retries, paces and classifies
// HTTP exchanges and has nothing to offer a websocket, which is not
// proxied.
func TestProxyRefusesUpgrades(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		conn, brw, _ := w.(http.Hijacker).Hijack()
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")
		brw.Flush()
	})
	front, logs := serveProxy(t, proxy.Options{Upstream: up.URL})
	resp, body := do(t, "GET", front.URL+"/v1/realtime?model=gpt-realtime", "", "Connection", "Upgrade", "Upgrade", "websocket")
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(body, `"error"`) || s.hits != 0 {
		t.Errorf("websocket upgrade: %d %s (%d upstream requests)\n%s", resp.StatusCode, body, s.hits, logs)
	}
}

// TestProxyPassesOverH2CUpgrade: the 501 for upgrades leaves out h2c,
// which curl --http2 asks for on every plain-HTTP request and does
// without.
func TestProxyPassesOverH2CUpgrade(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Connection", "Upgrade, HTTP2-Settings", "Upgrade", "h2c", "HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA")
	if resp.StatusCode != 200 || s.header.Get("Upgrade") != "" {
		t.Errorf("h2c upgrade: %d %s, upstream saw Upgrade %q", resp.StatusCode, body, s.header.Get("Upgrade"))
	}
}
