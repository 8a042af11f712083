package fallback_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/ratelimit"
)

// provider answers every request with status and body, counting them.
type provider struct {
	status int
	body   string
	header http.Header
	hits   atomic.Int32
}

func (p *provider) RoundTrip(r *http.Request) (*http.Response, error) {
	p.hits.Add(1)
	h := http.Header{"Content-Type": {"application/json"}}
	for k, v := range p.header {
		h[k] = v
	}
	return &http.Response{StatusCode: p.status, Header: h, Body: io.NopCloser(strings.NewReader(p.body)), Request: r}, nil
}

// upstream is a target whose requests go through a rebound.Transport over
// base, which makes the target's attempts under the policy the chain hands
// it.
func upstream(name string, base http.RoundTripper, p rebound.Policy) fallback.Target[*http.Request, *http.Response] {
	return fallback.Target[*http.Request, *http.Response]{Name: name, Policy: p,
		Run: func(ctx context.Context, req *http.Request, p rebound.Policy) (*http.Response, error) {
			return (&rebound.Transport{Base: base, Policy: p}).RoundTrip(req.WithContext(ctx))
		}}
}

func newRequest(t *testing.T) *http.Request {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://provider.test/v1/messages", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// httpTrail is trail for a chain of HTTP targets.
func httpTrail(r fallback.Result[*http.Response]) string {
	return trail(fallback.Result[string]{Trail: r.Trail})
}

var noDelay = rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}

// TestRunTargetsMakeTheirOwnAttempts: a target with a Run makes its
// attempts itself, under the policy the chain hands it: an overloaded
// upstream is left after one attempt, though its policy allows three, and
// the Transport's give-up on a response it hands back whole is a failure
// the chain moves on from. The trail holds the attempts the events told
// of.
func TestRunTargetsMakeTheirOwnAttempts(t *testing.T) {
	a := &provider{status: 529, body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}
	b := &provider{status: 200, body: `{"ok":true}`}
	chain := &fallback.Chain[*http.Request, *http.Response]{Targets: []fallback.Target[*http.Request, *http.Response]{
		upstream("a", a, noDelay), upstream("b", b, noDelay)}}
	res, err := chain.Do(t.Context(), newRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Value.Body.Close()
	if got, want := httpTrail(res), "a#1 overloaded | b#1 ok"; got != want || res.Target != "b" || res.Value.StatusCode != 200 {
		t.Errorf("trail %q, answered by %q with %d; want %q, b, 200", got, res.Target, res.Value.StatusCode, want)
	}
	if a.hits.Load() != 1 {
		t.Errorf("the overloaded upstream got %d requests, want 1", a.hits.Load())
	}
}

// closed notes the responses whose bodies were closed.
type closed struct {
	mu     sync.Mutex
	bodies []string
}

func (c *closed) discard(resp *http.Response) {
	if resp == nil {
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.mu.Lock()
	c.bodies = append(c.bodies, string(b))
	c.mu.Unlock()
}

// TestFailedResponseHandedBack: without an answer, the Result carries the
// last target's own failed response, whole, for the caller to hand on as
// it came; the responses before it go to Discard.
func TestFailedResponseHandedBack(t *testing.T) {
	a := &provider{status: 503, body: `{"error":"a is down"}`}
	b := &provider{status: 400, body: `{"error":{"type":"invalid_request_error","message":"bad tool schema"}}`}
	var c closed
	chain := &fallback.Chain[*http.Request, *http.Response]{Discard: c.discard, Targets: []fallback.Target[*http.Request, *http.Response]{
		upstream("a", a, noDelay), upstream("b", b, noDelay)}}
	res, err := chain.Do(t.Context(), newRequest(t))
	var ce *fallback.ChainError
	if !errors.As(err, &ce) || res.Value == nil {
		t.Fatalf("Do = %v, %v; want b's response and a *ChainError", res.Value, err)
	}
	body, _ := io.ReadAll(res.Value.Body)
	res.Value.Body.Close()
	if res.Value.StatusCode != 400 || !strings.Contains(string(body), "bad tool schema") {
		t.Errorf("handed back %d %s; want b's 400 as it came", res.Value.StatusCode, body)
	}
	if len(c.bodies) != 1 || c.bodies[0] != a.body {
		t.Errorf("discarded %q; want a's response", c.bodies)
	}
	if got, want := httpTrail(res), "a#1 transient | a#2 transient | a#3 transient | b#1 permanent"; got != want {
		t.Errorf("trail %q, want %q", got, want)
	}
}

// TestKeyedCooldowns: a target's cool-down is kept under the key of the
// call (Target.Key), which is also its events' target: one model out of
// quota leaves the target's other models be.
func TestKeyedCooldowns(t *testing.T) {
	type ask struct{ model string }
	var mu sync.Mutex
	var targets []string
	calls := map[string]int{}
	target := func(name string, quotaOut string) fallback.Target[ask, string] {
		return fallback.Target[ask, string]{Name: name, Policy: rebound.Policy{
			Observer: rebound.ObserverFunc(func(e rebound.Event) {
				mu.Lock()
				defer mu.Unlock()
				targets = append(targets, e.Target)
			}),
		},
			Key: func(r ask) string { return name + ":" + r.model },
			Call: func(_ context.Context, r ask) (string, error) {
				calls[name+":"+r.model]++
				if r.model == quotaOut {
					return "", noQuota
				}
				return name + " answers " + r.model, nil
			}}
	}
	chain := &fallback.Chain[ask, string]{Targets: []fallback.Target[ask, string]{target("a", "x"), target("b", "")}}
	for _, m := range []string{"x", "x", "y"} {
		if _, err := chain.Do(t.Context(), ask{m}); err != nil {
			t.Fatal(err)
		}
	}
	if calls["a:x"] != 1 || calls["a:y"] != 1 || calls["b:x"] != 2 {
		t.Errorf("calls %v; want a:x once (then cooling down), a:y once, b:x twice", calls)
	}
	if want := "a:x a:x b:x b:x a:y"; strings.Join(targets, " ") != want {
		t.Errorf("events' targets %q, want %q", targets, want)
	}
}

// TestStoppedForSideEffectsStaysWithItsTarget: a request the Transport
// judges to have side effects stops after an attempt that may have
// reached the provider (a 500): another target would carry it out a
// second time. One refused with a 503, which says it was not taken on,
// moves on.
func TestStoppedForSideEffectsStaysWithItsTarget(t *testing.T) {
	for _, c := range []struct {
		status int
		want   int32 // requests to b
	}{{500, 0}, {503, 1}} {
		a := &provider{status: c.status, body: `{}`}
		b := &provider{status: 200, body: `{"id":"file-1"}`}
		target := func(name string, base http.RoundTripper) fallback.Target[*http.Request, *http.Response] {
			return fallback.Target[*http.Request, *http.Response]{Name: name, Policy: noDelay,
				Run: func(ctx context.Context, req *http.Request, p rebound.Policy) (*http.Response, error) {
					tr := &rebound.Transport{Base: base, Policy: p, SideEffects: func(*http.Request) bool { return true }}
					return tr.RoundTrip(req.WithContext(ctx))
				}}
		}
		chain := &fallback.Chain[*http.Request, *http.Response]{Targets: []fallback.Target[*http.Request, *http.Response]{
			target("a", a), target("b", b)}}
		res, _ := chain.Do(t.Context(), newRequest(t))
		if res.Value != nil {
			res.Value.Body.Close()
		}
		if b.hits.Load() != c.want {
			t.Errorf("a %d: b got %d requests, want %d (trail %q)", c.status, b.hits.Load(), c.want, httpTrail(res))
		}
	}
}

// TestNoSlotMovesOn: a target whose own limit on requests in flight had
// no slot in time never sent the request: the next target gets it,
// though the error is marked permanent (a retry would only queue again).
func TestNoSlotMovesOn(t *testing.T) {
	a := &model{name: "a", window: 1000, fails: []error{rebound.Permanent(ratelimit.ErrNoSlot)}}
	b := &model{name: "b", window: 1000}
	chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}}
	res, err := chain.Do(t.Context(), req{tokens: 10})
	if err != nil || res.Target != "b" {
		t.Fatalf("Do = %q, %v (trail %q); want b's answer", res.Value, err, trail(res))
	}

	// Nothing was sent, so a call with side effects moves on too.
	a.calls = 0
	res, err = chain.Do(rebound.WithSideEffects(t.Context()), req{tokens: 10})
	if err != nil || res.Target != "b" {
		t.Fatalf("with side effects: Do = %q, %v (trail %q); want b's answer", res.Value, err, trail(res))
	}

	// The caller's own deadline, passed while the call waited for a
	// slot, ends the chain.
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		wait := fallback.Target[req, string]{Name: "a", Call: func(ctx context.Context, _ req) (string, error) {
			<-ctx.Done()
			return "", errors.Join(ratelimit.ErrNoSlot, ctx.Err())
		}}
		b := &model{name: "b", window: 1000}
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{wait, b.target()}}
		if _, err := chain.Do(ctx, req{tokens: 10}); err == nil || b.calls != 0 {
			t.Errorf("after the caller's deadline: err %v, b called %d times; want an error, b not called", err, b.calls)
		}
	})
}

