package proxy_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// cannedUpstream answers every request with a small chat completion, in
// memory.
type cannedUpstream struct{}

const canned = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

func (cannedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, req.Body)
	req.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(canned)), ContentLength: int64(len(canned)), Request: req}, nil
}

// BenchmarkProxy: the proxy's own work for one request (routing, the
// body, rebound.Transport, the breaker, the limits, the access line), the
// network left out: the client's request is served in memory and the
// upstream answers in memory.
func BenchmarkProxy(b *testing.B) {
	p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: cannedUpstream{},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	const body = `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
