package fallback_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// TestHedgedTarget: a target whose policy hedges records both attempts in
// the trail, the hedge marked, each with the usage it reported, and the
// ledger pays for both but counts only the answer's as useful.
func TestHedgedTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		call := func(ctx context.Context, req string) (string, error) {
			if calls.Add(1) == 1 { // slow to answer: billed its input when cancelled
				<-ctx.Done()
				cost.Report(ctx, cost.Usage{InputTokens: 2000})
				return "", ctx.Err()
			}
			time.Sleep(100 * time.Millisecond)
			cost.Report(ctx, cost.Usage{InputTokens: 2000, OutputTokens: 500})
			return "hedged answer", nil
		}
		chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{{
			Name: "m", Call: call, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}},
		}}}
		res, err := chain.Do(t.Context(), "q")
		if err != nil || res.Value != "hedged answer" {
			t.Fatalf("Do = %q, %v", res.Value, err)
		}
		if len(res.Trail) != 2 {
			t.Fatalf("trail %+v; want the first attempt and its hedge", res.Trail)
		}
		slow, hedge := res.Trail[0], res.Trail[1]
		if slow.Hedge || slow.Answered || !errors.Is(slow.Err, context.Canceled) || slow.Usage.InputTokens != 2000 {
			t.Errorf("the slow attempt's step is %+v; want cancelled, unanswered, billed 2000 input tokens", slow)
		}
		if !hedge.Hedge || !hedge.Answered || hedge.Err != nil || hedge.Usage.OutputTokens != 500 {
			t.Errorf("the hedge's step is %+v; want the answer, marked a hedge", hedge)
		}
		ledger := cost.Ledger{Prices: cost.Table{"m": {InputPerMillion: 3, OutputPerMillion: 15}}}
		ledger.Add(res.Task())
		s := ledger.Summary()
		if want := (4000*3 + 500*15) / 1e6; s.Attempts != 2 || math.Abs(s.Spent-want) > 1e-12 || math.Abs(s.Wasted-2000*3/1e6) > 1e-12 {
			t.Errorf("ledger %+v; want 2 attempts, $%v spent of which the loser's input wasted", s, want)
		}
	})
}

// TestChainHedge: a target slow to answer is hedged with the next; the
// first answer wins, a loser out of quota still cools down, and a target
// that ran as a hedge is not tried again.
func TestChainHedge(t *testing.T) {
	slowThen := func(d time.Duration, err error) func(context.Context, string) (string, error) {
		return func(ctx context.Context, _ string) (string, error) {
			select {
			case <-time.After(d):
				if err != nil {
					return "", err
				}
				return "answer", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
	}
	once := rebound.Policy{MaxAttempts: 1}
	hedge := &rebound.Hedge{After: time.Second, Percentile: -1}
	t.Run("the hedge answers", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			chain := &fallback.Chain[string, string]{Hedge: hedge, Targets: []fallback.Target[string, string]{
				{Name: "a", Call: slowThen(time.Hour, nil), Policy: once},
				{Name: "b", Call: slowThen(100*time.Millisecond, nil), Policy: once},
			}}
			start := time.Now()
			res, err := chain.Do(t.Context(), "q")
			if err != nil || res.Target != "b" || time.Since(start) != 1100*time.Millisecond {
				t.Fatalf("Do = %+v, %v after %v; want b's answer at 1.1s", res, err, time.Since(start))
			}
			if len(res.Trail) != 2 || res.Trail[0].Target != "a" || res.Trail[0].Answered || !errors.Is(res.Trail[0].Err, context.Canceled) ||
				res.Trail[1].Target != "b" || !res.Trail[1].Answered {
				t.Errorf("trail %+v; want a cancelled, b answered", res.Trail)
			}
		})
	})
	t.Run("a loser out of quota cools down", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			chain := &fallback.Chain[string, string]{Hedge: hedge, Targets: []fallback.Target[string, string]{
				{Name: "a", Call: slowThen(1500*time.Millisecond, noQuota), Policy: once},
				{Name: "b", Call: slowThen(time.Second, nil), Policy: once},
			}}
			res, err := chain.Do(t.Context(), "q")
			if err != nil || res.Target != "b" {
				t.Fatalf("Do = %+v, %v; want b's answer", res, err)
			}
			res, _ = chain.Do(t.Context(), "q")
			if res.Trail[0].Skipped != "quota exhausted" {
				t.Errorf("next call's trail %+v; want a skipped, cooling down", res.Trail)
			}
		})
	})
	t.Run("both fail", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var bCalls atomic.Int32
			b := slowThen(time.Second, &rebound.HTTPError{StatusCode: 500})
			chain := &fallback.Chain[string, string]{Hedge: hedge, Targets: []fallback.Target[string, string]{
				{Name: "a", Call: slowThen(1500*time.Millisecond, &rebound.HTTPError{StatusCode: 503}), Policy: once},
				{Name: "b", Call: func(ctx context.Context, q string) (string, error) { bCalls.Add(1); return b(ctx, q) }, Policy: once},
				{Name: "c", Call: slowThen(10*time.Millisecond, nil), Policy: once},
			}}
			start := time.Now()
			res, err := chain.Do(t.Context(), "q")
			if err != nil || res.Target != "c" || bCalls.Load() != 1 {
				t.Fatalf("Do = %+v, %v, b called %d times; want c's answer, b once", res, err, bCalls.Load())
			}
			// a fails at 1.5s, b (from 1s) at 2s; c is tried then, and
			// hedged with nothing (no target after it).
			if took := time.Since(start); took != 2010*time.Millisecond {
				t.Errorf("took %v; want 2.01s", took)
			}
		})
	})
	t.Run("side effects", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var bCalls atomic.Int32
			chain := &fallback.Chain[string, string]{Hedge: hedge, Targets: []fallback.Target[string, string]{
				{Name: "a", Call: slowThen(3*time.Second, nil), Policy: once},
				{Name: "b", Call: func(context.Context, string) (string, error) { bCalls.Add(1); return "b", nil }, Policy: once},
			}}
			res, err := chain.Do(rebound.WithSideEffects(t.Context()), "q")
			if err != nil || res.Target != "a" || bCalls.Load() != 0 {
				t.Errorf("Do = %+v, %v, b called %d times; want a's answer and no hedge", res, err, bCalls.Load())
			}
		})
	})
}

