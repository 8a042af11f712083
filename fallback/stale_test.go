package fallback_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// kept is a chain's last step: the answers it gave before, by request.
type kept struct {
	answers map[int]string
	asked   int
}

func (k *kept) stale(_ context.Context, r req, err error) (string, bool) {
	k.asked++
	a, ok := k.answers[r.tokens]
	return a, ok
}

func TestChainServesItsStaleAnswerOnlyWhenTheProvidersFailed(t *testing.T) {
	cases := []struct {
		name   string
		fails  []error
		ctx    func(context.Context) context.Context
		served bool
	}{
		{name: "down", fails: []error{down, down, down, down, down, down}, served: true},
		{name: "overloaded", fails: []error{overloaded, overloaded, overloaded, overloaded}, served: true},
		{name: "out of quota", fails: []error{noQuota, noQuota}, served: true},
		{name: "a bad request", fails: []error{badRequest}},
		{name: "side effects", fails: []error{down, down, down, down, down, down}, ctx: rebound.WithSideEffects},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := &model{name: "a", window: 1000, fails: tc.fails}, &model{name: "b", window: 1000, fails: tc.fails}
				k := &kept{answers: map[int]string{10: "an answer from before"}}
				chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target(), b.target()}, Stale: k.stale}
				ctx := context.Background()
				if tc.ctx != nil {
					ctx = tc.ctx(ctx)
				}
				res, err := chain.Do(ctx, req{tokens: 10})
				if !tc.served {
					var ce *fallback.ChainError
					if !errors.As(err, &ce) || res.Stale != nil || res.Value != "" || k.asked != 0 {
						t.Fatalf("got %+v, %v (Stale asked %d times), want the chain's error", res, err, k.asked)
					}
					return
				}
				var ce *fallback.ChainError
				if err != nil || res.Value != "an answer from before" || res.Target != "" || !errors.As(res.Stale, &ce) || k.asked != 1 {
					t.Fatalf("got %+v, %v (Stale asked %d times), want the kept answer, marked stale", res, err, k.asked)
				}
				if len(ce.Trail) == 0 || len(res.Trail) != len(ce.Trail) {
					t.Errorf("the trail of a stale answer: %+v, the error's %+v", res.Trail, ce.Trail)
				}
				if task := res.Task(); task.Succeeded || len(task.Attempts) == 0 {
					t.Errorf("a stale answer's task: %+v, want failed attempts", task)
				}
			})
		})
	}
}

func TestChainWithNothingKeptGivesItsError(t *testing.T) {
	a := &model{name: "a", window: 1000, fails: []error{down, down, down}}
	k := &kept{}
	chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{a.target()}, Stale: k.stale}
	synctest.Test(t, func(t *testing.T) {
		res, err := chain.Do(context.Background(), req{tokens: 10})
		if err == nil || res.Stale != nil || k.asked != 1 {
			t.Fatalf("got %+v, %v (asked %d), want the chain's error once Stale has nothing", res, err, k.asked)
		}
	})
}

func TestChainServesStaleWhenEveryBreakerIsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		open := breaker.New("a", breaker.Config{ConsecutiveFailures: 1})
		if p, err := open.Allow(); err == nil {
			open.Done(p, rebound.OutcomeFailure)
		}
		a := &model{name: "a", window: 1000}
		ta := a.target()
		ta.Policy.Breaker = open
		k := &kept{answers: map[int]string{10: "an answer from before"}}
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{ta}, Stale: k.stale}
		res, err := chain.Do(context.Background(), req{tokens: 10})
		if err != nil || res.Value != "an answer from before" || res.Stale == nil || a.calls != 0 {
			t.Fatalf("got %+v, %v, %d calls; want the kept answer, no call", res, err, a.calls)
		}
	})
}

func TestChainNeverServesStalePastASpendCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := &model{name: "a", window: 1000}
		ta := a.target()
		ta.Estimate = func(r req) cost.Usage { return cost.Usage{InputTokens: int64(r.tokens)} }
		k := &kept{answers: map[int]string{10: "an answer from before"}}
		chain := &fallback.Chain[req, string]{Targets: []fallback.Target[req, string]{ta}, Stale: k.stale}
		ctx := cost.WithCaps(context.Background(), cost.Table{"a": {InputPerMillion: 1_000_000}}, &cost.Limit{USD: 0.000001})
		res, err := chain.Do(ctx, req{tokens: 10})
		if err == nil || res.Stale != nil || k.asked != 0 {
			t.Fatalf("got %+v, %v (asked %d); a spend cap's refusal is passed on", res, err, k.asked)
		}
	})
}
