package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// flaky fails with errs in turn, then answers "done".
func flaky(calls *atomic.Int64, keys *[]string, errs ...error) tool.Func {
	return func(ctx context.Context, c tool.Call) (string, error) {
		n := calls.Add(1)
		if keys != nil {
			*keys = append(*keys, tool.IdempotencyKey(ctx))
		}
		if int(n) <= len(errs) {
			return "", errs[n-1]
		}
		return "done", nil
	}
}

var (
	errTimeout = fmt.Errorf("write to notification service: %w", context.DeadlineExceeded)
	errBusy    = &rebound.HTTPError{StatusCode: 503}
)

func TestReadOnlyIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		var r tool.Registry
		r.Register("search", tool.Spec{Kind: tool.ReadOnly}, flaky(&calls, nil, errBusy, errBusy))
		res := r.Execute(t.Context(), tool.Call{ID: "c1", Name: "search"})
		if res.Failure != nil || res.Output != "done" || calls.Load() != 3 {
			t.Fatalf("%+v after %d calls", res, calls.Load())
		}
	})
}

func TestSideEffectRunsOnce(t *testing.T) {
	var calls atomic.Int64
	var r tool.Registry
	r.Register("send_email", tool.Spec{Kind: tool.SideEffect, Policy: rebound.Policy{MaxAttempts: 10}}, flaky(&calls, nil, errTimeout, errTimeout))
	res := r.Execute(context.Background(), tool.Call{ID: "c2", Name: "send_email", Arguments: json.RawMessage(`{"to":"a@b.c"}`)})
	f := res.Failure
	if calls.Load() != 1 || f == nil || !f.MayHaveTakenEffect || f.Attempts != 1 || f.Verdict != "transient" || !strings.Contains(f.Advice, "Check whether it did") {
		t.Fatalf("%d calls, failure %+v", calls.Load(), f)
	}
	if !errors.Is(res.Err, context.DeadlineExceeded) {
		t.Fatalf("the underlying error is lost: %v", res.Err)
	}

	// A rejected request did nothing: no doubt to report.
	calls.Store(0)
	r.Register("send_email", tool.Spec{Kind: tool.SideEffect}, flaky(&calls, nil, &rebound.HTTPError{StatusCode: 422}))
	res = r.Execute(context.Background(), tool.Call{ID: "c3", Name: "send_email"})
	if res.Failure == nil || res.Failure.MayHaveTakenEffect || res.Failure.Verdict != "permanent" {
		t.Fatalf("failure %+v", res.Failure)
	}
}

func TestIdempotentIsRetriedWithOneKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		var keys []string
		var r tool.Registry
		r.Register("charge", tool.Spec{Kind: tool.Idempotent}, flaky(&calls, &keys, errTimeout, errBusy))
		call := tool.Call{ID: "call_9", Name: "charge", Arguments: json.RawMessage(`{"amount": 5}`)}
		res := r.Execute(t.Context(), call)
		if res.Failure != nil || calls.Load() != 3 || keys[0] == "" || keys[0] != keys[1] || keys[1] != keys[2] {
			t.Fatalf("%+v, keys %q", res, keys)
		}
		if keys[0] != tool.IdempotencyKeyOf(tool.Call{ID: "call_9", Name: "charge", Arguments: json.RawMessage(`{"amount":5}`)}) {
			t.Fatal("whitespace in the arguments changed the key")
		}
		other := tool.IdempotencyKeyOf(tool.Call{ID: "call_10", Name: "charge", Arguments: call.Arguments})
		if other == keys[0] || tool.IdempotencyKeyOf(tool.Call{ID: "call_9", Name: "charge", Arguments: json.RawMessage(`{"amount":6}`)}) == keys[0] {
			t.Fatal("different calls share a key")
		}
	})
}

func TestUnknownTool(t *testing.T) {
	var r tool.Registry
	res := r.Execute(context.Background(), tool.Call{ID: "c", Name: "nope"})
	if !errors.Is(res.Err, tool.ErrUnknownTool) || res.Failure == nil || res.Failure.Verdict != "permanent" {
		t.Fatalf("%+v", res)
	}
}

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

// An agent's tool step: a side effect whose reply was lost goes back to
// the model as a result it can reason about.
func ExampleRegistry() {
	var tools tool.Registry
	tools.Register("append_file", tool.Spec{Kind: tool.SideEffect}, func(ctx context.Context, c tool.Call) (string, error) {
		return "", fmt.Errorf("append: %w", context.DeadlineExceeded) // the reply never came back
	})
	res := tools.Execute(context.Background(), tool.Call{ID: "toolu_01", Name: "append_file", Arguments: json.RawMessage(`{"line":"hi"}`)})
	if res.Failure != nil {
		fmt.Println(res.Failure) // the tool result to put in the conversation
	}
	// Output:
	// {"tool":"append_file","call_id":"toolu_01","verdict":"transient","attempts":1,"error":"append: context deadline exceeded","may_have_taken_effect":true,"advice":"The call failed without a clear answer and may still have taken effect. Check whether it did before calling it again."}
}

func TestInvalidPolicyIsAFailureNotAPanic(t *testing.T) {
	var r tool.Registry
	r.Register("search", tool.Spec{Kind: tool.ReadOnly, Policy: rebound.Policy{MaxAttempts: -1}}, func(context.Context, tool.Call) (string, error) {
		return "", errBusy
	})
	res := r.Execute(context.Background(), tool.Call{Name: "search"})
	if res.Failure == nil || res.Failure.Error == "" {
		t.Fatalf("%+v", res)
	}
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