// TestHedgedTrailKeepsTheLoserVerdict: an attempt that failed while its
// hedge ran has its own verdict in the trail (permanent, here), not the
// zero Verdict, which would read as transient.
func TestHedgedTrailKeepsTheLoserVerdict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		call := func(ctx context.Context, req string) (string, error) {
			if calls.Add(1) == 1 {
				time.Sleep(1500 * time.Millisecond)
				return "", rebound.Permanent(errors.New("400 bad request"))
			}
			time.Sleep(time.Second)
			return "hedged answer", nil
		}
		chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{{
			Name: "m", Call: call, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}},
		}}}
		res, err := chain.Do(t.Context(), "q")
		if err != nil {
			t.Fatal(err)
		}
		if s := res.Trail[0]; s.Err == nil || s.Verdict.Kind != rebound.KindPermanent {
			t.Errorf("the failed racer's step: err %v, verdict %v; want its verdict, permanent", s.Err, s.Verdict.Kind)
		}
	})
}

// TestChainHedgeOfRunTargets: targets that make their own attempts race
// as others do; the values they return with their failures all go to
// Discard once a target after them answers.
func TestChainHedgeOfRunTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		failAfter := func(d time.Duration, value string) func(context.Context, string, rebound.Policy) (string, error) {
			return func(ctx context.Context, _ string, _ rebound.Policy) (string, error) {
				select {
				case <-time.After(d):
					return value, &rebound.HTTPError{StatusCode: 503}
				case <-ctx.Done():
					return value, ctx.Err()
				}
			}
		}
		var mu sync.Mutex
		var discarded []string
		once := rebound.Policy{MaxAttempts: 1}
		chain := &fallback.Chain[string, string]{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1},
			Discard: func(v string) {
				mu.Lock()
				defer mu.Unlock()
				discarded = append(discarded, v)
			},
			Targets: []fallback.Target[string, string]{
				{Name: "a", Run: failAfter(1500*time.Millisecond, "a failed"), Policy: once},
				{Name: "b", Run: failAfter(time.Second, "b failed"), Policy: once},
				{Name: "c", Run: func(context.Context, string, rebound.Policy) (string, error) { return "c answers", nil }, Policy: once},
			}}
		res, err := chain.Do(t.Context(), "q")
		if err != nil || res.Value != "c answers" {
			t.Fatalf("Do = %q, %v; want c's answer", res.Value, err)
		}
		slices.Sort(discarded)
		if strings.Join(discarded, ", ") != "a failed, b failed" {
			t.Errorf("discarded %q; want a's and b's failed values", discarded)
		}
	})
}
