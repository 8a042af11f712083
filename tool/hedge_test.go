package tool_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/testclock"
	"github.com/rebound-go/rebound/tool"
)

// slowFirst's first attempt hangs until cancelled; later ones answer after
// 50 ms.
func slowFirst(calls, cancelled *atomic.Int64) tool.Func {
	return func(ctx context.Context, c tool.Call) (string, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			cancelled.Add(1)
			return "", ctx.Err()
		}
		select {
		case <-time.After(50 * time.Millisecond):
			return "fast", nil
		case <-ctx.Done():
			cancelled.Add(1)
			return "", ctx.Err()
		}
	}
}

func TestHedgeAfterAFixedDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls, cancelled atomic.Int64
		var r tool.Registry
		r.Register("search", tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{After: 100 * time.Millisecond}}, slowFirst(&calls, &cancelled))
		start := time.Now()
		res := r.Execute(t.Context(), tool.Call{ID: "h", Name: "search"})
		if res.Output != "fast" || time.Since(start) != 150*time.Millisecond || calls.Load() != 2 || cancelled.Load() != 1 {
			t.Fatalf("%+v after %v, %d calls, %d cancelled", res, time.Since(start), calls.Load(), cancelled.Load())
		}
	})
}

func TestHedgeAtAPercentile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		var r tool.Registry
		// Calls take 10 ms, except every 20th, which hangs until cancelled.
		r.Register("read", tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{Percentile: 0.9}}, func(ctx context.Context, c tool.Call) (string, error) {
			if n.Add(1)%20 == 0 {
				<-ctx.Done()
				return "", ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
			return "ok", nil
		})
		for range 18 {
			if res := r.Execute(t.Context(), tool.Call{Name: "read"}); res.Failure != nil {
				t.Fatal(res.Failure)
			}
		}
		start := time.Now()
		res := r.Execute(t.Context(), tool.Call{Name: "read"}) // call 19 answers; call 20 would hang
		res = r.Execute(t.Context(), tool.Call{Name: "read"})
		if res.Failure != nil || time.Since(start) > 40*time.Millisecond {
			t.Fatalf("%+v after %v: the hedge at the 90th percentile (10 ms) did not rescue the hanging call", res, time.Since(start))
		}
	})
}

func TestHedgesDrawFromTheRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls, cancelled atomic.Int64
		spent := &rebound.RetryBudget{MinPerSecond: -1} // no reserve, no deposits yet: nothing to spend
		var r tool.Registry
		r.Register("search", tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{After: 100 * time.Millisecond},
			Policy: rebound.Policy{Budget: spent}}, slowFirst(&calls, &cancelled))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		res := r.Execute(ctx, tool.Call{ID: "h", Name: "search"})
		// The first call's deposit of 0.1 is not a whole retry: no hedge, and the
		// slow first attempt runs until the caller's deadline.
		if res.Failure == nil || calls.Load() != 1 {
			t.Fatalf("%+v after %d calls: a hedge was made with an empty budget", res, calls.Load())
		}
	})
}

// executeRecovering runs one call and returns what a recover in the
// caller's goroutine saw, and whether Execute returned at all.
func executeRecovering(r *tool.Registry, ctx context.Context, call tool.Call) (recovered any, returned bool) {
	func() {
		defer func() { recovered = recover() }()
		r.Execute(ctx, call)
		returned = true
	}()
	return recovered, returned
}

