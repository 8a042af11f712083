package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// req is a prompt of some size in tokens.
type req struct{ tokens int }

var (
	overloaded = &rebound.HTTPError{StatusCode: 529, Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}
	noQuota    = &rebound.HTTPError{StatusCode: 429, Body: []byte(`{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)}
	badRequest = &rebound.HTTPError{StatusCode: 400, Body: []byte(`{"error":{"type":"invalid_request_error","message":"bad tool schema"}}`)}
	down       = &rebound.HTTPError{StatusCode: 503}
)

func overflow(window int) error {
	return &rebound.HTTPError{StatusCode: 400, Body: []byte(fmt.Sprintf(
		`{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is %d tokens."}}`, window))}
}

// model answers requests that fit its window, failing first with the
// given errors in turn; it reports its usage like a provider.
type model struct {
	name   string
	window int
	fails  []error
	calls  int
}

func (m *model) target() fallback.Target[req, string] {
	return fallback.Target[req, string]{
		Name: m.name, ContextWindow: m.window,
		Policy: rebound.Policy{BaseDelay: time.Second, Jitter: rebound.JitterNone},
		Call: func(ctx context.Context, r req) (string, error) {
			m.calls++
			cost.Report(ctx, cost.Usage{InputTokens: int64(r.tokens)})
			if m.calls <= len(m.fails) {
				return "", m.fails[m.calls-1]
			}
			if r.tokens > m.window {
				return "", overflow(m.window)
			}
			cost.Report(ctx, cost.Usage{OutputTokens: 100})
			return m.name + " answers", nil
		},
	}
}

func trail(r fallback.Result[string]) string {
	var parts []string
	for _, s := range r.Trail {
		if s.Skipped != "" {
			parts = append(parts, s.Target+" skipped: "+s.Skipped)
			continue
		}
		what := "ok"
		if s.Err != nil {
			what = s.Verdict.Kind.String()
		}
		parts = append(parts, fmt.Sprintf("%s#%d %s", s.Target, s.Attempt, what))
	}
	return strings.Join(parts, " | ")
}

// The chain of the issue: 529 on the first target, insufficient_quota on
// the second, a context overflow on the third that compaction fixes.
func TestOverloadQuotaOverflowCompaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "claude-x", window: 200000, fails: []error{overloaded}}
		b := &model{name: "gpt-x", window: 128000, fails: []error{noQuota}}
		c := &model{name: "gpt-mini", window: 16000}
		compactions := 0
		chain := &fallback.Chain[req, string]{
			Targets: []fallback.Target[req, string]{a.target(), b.target(), c.target()},
			Compact: func(_ context.Context, r req, err error) (req, error) {
				compactions++
				return req{tokens: r.tokens / 2}, nil
			},
		}
		start := time.Now()
		res, err := chain.Do(t.Context(), req{tokens: 20000})
		if err != nil {
			t.Fatal(err)
		}
		want := "claude-x#1 overloaded | gpt-x#1 quota_exhausted | gpt-mini#1 context_overflow | gpt-mini#1 ok"
		if got := trail(res); got != want || res.Target != "gpt-mini" || res.Value != "gpt-mini answers" || compactions != 1 {
			t.Fatalf("trail %q (target %q, %d compactions)\nwant %q", got, res.Target, compactions, want)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("waited %v: an overload, a quota error and an overflow should move on at once", waited)
		}

		// gpt-x's quota is out: it is skipped, without a request, for the cooldown.
		a.fails, b.fails = []error{overloaded, overloaded}, nil
		res, _ = chain.Do(t.Context(), req{tokens: 1000})
		if got := trail(res); !strings.Contains(got, "gpt-x skipped: quota exhausted") || b.calls != 1 {
			t.Fatalf("during the cooldown: %q, gpt-x called %d times", got, b.calls)
		}
		time.Sleep(fallback.DefaultQuotaCooldown)
		a.fails = []error{overloaded, overloaded, overloaded}
		res, _ = chain.Do(t.Context(), req{tokens: 1000})
		if res.Target != "gpt-x" {
			t.Fatalf("after the cooldown: %q", trail(res))
		}
	})
}

