package reboundotel_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
)

// upstream answers while up, and else fails with 503s.
type upstream struct{ down atomic.Bool }

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	status, body := http.StatusOK, `{"choices":[{"message":{"content":"42"}}]}`
	if u.down.Load() {
		status, body = http.StatusServiceUnavailable, `{"error":{"message":"down"}}`
	}
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
}

func askThrough(t *testing.T, tr *rebound.Transport) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://llm.test/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestACacheHitEndsItsCallSpanAndIsCounted(t *testing.T) {
	h := newHarness(t)
	c, err := cache.New(cache.Config{Serve: cache.Always}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &rebound.Transport{Base: &upstream{}, Cache: c, Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}}
	askThrough(t, tr)
	if resp := askThrough(t, tr); resp.Header.Get(cache.Header) != "hit" {
		t.Fatalf("the repeat was not a hit: %v", resp.Header)
	}
	spans := h.spans.GetSpans()
	if len(spans) != 3 || spans[2].Name != "rebound.call" {
		t.Fatalf("spans %v, want the first call's attempt and span, and the hit's span", spans)
	}
	hit := spans[2]
	if v, _ := attr(hit.Attributes, "rebound.cache"); v.AsString() != "hit" {
		t.Errorf("the hit's span: %v", hit.Attributes)
	}
	if v, _ := attr(hit.Attributes, "rebound.attempts"); v.AsInt64() != 0 || hit.Status.Code == codes.Error {
		t.Errorf("the hit's span: %v, status %v", hit.Attributes, hit.Status)
	}
	mustValue(t, h.metrics(t), "rebound.cache.served", attribute.String("rebound.target", "llm.test"), attribute.String("rebound.cache", "hit"))
}

func TestAStaleAnswerIsCountedAfterItsGiveUp(t *testing.T) {
	h := newHarness(t)
	c, err := cache.New(cache.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{}
	tr := &rebound.Transport{Base: u, Cache: c, Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay, Observer: h.obs}}
	askThrough(t, tr)
	u.down.Store(true)
	if resp := askThrough(t, tr); resp.Header.Get(cache.Header) != "stale" {
		t.Fatalf("no stale answer: %v", resp.Header)
	}
	spans := h.spans.GetSpans()
	call := spans[len(spans)-1]
	if call.Name != "rebound.call" || call.Status.Code != codes.Error {
		t.Errorf("the call's span %s: %v, want its give-up", call.Name, call.Status)
	}
	ms := h.metrics(t)
	mustValue(t, ms, "rebound.cache.served", attribute.String("rebound.target", "llm.test"), attribute.String("rebound.cache", "stale"))
	if _, ok := value(ms, "rebound.cache.served", attribute.String("rebound.target", "llm.test"), attribute.String("rebound.cache", "hit")); ok {
		t.Error("a stale answer counted as a hit")
	}
}
