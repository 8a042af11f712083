package breaker_test

import (
	"context"
	"iter"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

// chaosPanic is what the adversarial attempts panic with, so that any
// other panic (one of rebound's own) is told apart.
type chaosPanic struct{ n int }

// TestAdversarial runs many goroutines through one breaker and one retry
// budget with Do, Run and Stream, their attempts succeeding, failing,
// panicking, timing out, hanging until cancelled or cancelled outright at
// random (seeded), and then checks that nothing was lost: once the target
// is healthy the breaker closes after one cooldown, and once the budget's
// TTL has passed its whole reserve is back.
func TestAdversarial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cooldown = 200 * time.Millisecond
		var changes atomic.Int64
		b := breaker.New("chaos", breaker.Config{ConsecutiveFailures: 3, MinCalls: 10, Cooldown: cooldown, Probes: 2, Successes: 2,
			OnStateChange: func(breaker.Change) { changes.Add(1) }})
		budget := &rebound.RetryBudget{}
		p := rebound.Policy{MaxAttempts: 4, BaseDelay: 10 * time.Millisecond, AttemptTimeout: 300 * time.Millisecond,
			Breaker: b, Budget: budget}
		var ours, foreign atomic.Int64
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(10, uint64(g)))
				for i := range 100 {
					time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond) // spread over several cooldowns
					func() {
						defer func() {
							switch v := recover().(type) {
							case nil:
							case *chaosPanic:
								ours.Add(1)
							default:
								foreign.Add(1)
								t.Errorf("a panic not ours: %v", v)
							}
						}()
						adversarialCall(t.Context(), r, p, g*1000+i)
					}()
				}
			})
		}
		wg.Wait()
		if ours.Load() == 0 || foreign.Load() != 0 {
			t.Fatalf("%d of our panics came through, %d others", ours.Load(), foreign.Load())
		}
		t.Logf("%d panics, %d changes of state", ours.Load(), changes.Load())

		// The target is healthy from now on.
		time.Sleep(cooldown)
		for i := range 10 {
			if err := rebound.Run(t.Context(), p, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("healthy call %d after the cooldown: %v (state %v): a probe slot was lost", i, err, b.State())
			}
		}
		if b.State() != breaker.Closed {
			t.Fatalf("state %v after 10 healthy calls", b.State())
		}
		time.Sleep(10 * time.Second) // a zero RetryBudget's TTL
		if got := budget.Available(time.Now()); got != 100 {
			t.Fatalf("%v retries available once the TTL has passed, want the whole reserve of 100", got)
		}
	})
}

// adversarialCall makes one call through p, of a kind drawn from r.
func adversarialCall(ctx context.Context, r *rand.Rand, p rebound.Policy, n int) {
	var cancel context.CancelFunc
	switch r.IntN(6) {
	case 0:
		ctx, cancel = context.WithCancel(ctx)
		cancel() // cancelled before it starts
	case 1:
		ctx, cancel = context.WithCancel(ctx)
		time.AfterFunc(time.Duration(r.IntN(400))*time.Millisecond, cancel)
	case 2:
		ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(400))*time.Millisecond)
	default:
		cancel = func() {}
	}
	defer cancel()
	if r.IntN(10) == 0 {
		ctx = rebound.WithSideEffects(ctx)
	}
	// Each attempt's behaviour is drawn when it runs: the draws are made
	// by this goroutine alone.
	attempt := func(ctx context.Context) error {
		switch r.IntN(8) {
		case 0, 1, 2:
			return nil
		case 3:
			return &rebound.HTTPError{StatusCode: 503}
		case 4:
			return &rebound.HTTPError{StatusCode: 400}
		case 5:
			panic(&chaosPanic{n})
		default: // slow: past the attempt timeout, or until cancelled
			select {
			case <-time.After(time.Duration(r.IntN(600)) * time.Millisecond):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	switch r.IntN(3) {
	case 0:
		_, _ = rebound.Do(ctx, p, func(ctx context.Context) (int, error) { return n, attempt(ctx) })
	case 1:
		_ = rebound.Run(ctx, p, attempt)
	default:
		open := func(ctx context.Context) iter.Seq2[int, error] {
			return func(yield func(int, error) bool) {
				for i := range r.IntN(4) {
					if !yield(i, nil) {
						return
					}
				}
				if err := attempt(ctx); err != nil {
					yield(0, err)
				}
			}
		}
		stopAt, panicAt := r.IntN(5), r.IntN(10)
		seen := 0
		for _, err := range rebound.Stream(ctx, p, open, nil) {
			if err != nil {
				continue // a give-up, or the stream broken after its first event
			}
			if seen++; seen == panicAt {
				panic(&chaosPanic{n}) // in the caller's own loop body
			}
			if seen == stopAt {
				break
			}
		}
	}
}