// TestLastResort: with LastResort, the last target is tried while it cools
// down, is not made to cool down by its exhausted quota, and is retried
// when overloaded: there is nowhere left to move on to, and its own answer
// says more than ErrNoTarget.
func TestLastResort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cooling := new(fallback.MemoryCooldowns)
		cooling.Start(t.Context(), "b", time.Now(), time.Hour)
		a := &model{name: "a", window: 1000, fails: []error{noQuota}}
		b := &model{name: "b", window: 1000, fails: []error{noQuota, overloaded}}
		chain := &fallback.Chain[req, string]{LastResort: true, Cooldowns: cooling,
			Targets: []fallback.Target[req, string]{a.target(), b.target()}}
		res, err := chain.Do(t.Context(), req{tokens: 10})
		if got, want := trail(res), "a#1 quota_exhausted | b#1 quota_exhausted"; err == nil || got != want {
			t.Fatalf("first call: %v, trail %q; want no answer, trail %q", err, got, want)
		}
		res, err = chain.Do(t.Context(), req{tokens: 10})
		if got, want := trail(res), "a skipped: quota exhausted | b#1 overloaded | b#2 ok"; err != nil || got != want {
			t.Errorf("second call: %v, trail %q; want b's answer, trail %q", err, got, want)
		}
	})
}

// TestRunWithoutEvents: a Run that tells its Observer nothing still has
// its call in the trail, and its failure judged.
func TestRunWithoutEvents(t *testing.T) {
	calls := 0
	quiet := func(answer string, err error) fallback.Target[req, string] {
		return fallback.Target[req, string]{Name: answer, Run: func(context.Context, req, rebound.Policy) (string, error) {
			calls++
			return answer, err
		}}
	}
	chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{quiet("a", down), quiet("b", nil)}}
	res, err := chain.Do(t.Context(), req{})
	if got, want := trail(res), "a#1 transient | b#1 ok"; err != nil || got != want || res.Value != "b" || calls != 2 {
		t.Errorf("Do = %q, %v, trail %q; want b, trail %q", res.Value, err, got, want)
	}
}
