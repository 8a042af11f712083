package proxy_test

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/memnet"
	"github.com/rebound-go/rebound/proxy"
)

// TestProxyAnswersARefusalWhoseBodyNeverComes: a request refused before
// its body is read (no token, a path with "..", a protocol upgrade) is
// answered though the body it declared never comes: net/http reads what
// is left of a body before it answers, and the body's deadline is set
// from the first, not only once the proxy reads it. In virtual time: the
// answer comes within BodyStall and a tenth.
func TestProxyAnswersARefusalWhoseBodyNeverComes(t *testing.T) {
	for _, c := range []struct {
		name, path string
		header     http.Header
		want       int
	}{
		{"no token", "/v1/chat/completions", nil, http.StatusUnauthorized},
		{"a dot segment", "/v1/../chat/completions", http.Header{"Authorization": {"Bearer tok-a"}}, http.StatusBadRequest},
		{"an upgrade", "/v1/realtime", http.Header{"Authorization": {"Bearer tok-a"}, "Upgrade": {"websocket"}}, http.StatusNotImplemented},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := map[string]string{"A_TOKENS": "tok-a", "K": "sk-up"}
				cfg := config(t, `{"upstreams":{"u":{"url":"http://upstream.test","key_env":"K"}},
					"tenants":{"a":{"tokens_env":"A_TOKENS"}}}`, env)
				p, err := proxy.New(proxy.Options{Config: cfg, Getenv: func(k string) string { return env[k] }})
				if err != nil {
					t.Fatal(err)
				}
				tr, stop := memnet.Serve(p)
				defer stop()
				body, never := io.Pipe()
				defer never.Close()
				req, _ := http.NewRequest("POST", "http://proxy.test"+c.path, body)
				req.URL.Opaque = c.path // keep the dot segment as sent
				req.ContentLength = 1 << 10
				for k, v := range c.header {
					req.Header[k] = v
				}
				got := make(chan int, 1)
				go func() {
					resp, err := tr.RoundTrip(req)
					if err != nil {
						got <- 0
						return
					}
					resp.Body.Close()
					got <- resp.StatusCode
				}()
				time.Sleep(proxy.BodyStall * 11 / 10)
				synctest.Wait()
				select {
				case status := <-got:
					if status != c.want {
						t.Errorf("answered %d, want %d", status, c.want)
					}
				default:
					t.Fatalf("no answer after %v of a body that never comes", proxy.BodyStall*11/10)
				}
			})
		})
	}
}
