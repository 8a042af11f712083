package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/proxy"
)

// keysSeen notes the distinct per-model keys the proxy hands to its
// observer, breakers and cool-downs.
type keysSeen struct {
	mu        sync.Mutex
	targets   map[string]bool // of the observer's events
	breakers  map[string]bool // breakers made
	cooldowns map[string]bool // cool-downs started
	fallback.MemoryCooldowns
}

func newKeysSeen() *keysSeen {
	return &keysSeen{targets: map[string]bool{}, breakers: map[string]bool{}, cooldowns: map[string]bool{}}
}

func (k *keysSeen) note(m map[string]bool, key string) {
	k.mu.Lock()
	m[key] = true
	k.mu.Unlock()
}

func (k *keysSeen) sorted(m map[string]bool) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(maps.Keys(m))
}

func (k *keysSeen) Start(ctx context.Context, target string, now time.Time, d time.Duration) {
	k.note(k.cooldowns, target)
	k.MemoryCooldowns.Start(ctx, target, now, d)
}

// options sets o's observer, breakers and cool-downs to ones that note
// their keys; the breakers open on one failure.
func (k *keysSeen) options(o proxy.Options) proxy.Options {
	o.Observer = rebound.ObserverFunc(func(e rebound.Event) { k.note(k.targets, e.Target) })
	o.Breaker = func(key string) rebound.Breaker {
		k.note(k.breakers, key)
		return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
	}
	o.Cooldowns = k
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// serve sends a chat request for model through p, in memory.
func serve(p http.Handler, model string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[]}`))
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	return rec
}

// answer is an in-memory upstream's answer.
func answer(r *http.Request, status int, body string) *http.Response {
	io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}
}

const quotaBody = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`

// TestMadeUpModelsShareOneLabel: thousands of model names that no upstream
// serves make no breaker, cool-down or metric target of their own: they
// are all "other", beside the models the config names and the one that
// was answered, which keep their own.
func TestMadeUpModelsShareOneLabel(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		real := strings.Contains(string(body), `"gpt-real"`) || strings.Contains(string(body), `"gpt-small"`)
		switch {
		case r.URL.Host == "a.test" && strings.Contains(string(body), `"gpt-listed"`):
			return answer(r, 503, `{"error":{"message":"overloaded"}}`), nil
		case real || strings.Contains(string(body), `"gpt-fallback"`):
			return answer(r, 200, canned), nil
		case r.URL.Host == "a.test":
			return answer(r, 429, quotaBody), nil // out of quota: cools down, falls back
		}
		return answer(r, 404, `{"error":{"message":"model not found","code":"model_not_found"}}`), nil
	})
	c := config(t, `{"upstreams":{"a":{"url":"http://a.test"},"b":{"url":"http://b.test"}},
		"routes":[{"model":"gpt-listed","upstream":"a","fallbacks":[{"upstream":"b","model":"gpt-fallback"}]},
			{"upstream":"a","fallbacks":[{"upstream":"b"}]}],"policy":{"max_attempts":1}}`, nil)
	k := newKeysSeen()
	p, err := proxy.New(k.options(proxy.Options{Config: c, Base: base}))
	if err != nil {
		t.Fatal(err)
	}
	if rec := serve(p, "gpt-real"); rec.Code != 200 {
		t.Fatalf("gpt-real: %d %s", rec.Code, rec.Body)
	}
	const madeUp = 3000
	for i := range madeUp {
		if rec := serve(p, fmt.Sprintf("made-up-%d", i)); rec.Code != 404 {
			t.Fatalf("made-up-%d: %d %s, want b's 404", i, rec.Code, rec.Body)
		}
	}
	for _, m := range []string{"gpt-real", "gpt-listed", "gpt-small", "gpt-small"} {
		if rec := serve(p, m); rec.Code != 200 {
			t.Fatalf("%s after %d made-up models: %d %s", m, madeUp, rec.Code, rec.Body)
		}
	}

	// gpt-small's first answer came as "other"; its second, its own.
	want := []string{"a:gpt-listed", "a:gpt-real", "a:gpt-small", "a:other", "b:gpt-fallback", "b:other"}
	if got := k.sorted(k.targets); !slices.Equal(got, want) {
		t.Errorf("%d metric targets (%q...), want %q", len(got), got[:min(len(got), 8)], want)
	}
	if got := k.sorted(k.breakers); !slices.Equal(got, want) {
		t.Errorf("%d breakers (%q...), want %q", len(got), got[:min(len(got), 8)], want)
	}
	if got, want := k.sorted(k.cooldowns), []string{"a:other"}; !slices.Equal(got, want) {
		t.Errorf("%d cool-downs (%q...), want %q", len(got), got[:min(len(got), 8)], want)
	}
}

// TestMadeUpModelFailuresLeaveAnsweredModelsBreaker: made-up names whose
// calls fail open the breaker they share, and not that of a model that
// has been answered, which goes on being served.
func TestMadeUpModelFailuresLeaveAnsweredModelsBreaker(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"gpt-real"`) {
			return answer(r, 200, canned), nil
		}
		return answer(r, 503, `{"error":{"message":"down"}}`), nil
	})
	k := newKeysSeen()
	one := rebound.Policy{MaxAttempts: 1}
	p, err := proxy.New(k.options(proxy.Options{Upstream: "http://upstream.test", Base: base, Policy: &one}))
	if err != nil {
		t.Fatal(err)
	}
	serve(p, "gpt-real")
	for i := range 100 {
		serve(p, fmt.Sprintf("made-up-%d", i))
	}
	if rec := serve(p, "made-up-100"); !strings.Contains(rec.Body.String(), "circuit open") {
		t.Errorf("a made-up model after 100 failed ones: %d %s, want the shared breaker open", rec.Code, rec.Body)
	}
	if rec := serve(p, "gpt-real"); rec.Code != 200 {
		t.Errorf("gpt-real after 100 failed made-up models: %d %s", rec.Code, rec.Body)
	}
	if got, want := k.sorted(k.breakers), []string{"upstream:gpt-real", "upstream:other"}; !slices.Equal(got, want) {
		t.Errorf("%d breakers (%q...), want %q", len(got), got[:min(len(got), 8)], want)
	}
}

// TestLearnsFirstHundredAnsweredModels: where no route names its models,
// the first 100 names answered get a label of their own, whatever the
// clients send at once; every later one is "other".
func TestLearnsFirstHundredAnsweredModels(t *testing.T) {
	k := newKeysSeen()
	p, err := proxy.New(k.options(proxy.Options{Upstream: "http://upstream.test", Base: cannedUpstream{}}))
	if err != nil {
		t.Fatal(err)
	}
	const names, clients = 300, 4
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < names; i += clients {
				serve(p, fmt.Sprintf("any-%d", i))
			}
		})
	}
	wg.Wait()
	k.mu.Lock()
	clear(k.targets)
	k.mu.Unlock()
	for i := range names {
		serve(p, fmt.Sprintf("any-%d", i))
	}
	got := k.sorted(k.targets)
	if len(got) != 101 || !slices.Contains(got, "upstream:other") {
		t.Errorf("%d targets (%q...), want 100 names and upstream:other", len(got), got[:min(len(got), 8)])
	}
}
