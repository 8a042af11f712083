package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

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
	r.Register("send_email", tool.Spec{Kind: tool.SideEffects, Policy: rebound.Policy{MaxAttempts: 10}}, flaky(&calls, nil, errTimeout, errTimeout))
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
	r.Register("send_email", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil, &rebound.HTTPError{StatusCode: 422}))
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

// An agent's tool step: a side effect whose reply was lost goes back to
// the model as a result it can reason about.
func ExampleRegistry() {
	var tools tool.Registry
	tools.Register("append_file", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
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
		{"InvalidPolicy", tool.Spec{Kind: tool.SideEffects, Policy: rebound.Policy{MaxAttempts: -1}}, count, "Policy.max_attempts"},
		{"PercentileNaN", tool.Spec{Hedge: tool.Hedge{Percentile: math.NaN()}}, count, "Hedge.Percentile"},
		{"PercentileAsAPercentage", tool.Spec{Hedge: tool.Hedge{Percentile: 95}}, count, "Hedge.Percentile"},
		{"NegativePercentile", tool.Spec{Hedge: tool.Hedge{Percentile: -0.5}}, count, "Hedge.Percentile"},
		{"NegativeAfter", tool.Spec{Hedge: tool.Hedge{After: -time.Second}}, count, "Hedge.After"},
		{"HedgedSideEffect", tool.Spec{Kind: tool.SideEffects, Hedge: tool.Hedge{After: time.Second}}, count, "Hedge"},
		{"HedgedIdempotent", tool.Spec{Kind: tool.Idempotent, Hedge: tool.Hedge{Percentile: 0.9}}, count, "Hedge"},
		{"HedgedUnknown", tool.Spec{Hedge: tool.Hedge{After: time.Second}}, count, "Hedge"},
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

// TestCancelledContextRunsNothing: a call whose context is already done is
// not started, and so cannot have taken effect.
func TestCancelledContextRunsNothing(t *testing.T) {
	var calls atomic.Int64
	var r tool.Registry
	r.Register("send", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
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
	r.Register("t", tool.Spec{Kind: tool.SideEffects}, func(context.Context, tool.Call) (string, error) {
		return "", rebound.Permanent(errors.New(long))
	})
	for _, call := range []tool.Call{{Name: "t"}, {Name: strings.Repeat("é", 1<<20)}} {
		f := r.Execute(context.Background(), call).Failure
		if f == nil || len(f.Error) > 400 || !utf8.ValidString(f.Error) || len(f.Tool) > 400 || !utf8.ValidString(f.Tool) {
			t.Fatalf("%d bytes of error text, valid UTF-8: %v; %d bytes of tool name", len(f.Error), utf8.ValidString(f.Error), len(f.Tool))
		}
	}
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
