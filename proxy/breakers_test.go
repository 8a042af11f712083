package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

// TestOpenBreakerOutlivesMadeUpModels: a client sending 1024 made-up model
// names does not evict the open breaker of a dead upstream's real model:
// the next call for it is refused at once, not sent to the dead upstream.
func TestOpenBreakerOutlivesMadeUpModels(t *testing.T) {
	var dead atomic.Int32
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "chat") {
			dead.Add(1)
		}
		return &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	})
	one := rebound.Policy{MaxAttempts: 1}
	front, _ := serveProxy(t, proxy.Options{Upstream: "http://upstream.invalid", Base: base, Policy: &one,
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
