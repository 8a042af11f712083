package proxy_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// seen is what a recording upstream received.
type seen struct {
	mu      sync.Mutex
	hits    int
	rawPath string // the request target's path as sent
	header  http.Header
	body    string
}

// recordingUpstream is a loopback upstream that notes what it received
// (seen) and answers with h; n counts its requests from 1.
func recordingUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) (*httptest.Server, *seen) {
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

// serveProxy serves a Proxy made with o on loopback, its access log and
// errors kept in the buffer returned.
func serveProxy(t *testing.T, o proxy.Options) (*httptest.Server, *bytes.Buffer) {
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

// config parses a config file's text, its key variables read from env.
func config(t *testing.T, js string, env map[string]string) *proxy.FileConfig {
	t.Helper()
	c, err := proxy.ParseConfig([]byte(js), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends a request with header's name and value pairs, and returns the
// response and its body; no redirect is followed, no gzip decoded.
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

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
