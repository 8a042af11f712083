package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/testclock"
	"github.com/rebound-go/rebound/tool"
)

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

// keyServer is an idempotent server: it performs an action once per key
// and answers a repeated key from its record.
type keyServer struct {
	mu      sync.Mutex // guards actions and seen
	actions int
	seen    map[string]bool
}

func (s *keyServer) charge(ctx context.Context, c tool.Call) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := tool.IdempotencyKey(ctx)
	if !s.seen[key] {
		s.seen[key] = true
		s.actions++
	}
	return "charged", nil
}

// TestIdempotentCallsWithoutIDAreNeverMerged: an agent that means to
// charge $5 twice, and whose calls carry no ID, is charged twice; the
// retries of one call keep one key.
func TestIdempotentCallsWithoutIDAreNeverMerged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &keyServer{seen: map[string]bool{}}
		var r tool.Registry
		r.Register("charge", tool.Spec{Kind: tool.Idempotent}, srv.charge)
		call := tool.Call{Name: "charge", Arguments: json.RawMessage(`{"amount":5}`)}
		for range 2 {
			if res := r.Execute(t.Context(), call); res.Failure != nil {
				t.Fatal(res.Failure)
			}
		}
		if srv.actions != 2 {
			t.Fatalf("two intended charges without an ID performed %d actions", srv.actions)
		}
		if tool.IdempotencyKeyOf(call) == tool.IdempotencyKeyOf(call) {
			t.Fatal("IdempotencyKeyOf gave two calls without an ID one key")
		}

		// The retries of one call without an ID share its key; a new call
		// gets a new one.
		var calls atomic.Int64
		var keys []string
		r.Register("charge", tool.Spec{Kind: tool.Idempotent}, flaky(&calls, &keys, errTimeout, errBusy))
		r.Execute(t.Context(), call)
		r.Execute(t.Context(), call)
		if len(keys) != 4 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] || keys[3] == keys[0] {
			t.Fatalf("keys %q: want three attempts of one call under one key, then a new call under another", keys)
		}

		// With an ID, the key is the call's, whatever the process: a
		// replica or a restart that replays the call is recognised.
		keys, calls = nil, atomic.Int64{}
		withID := tool.Call{ID: "toolu_7", Name: "charge", Arguments: call.Arguments}
		r.Execute(t.Context(), withID)
		r.Execute(t.Context(), withID)
		want := tool.IdempotencyKeyOf(withID)
		for _, k := range keys {
			if k != want {
				t.Fatalf("keys %q, want all %q", keys, want)
			}
		}
		if want != "rebound-c25af35ad15ce75beae32fbc8728c331" {
			t.Fatalf("the key of a call with an ID changed: %s", want)
		}
	})
}

// TestMisregisteredToolsRunNothing: a registration a careless caller got
// wrong fails every call with a SpecError that says what is wrong, before
// anything is run, and never panics.
func TestMisregisteredToolsRunNothing(t *testing.T) {
	var calls atomic.Int64
	count := func(context.Context, tool.Call) (string, error) {
		calls.Add(1)
		return "", errBusy
	}
	for _, tc := range []struct {
		name  string
		spec  tool.Spec
		fn    tool.Func
		field string
	}{
		{"NilFunc", tool.Spec{}, nil, "Func"},
		{"UnknownKind", tool.Spec{Kind: 7}, count, "Kind"},
		{"InvalidPolicy", tool.Spec{Kind: tool.SideEffect, Policy: rebound.Policy{MaxAttempts: -1}}, count, "Policy.max_attempts"},
		{"PercentileNaN", tool.Spec{Hedge: tool.Hedge{Percentile: math.NaN()}}, count, "Hedge.Percentile"},
		{"PercentileAsAPercentage", tool.Spec{Hedge: tool.Hedge{Percentile: 95}}, count, "Hedge.Percentile"},
		{"NegativePercentile", tool.Spec{Hedge: tool.Hedge{Percentile: -0.5}}, count, "Hedge.Percentile"},
		{"NegativeAfter", tool.Spec{Hedge: tool.Hedge{After: -time.Second}}, count, "Hedge.After"},
		{"HedgedSideEffect", tool.Spec{Kind: tool.SideEffect, Hedge: tool.Hedge{After: time.Second}}, count, "Hedge"},
		{"HedgedIdempotent", tool.Spec{Kind: tool.Idempotent, Hedge: tool.Hedge{Percentile: 0.9}}, count, "Hedge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			var r tool.Registry
			r.Register("t", tc.spec, tc.fn)
			res := r.Execute(context.Background(), tool.Call{ID: "c", Name: "t"})
			var se *tool.SpecError
			if !errors.As(res.Err, &se) || se.Tool != "t" || se.Field != tc.field {
				t.Fatalf("error %v, want a SpecError for field %s", res.Err, tc.field)
			}
			f := res.Failure
			if calls.Load() != 0 || f == nil || f.Attempts != 0 || f.Verdict != "permanent" || f.MayHaveTakenEffect || f.Error != se.Error() {
				t.Fatalf("%d calls, failure %v", calls.Load(), f)
			}
			if tc.fn != nil {
				if err := tc.spec.Validate(); !errors.As(err, &se) || se.Field != tc.field {
					t.Fatalf("Validate: %v", err)
				}
			}
			t.Log(res.Err)
		})
	}
	if err := (tool.Spec{Kind: tool.ReadOnly, Hedge: tool.Hedge{Percentile: 1, After: time.Second}}).Validate(); err != nil {
		t.Fatalf("a valid spec: %v", err)
	}
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