// Chains that share their Cooldowns (as replicas share them on Redis)
// skip a target one of them found out of quota, for the cool-down and no
// longer.
func TestSharedCooldowns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := new(fallback.MemoryCooldowns)
		chain := func(a *model) *fallback.Chain[req, string] {
			b := &model{name: "b", window: 1000}
			return &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()},
				Cooldowns: shared, QuotaCooldown: time.Minute}
		}
		a1 := &model{name: "a", window: 1000, fails: []error{noQuota}}
		a2 := &model{name: "a", window: 1000}
		one, two := chain(a1), chain(a2)
		if res, err := one.Do(t.Context(), req{tokens: 10}); err != nil || res.Target != "b" {
			t.Fatalf("%q: %v", trail(res), err)
		}
		res, err := two.Do(t.Context(), req{tokens: 10})
		if err != nil || trail(res) != "a skipped: quota exhausted | b#1 ok" || a2.calls != 0 {
			t.Fatalf("the other chain: %q, %v, a called %d times", trail(res), err, a2.calls)
		}
		time.Sleep(time.Minute)
		if res, err := two.Do(t.Context(), req{tokens: 10}); err != nil || res.Target != "a" {
			t.Fatalf("after the cool-down: %q, %v", trail(res), err)
		}
	})
}

func TestPermanentStopsTheChain(t *testing.T) {
	a := &model{name: "a", window: 1000, fails: []error{badRequest}}
	b := &model{name: "b", window: 1000}
	chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}}
	res, err := chain.Do(context.Background(), req{tokens: 10})
	var ce *fallback.ChainError
	var herr *rebound.HTTPError
	if !errors.As(err, &ce) || !errors.As(err, &herr) || herr.StatusCode != 400 || b.calls != 0 || a.calls != 1 {
		t.Fatalf("err %v; a %d calls, b %d; trail %q", err, a.calls, b.calls, trail(res))
	}
}

func TestSpentRetriesMoveOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "a", window: 1000, fails: []error{down, down, down}}
		b := &model{name: "b", window: 1000}
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}}
		res, err := chain.Do(t.Context(), req{tokens: 10})
		want := "a#1 transient | a#2 transient | a#3 transient | b#1 ok"
		if err != nil || trail(res) != want {
			t.Fatalf("%v: %q, want %q", err, trail(res), want)
		}
	})
}

func TestRetryOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "a", window: 1000, fails: []error{overloaded}}
		b := &model{name: "b", window: 1000}
		ta := a.target()
		ta.RetryOverloaded = true
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{ta, b.target()}}
		res, err := chain.Do(t.Context(), req{tokens: 10})
		if err != nil || res.Target != "a" || b.calls != 0 {
			t.Fatalf("%v: %q", err, trail(res))
		}
	})
}

func TestOverflowMovesToALargerWindow(t *testing.T) {
	big := &model{name: "big", window: 200000}
	small := &model{name: "small", window: 8000}
	mid := &model{name: "mid", window: 32000}
	chain := &fallback.Chain[req, string]{
		Targets: []fallback.Target[req, string]{mid.target(), small.target(), big.target()},
		Compact: func(_ context.Context, r req, _ error) (req, error) { return req{tokens: r.tokens - 10000}, nil },
	}
	res, err := chain.Do(context.Background(), req{tokens: 100000})
	want := "mid#1 context_overflow | mid#1 context_overflow | small skipped: context window too small | big#1 ok"
	if err != nil || trail(res) != want {
		t.Fatalf("%v: %q\nwant %q", err, trail(res), want)
	}
}

func TestOpenBreakerSkipsWithoutARequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "a", window: 1000, fails: []error{down, down, down}}
		b := &model{name: "b", window: 1000}
		ta := a.target()
		ta.Policy.Breaker = breaker.New("a", breaker.Config{ConsecutiveFailures: 2})
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{ta, b.target()}}
		res, _ := chain.Do(t.Context(), req{tokens: 10})
		if got := trail(res); got != "a#1 transient | a#2 transient | b#1 ok" {
			t.Fatalf("first call: %q", got)
		}
		res, _ = chain.Do(t.Context(), req{tokens: 10})
		if got := trail(res); got != "a skipped: breaker open | b#1 ok" || a.calls != 2 {
			t.Fatalf("second call: %q, a called %d times", got, a.calls)
		}
	})
}

func TestSideEffectsDoNotFallBack(t *testing.T) {
	a := &model{name: "a", window: 1000, fails: []error{down}}
	b := &model{name: "b", window: 1000}
	chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}}
	_, err := chain.Do(rebound.WithSideEffects(context.Background()), req{tokens: 10})
	if err == nil || a.calls != 1 || b.calls != 0 {
		t.Fatalf("err %v; a %d calls, b %d", err, a.calls, b.calls)
	}
}

func TestNoTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "a", window: 1000}
		ta := a.target()
		ta.Policy.Breaker = breaker.New("a", breaker.Config{ConsecutiveFailures: 1})
		p, _ := ta.Policy.Breaker.Allow()
		ta.Policy.Breaker.Done(p, rebound.OutcomeFailure)
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{ta}}
		_, err := chain.Do(t.Context(), req{tokens: 10})
		if !errors.Is(err, breaker.ErrOpen) || a.calls != 0 {
			t.Fatalf("err %v, %d calls", err, a.calls)
		}
	})
}

func TestCostOfATask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "big", window: 1000, fails: []error{down, overloaded}}
		b := &model{name: "cheap", window: 1000}
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}}
		res, err := chain.Do(t.Context(), req{tokens: 500})
		if err != nil {
			t.Fatal(err)
		}
		ledger := cost.Ledger{Prices: cost.Table{"big": {InputPerMillion: 2.5, OutputPerMillion: 10}, "cheap": {InputPerMillion: 0.15, OutputPerMillion: 0.6}}}
		ledger.Add(res.Task())
		s := ledger.Summary()
		// Two failed attempts on big, billed their input: 2 × 500 × $2.5/M.
		wantWasted := 2 * 500 * 2.5 / 1e6
		wantSpent := wantWasted + (500*0.15+100*0.6)/1e6
		if s.Attempts != 3 || s.Succeeded != 1 || !near(s.Wasted, wantWasted) || !near(s.Spent, wantSpent) || !near(s.CostPerSuccess(), wantSpent) {
			t.Fatalf("%+v; want spent %v wasted %v", s, wantSpent, wantWasted)
		}
	})
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// The recommended setup over two models: rebound's policy and a breaker on
// each, falling back from the first to the second.
func ExampleRecommended() {
	call := func(name string, err error) func(context.Context, string) (string, error) {
		return func(context.Context, string) (string, error) {
			if err != nil {
				return "", err
			}
			return name + ": hello", nil
		}
	}
	chain := fallback.Recommended(breaker.Config{},
		fallback.Target[string, string]{Name: "claude-x", Call: call("claude-x", overloaded)},
		fallback.Target[string, string]{Name: "gpt-mini", Call: call("gpt-mini", nil)},
	)
	res, err := chain.Do(context.Background(), "Hello?")
	fmt.Println(res.Value, err)
	for _, s := range res.Trail {
		if s.Err != nil {
			fmt.Println(s.Target, "attempt", s.Attempt, s.Verdict.Kind)
		} else {
			fmt.Println(s.Target, "attempt", s.Attempt, "answered")
		}
	}
	// Output:
	// gpt-mini: hello <nil>
	// claude-x attempt 1 overloaded
	// gpt-mini attempt 1 answered
}
