package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// send makes a request with the given Host (empty: the URL's) and
// headers, and returns the answer's status, headers and body.
func send(t *testing.T, method, url, host, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestProxyLoopbackRefusesBrowsers: "rebound proxy" on loopback with the
// operator's key and no client tokens answers a request for another Host
// (DNS rebinding), one from a page the operator did not allow, and a
// browser's pre-flight with a 403 in the request's dialect, and the
// upstream sees none of them; it passes on no CORS header of the
// upstream's.
func TestProxyLoopbackRefusesBrowsers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		io.WriteString(w, `{}`)
	})
	t.Setenv("TEST_PROXY_KEY", "sk-upstream-key-abcdef")
	url, _, _ := startProxy(t, "--upstream", up.URL, "--key-env", "TEST_PROXY_KEY")
	for _, c := range []struct {
		method, host string
		header       []string
	}{
		{"POST", "example.com", nil},
		{"POST", "attacker.example:8080", nil},
		{"POST", "", []string{"Origin", "https://attacker.example"}},
		{"OPTIONS", "", []string{"Origin", "https://attacker.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "content-type"}},
	} {
		status, header, body := send(t, c.method, url+"/v1/messages", c.host, `{"model":"claude"}`, c.header...)
		if status != 403 || !strings.HasPrefix(body, `{"type":"error","error":{"type":"permission_error"`) || header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s Host %q %q: %d %v %s, want a 403 in Anthropic's shape", c.method, c.host, c.header, status, header, body)
		}
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("the upstream saw %d requests from browsers", n)
	}
	status, header, _ := send(t, "POST", url+"/v1/messages", "", `{"model":"claude"}`)
	if status != 200 || header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("from loopback: %d %v, want 200 without CORS headers", status, header)
	}
}

// TestProxyAllowedHostsAndOrigins: --allow-host lets a name through, as
// the config's allow_hosts does; a page of an --allow-origin origin gets
// its pre-flight answered by the proxy and CORS headers on the answer,
// the upstream's own left out.
func TestProxyAllowedHostsAndOrigins(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		io.WriteString(w, `{}`)
	})
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"u":{"url":"`+up.URL+`"}},"allow_hosts":["gateway.internal"]}`), 0o600)
	url, _, _ := startProxy(t, "--config", config, "--allow-host", "proxy.internal, [::2]", "--allow-origin", "https://app.example:8443", "--allow-origin", "http://localhost:3000")
	for _, host := range []string{"proxy.internal", "PROXY.internal:9999", "gateway.internal:80", "[::2]:8080"} {
		if status, _, body := send(t, "POST", url+"/v1/chat/completions", host, chatBody); status != 200 {
			t.Errorf("Host %s: %d %s", host, status, body)
		}
	}
	if status, _, _ := send(t, "POST", url+"/v1/chat/completions", "other.internal", chatBody); status != 403 {
		t.Errorf("Host other.internal: %d, want 403", status)
	}
	hits := up.hits.Load()
	status, header, _ := send(t, "OPTIONS", url+"/v1/chat/completions", "", "", "Origin", "https://app.example:8443",
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type, x-stainless-os")
	if status != 204 || header.Get("Access-Control-Allow-Origin") != "https://app.example:8443" ||
		!strings.Contains(header.Get("Access-Control-Allow-Methods"), "POST") ||
		header.Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os" {
		t.Errorf("pre-flight: %d %v", status, header)
	}
	status, header, _ = send(t, "POST", url+"/v1/chat/completions", "", chatBody, "Origin", "http://localhost:3000")
	if status != 200 || header.Values("Access-Control-Allow-Origin")[0] != "http://localhost:3000" || len(header.Values("Access-Control-Allow-Origin")) != 1 {
		t.Errorf("from an allowed origin: %d %v", status, header)
	}
	if up.hits.Load() != hits+1 {
		t.Errorf("the upstream saw %d requests, want %d (the pre-flight is not one)", up.hits.Load(), hits+1)
	}
}