// TestCancelledContextRunsNothing: a call whose context is already done is
// not started, and so cannot have taken effect.
func TestCancelledContextRunsNothing(t *testing.T) {
	var calls atomic.Int64
	var r tool.Registry
	r.Register("send", tool.Spec{Kind: tool.SideEffect}, func(ctx context.Context, c tool.Call) (string, error) {
		calls.Add(1)
		return "sent", nil // a tool that does not heed its context
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := r.Execute(ctx, tool.Call{ID: "c", Name: "send"})
	f := res.Failure
	if calls.Load() != 0 || !errors.Is(res.Err, context.Canceled) || f == nil || f.Verdict != "canceled" || f.Attempts != 0 || f.MayHaveTakenEffect {
		t.Fatalf("%d calls, error %v, failure %v", calls.Load(), res.Err, f)
	}
}

// TestIdempotentUnknownOutcomeMayHaveTakenEffect: an idempotent call whose
// every attempt ended without an answer may have been performed; the
// model's next call carries a new ID, and so a new key, so it is told to
// check first.
func TestIdempotentUnknownOutcomeMayHaveTakenEffect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		var r tool.Registry
		r.Register("charge", tool.Spec{Kind: tool.Idempotent}, flaky(&calls, nil, errTimeout, errTimeout, errTimeout))
		f := r.Execute(t.Context(), tool.Call{ID: "c", Name: "charge"}).Failure
		if f == nil || !f.MayHaveTakenEffect || !strings.Contains(f.Advice, "Check whether it did") {
			t.Fatalf("failure %v", f)
		}
	})
}

// TestFailureTextIsBounded: error text a model is shown is cut short on a
// character boundary, however long the error or the tool name it was
// given.
func TestFailureTextIsBounded(t *testing.T) {
	var r tool.Registry
	long := strings.Repeat("a", 299) + strings.Repeat("é", 1000)
	r.Register("t", tool.Spec{Kind: tool.SideEffect}, func(context.Context, tool.Call) (string, error) {
		return "", rebound.Permanent(errors.New(long))
	})
	for _, call := range []tool.Call{{Name: "t"}, {Name: strings.Repeat("é", 1<<20)}} {
		f := r.Execute(context.Background(), call).Failure
		if f == nil || len(f.Error) > 400 || !utf8.ValidString(f.Error) || len(f.Tool) > 400 || !utf8.ValidString(f.Tool) {
			t.Fatalf("%d bytes of error text, valid UTF-8: %v; %d bytes of tool name", len(f.Error), utf8.ValidString(f.Error), len(f.Tool))
		}
	}
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

// TestConcurrentRegisterAndExecute replaces tools while calls run.
func TestConcurrentRegisterAndExecute(t *testing.T) {
	var r tool.Registry
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				name := fmt.Sprintf("t%d", j%3)
				if i%2 == 0 {
					r.Register(name, tool.Spec{Kind: tool.Kind(j % 3), Hedge: tool.Hedge{After: time.Duration(j%2) * time.Millisecond}},
						func(context.Context, tool.Call) (string, error) { return "ok", nil })
					continue
				}
				res := r.Execute(context.Background(), tool.Call{Name: name})
				if res.Failure != nil && !errors.Is(res.Err, tool.ErrUnknownTool) {
					var se *tool.SpecError
					if !errors.As(res.Err, &se) || se.Field != "Hedge" {
						t.Error(res.Failure)
					}
				}
			}
		})
	}
	wg.Wait()
}