// TestHedgedPanicReachesTheCaller: a hedged tool's attempts run in their
// own goroutines, yet a panic in either is raised again in the caller's,
// with its own value, once no attempt is left running.
func TestHedgedPanicReachesTheCaller(t *testing.T) {
	errFirst, errHedge := errors.New("first attempt"), errors.New("hedge")
	hedge := tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{After: 100 * time.Millisecond}}
	for _, tc := range []struct {
		name string
		// fn is the tool; n is its attempt, 1 or 2.
		fn   func(ctx context.Context, n int64) (string, error)
		want any
	}{
		{"BothPanic", func(ctx context.Context, n int64) (string, error) {
			if n == 1 {
				time.Sleep(150 * time.Millisecond) // past the hedge's start
				panic(errFirst)
			}
			time.Sleep(10 * time.Millisecond)
			panic(errHedge)
		}, errHedge}, // the first panic wins
		{"FirstPanicsBeforeTheHedge", func(ctx context.Context, n int64) (string, error) {
			time.Sleep(10 * time.Millisecond)
			panic(errFirst)
		}, errFirst},
		{"FirstPanicsWhileTheHedgeRuns", func(ctx context.Context, n int64) (string, error) {
			if n == 1 {
				time.Sleep(150 * time.Millisecond)
				panic(errFirst)
			}
			<-ctx.Done() // cancelled by the panic, and waited for
			return "", ctx.Err()
		}, errFirst},
		{"LoserPanicsAfterTheWinnerAnswered", func(ctx context.Context, n int64) (string, error) {
			if n == 1 {
				<-ctx.Done()
				panic(errFirst)
			}
			return "fast", nil
		}, errFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls, running atomic.Int64
				var r tool.Registry
				r.Register("search", hedge, func(ctx context.Context, c tool.Call) (string, error) {
					running.Add(1)
					defer running.Add(-1)
					return tc.fn(ctx, calls.Add(1))
				})
				got, returned := executeRecovering(&r, t.Context(), tool.Call{ID: "p", Name: "search"})
				if returned || got != tc.want {
					t.Fatalf("recovered %v (returned %v), want %v", got, returned, tc.want)
				}
				if n := running.Load(); n != 0 {
					t.Fatalf("%d attempts still running when the panic reached the caller", n)
				}
			})
		})
	}

	t.Run("NilPanic", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var r tool.Registry
			r.Register("search", hedge, func(ctx context.Context, c tool.Call) (string, error) {
				panic(nil)
			})
			got, returned := executeRecovering(&r, t.Context(), tool.Call{Name: "search"})
			if _, ok := got.(*runtime.PanicNilError); returned || !ok {
				t.Fatalf("recovered %#v (returned %v), want a *runtime.PanicNilError", got, returned)
			}
		})
	})

	// runtime.Goexit (t.FailNow in a tool, say) ends the caller's
	// goroutine, as it would have without hedging.
	t.Run("Goexit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var r tool.Registry
			r.Register("search", hedge, func(ctx context.Context, c tool.Call) (string, error) {
				runtime.Goexit()
				return "", nil
			})
			var returned, deferred atomic.Bool
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer deferred.Store(true)
				r.Execute(t.Context(), tool.Call{Name: "search"})
				returned.Store(true)
			}()
			<-done
			if returned.Load() || !deferred.Load() {
				t.Fatalf("Execute returned %v, caller's defers ran %v: want the caller's goroutine to exit", returned.Load(), deferred.Load())
			}
		})
	})
}

// TestHedgeAtPercentileOne hedges a call slower than every recent one.
// The first call is the slowest, so that none of the others ends at the
// very instant its hedge would start (a tie in virtual time, which either
// side may win).
func TestHedgeAtPercentileOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		var r tool.Registry
		r.Register("read", tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{Percentile: 1}}, func(ctx context.Context, c tool.Call) (string, error) {
			switch n.Add(1) {
			case 1:
				time.Sleep(11 * time.Millisecond)
				return "ok", nil
			case 21:
				<-ctx.Done()
				return "", ctx.Err()
			}
			time.Sleep(10 * time.Millisecond)
			return "ok", nil
		})
		for range 20 {
			r.Execute(t.Context(), tool.Call{Name: "read"})
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		if res := r.Execute(ctx, tool.Call{Name: "read"}); res.Failure != nil || time.Since(start) != 21*time.Millisecond || n.Load() != 22 {
			t.Fatalf("%+v after %v, %d calls: want the hedge at the slowest recent latency (11 ms) to answer at 21 ms", res.Failure, time.Since(start), n.Load())
		}
	})
}

// TestHedgeBudgetKeepsTheCallsClock: a hedge withdraws from the retry
// budget at the time the call deposited by, its context's clock.
func TestHedgeBudgetKeepsTheCallsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls, cancelled atomic.Int64
		budget := &rebound.RetryBudget{MinPerSecond: -1, Ratio: 1} // the first attempt deposits one hedge
		var r tool.Registry
		r.Register("search", tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{After: 100 * time.Millisecond},
			Policy: rebound.Policy{Budget: budget}}, slowFirst(&calls, &cancelled))
		ctx := rebound.WithClock(t.Context(), testclock.New(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)))
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if res := r.Execute(ctx, tool.Call{ID: "h", Name: "search"}); res.Failure != nil || calls.Load() != 2 {
			t.Fatalf("%v after %d calls: the hedge was refused", res.Failure, calls.Load())
		}
	})
}

// TestPolicyHedgeOnIdempotentToolIsRefused: hedges are for ReadOnly
// tools only, however they are asked for. An Idempotent tool whose
// Spec.Policy carries a rebound.Hedge is refused by Validate and never
// runs twice at once (two concurrent runs of one side effect under one
// key).
func TestPolicyHedgeOnIdempotentToolIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, most atomic.Int32
		fn := func(ctx context.Context, c tool.Call) (string, error) {
			n := running.Add(1)
			defer running.Add(-1)
			if n > most.Load() {
				most.Store(n)
			}
			select {
			case <-time.After(5 * time.Second):
				return "charged", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		spec := tool.Spec{Kind: tool.Idempotent, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		if err := spec.Validate(); err == nil {
			t.Errorf("Validate accepts a Policy.Hedge on an Idempotent tool")
		}
		var r tool.Registry
		r.Register("charge", spec, fn)
		r.Execute(t.Context(), tool.Call{ID: "c1", Name: "charge", Arguments: []byte(`{"usd":5}`)})
		if most.Load() > 1 {
			t.Errorf("%d runs of the Idempotent tool at once; want 1 (hedges are for ReadOnly tools)", most.Load())
		}
	})
}
