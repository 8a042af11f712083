package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// slow answers "done" after d, counting its runs.
func slow(calls *atomic.Int64, d time.Duration) tool.Func {
	return func(ctx context.Context, c tool.Call) (string, error) {
		calls.Add(1)
		time.Sleep(d)
		return "done", nil
	}
}

var errRateLimited = &rebound.HTTPError{StatusCode: 429}

func TestRecordsAnswerARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, kind := range []tool.Kind{tool.SideEffects, tool.Idempotent} {
			var calls atomic.Int64
			r := tool.Registry{Records: &tool.MemoryRecords{}}
			r.Register("send", tool.Spec{Kind: kind}, flaky(&calls, nil))
			call := tool.Call{ID: "c1", Name: "send", Arguments: json.RawMessage(`{"to":"a"}`)}
			first := r.Execute(t.Context(), call)
			again := r.Execute(t.Context(), call)
			if first.Failure != nil || first.Recorded || !again.Recorded || again.Output != "done" || again.Failure != nil || calls.Load() != 1 {
				t.Fatalf("%v: %+v then %+v after %d runs", kind, first, again, calls.Load())
			}
			// Another ID, or other arguments, is another call.
			r.Execute(t.Context(), tool.Call{ID: "c2", Name: "send", Arguments: call.Arguments})
			r.Execute(t.Context(), tool.Call{ID: "c1", Name: "send", Arguments: json.RawMessage(`{"to":"b"}`)})
			if calls.Load() != 3 {
				t.Fatalf("%v: %d runs, want 3", kind, calls.Load())
			}
		}
	})
}

// TestRecordsLeaveSomeCallsAlone: read-only calls need no record, and a
// call without an ID has no identity to record it by: both run each time,
// without asking the records.
func TestRecordsLeaveSomeCallsAlone(t *testing.T) {
	var calls atomic.Int64
	r := tool.Registry{Records: failingRecords{}}
	r.Register("search", tool.Spec{Kind: tool.ReadOnly}, flaky(&calls, nil))
	r.Register("send", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil))
	for _, call := range []tool.Call{{ID: "c", Name: "search"}, {ID: "c", Name: "search"}, {Name: "send"}, {Name: "send"}} {
		if res := r.Execute(context.Background(), call); res.Failure != nil || res.Recorded {
			t.Fatalf("%+v", res)
		}
	}
	if calls.Load() != 4 {
		t.Fatalf("%d runs, want 4", calls.Load())
	}
}

// failingRecords cannot be reached.
type failingRecords struct{}

var errUnreachable = errors.New("records unreachable")

func (failingRecords) Claim(context.Context, string, time.Duration) (tool.Claim, error) {
	return tool.Claim{}, errUnreachable
}
func (failingRecords) Extend(context.Context, string, string, time.Duration) error {
	return errUnreachable
}
func (failingRecords) Complete(context.Context, string, string, tool.Record) error {
	return errUnreachable
}
func (failingRecords) Release(context.Context, string, string) error { return errUnreachable }

// TestRecordsThatCannotBeCheckedMakeNoCall: a side effect is not made blind.
func TestRecordsThatCannotBeCheckedMakeNoCall(t *testing.T) {
	var calls atomic.Int64
	r := tool.Registry{Records: failingRecords{}}
	r.Register("send", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil))
	res := r.Execute(context.Background(), tool.Call{ID: "c", Name: "send"})
	if f := res.Failure; calls.Load() != 0 || !errors.Is(res.Err, errUnreachable) || f == nil || f.MayHaveTakenEffect || f.Attempts != 0 {
		t.Fatalf("%d runs, %+v", calls.Load(), res)
	}
}

// TestRecordsOfFailures: a failure that may have taken effect is kept, so
// that no one makes the call again, and so is one the same arguments would
// meet again; a refusal that did nothing is given up for a later try.
func TestRecordsOfFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     tool.Spec
		errs     []error
		kept     bool
		doubtful bool
	}{
		{"LostReply", tool.Spec{Kind: tool.SideEffects}, []error{errTimeout}, true, true},
		{"ServerError", tool.Spec{Kind: tool.SideEffects}, []error{errBusy}, true, true},
		{"Rejected", tool.Spec{Kind: tool.SideEffects}, []error{&rebound.HTTPError{StatusCode: 422}}, true, false},
		{"RateLimited", tool.Spec{Kind: tool.SideEffects}, []error{errRateLimited}, false, false},
		// The rate limit on the retry does not undo the first attempt's
		// doubt.
		{"IdempotentLostThenLimited", tool.Spec{Kind: tool.Idempotent, Policy: rebound.Policy{MaxAttempts: 2}},
			[]error{errTimeout, errRateLimited}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int64
				r := tool.Registry{Records: &tool.MemoryRecords{}}
				r.Register("send", tc.spec, flaky(&calls, nil, tc.errs...))
				call := tool.Call{ID: "c", Name: "send"}
				first := r.Execute(t.Context(), call)
				if first.Failure == nil || first.Failure.MayHaveTakenEffect != tc.doubtful {
					t.Fatalf("first run: %+v", first.Failure)
				}
				runs := calls.Load()
				again := r.Execute(t.Context(), call)
				switch {
				case tc.kept && (calls.Load() != runs || !again.Recorded || !errors.Is(again.Err, tool.ErrRecorded) ||
					*again.Failure != *first.Failure):
					t.Fatalf("kept: %d runs, then %+v", calls.Load(), again)
				case !tc.kept && (calls.Load() != runs+1 || again.Recorded || again.Output != "done"):
					t.Fatalf("given up: %d runs, then %+v", calls.Load(), again)
				}
			})
		})
	}
}

// openBreaker lets no attempt through.
type openBreaker struct{}

func (openBreaker) Allow() (rebound.Permit, error)       { return 0, errors.New("breaker open") }
func (openBreaker) Done(rebound.Permit, rebound.Outcome) {}

// TestRecordsOfCallsNeverAttempted: a call an open breaker stopped did
// nothing, says so, and may be made once the breaker lets it.
func TestRecordsOfCallsNeverAttempted(t *testing.T) {
	var calls atomic.Int64
	r := tool.Registry{Records: &tool.MemoryRecords{}}
	r.Register("send", tool.Spec{Kind: tool.SideEffects, Policy: rebound.Policy{Breaker: openBreaker{}}}, flaky(&calls, nil))
	call := tool.Call{ID: "c", Name: "send"}
	res := r.Execute(context.Background(), call)
	if f := res.Failure; f == nil || f.Attempts != 0 || f.MayHaveTakenEffect || calls.Load() != 0 {
		t.Fatalf("%+v", f)
	}
	r.Register("send", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil))
	if res := r.Execute(context.Background(), call); res.Recorded || res.Failure != nil || calls.Load() != 1 {
		t.Fatalf("%+v", res)
	}
}

// TestRecordedFailureIsACopy: a caller that changes its Result does not
// change the record.
func TestRecordedFailureIsACopy(t *testing.T) {
	var calls atomic.Int64
	r := tool.Registry{Records: &tool.MemoryRecords{}}
	r.Register("send", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil, errTimeout))
	call := tool.Call{ID: "c", Name: "send"}
	r.Execute(context.Background(), call).Failure.Advice = "changed"
	r.Execute(context.Background(), call).Failure.Advice = "changed again"
	if f := r.Execute(context.Background(), call).Failure; f.Advice == "changed" || f.Advice == "changed again" {
		t.Fatalf("the record changed: %+v", f)
	}
}

// TestRecordsWaitForARunningCall: the same call made while it runs
// elsewhere waits for its outcome and is answered from it.
func TestRecordsWaitForARunningCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		r := tool.Registry{Records: &tool.MemoryRecords{}}
		r.Register("send", tool.Spec{Kind: tool.SideEffects}, slow(&calls, 3*time.Second))
		call := tool.Call{ID: "c", Name: "send"}
		const n = 50
		results := make([]tool.Result, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range n {
			wg.Go(func() { results[i] = r.Execute(t.Context(), call) })
		}
		wg.Wait()
		recorded := 0
		for _, res := range results {
			if res.Failure != nil || res.Output != "done" {
				t.Fatalf("%+v", res)
			}
			if res.Recorded {
				recorded++
			}
		}
		if calls.Load() != 1 || recorded != n-1 {
			t.Fatalf("%d runs, %d answered from the record", calls.Load(), recorded)
		}
		if d := time.Since(start); d < 3*time.Second || d > 3*time.Second+250*time.Millisecond {
			t.Fatalf("the waiters heard the outcome after %v, want within a poll of 3s", d)
		}
	})
}

// TestRecordsInProgress: a call that outlasts the wait fails the repeat
// with ErrInProgress, unmade; its lease, renewed while it runs, keeps it
// from being made again however long it takes.
func TestRecordsInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		r := tool.Registry{Records: &tool.MemoryRecords{}, Lease: 2 * time.Second, Wait: 5 * time.Second}
		r.Register("send", tool.Spec{Kind: tool.SideEffects}, slow(&calls, time.Minute))
		call := tool.Call{ID: "c", Name: "send"}
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { r.Execute(t.Context(), call) })
		synctest.Wait()

		start := time.Now()
		res := r.Execute(t.Context(), call)
		if !errors.Is(res.Err, tool.ErrInProgress) || res.Failure == nil || !res.Failure.MayHaveTakenEffect ||
			res.Failure.Verdict != "transient" || time.Since(start) != 5*time.Second {
			t.Fatalf("after %v: %+v", time.Since(start), res)
		}

		// No wait at all.
		r.Wait = -1
		start = time.Now()
		if res := r.Execute(t.Context(), call); !errors.Is(res.Err, tool.ErrInProgress) || time.Since(start) != 0 {
			t.Fatalf("after %v: %+v", time.Since(start), res)
		}

		// A caller that gives up waiting.
		r.Wait = 0
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		res = r.Execute(ctx, call)
		if !errors.Is(res.Err, tool.ErrInProgress) || !errors.Is(res.Err, context.DeadlineExceeded) || res.Failure.Verdict != "canceled" {
			t.Fatalf("%+v", res)
		}

		time.Sleep(time.Minute) // the call ends
		if res := r.Execute(t.Context(), call); !res.Recorded || res.Output != "done" || calls.Load() != 1 {
			t.Fatalf("%+v after %d runs", res, calls.Load())
		}
	})
}

// TestRecordsAfterADeadHolder: a claim whose holder stopped renewing it is
// waited for until its lease runs out; then the call is made, and the
// result says that the first run's outcome is unknown.
func TestRecordsAfterADeadHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		records := &tool.MemoryRecords{}
		r := tool.Registry{Records: records}
		r.Register("send", tool.Spec{Kind: tool.SideEffects}, flaky(&calls, nil, errRateLimited))
		call := tool.Call{ID: "c", Name: "send"}
		// A holder that died: it claimed the key and was never heard of again.
		if c, err := records.Claim(t.Context(), tool.IdempotencyKeyOf(call), 4*time.Second); err != nil || c.Token == "" {
			t.Fatalf("%+v %v", c, err)
		}
		start := time.Now()
		res := r.Execute(t.Context(), call)
		if d := time.Since(start); d < 4*time.Second || d > 4*time.Second+250*time.Millisecond || !res.PriorRunUnknown || calls.Load() != 1 {
			t.Fatalf("after %v: %+v, %d runs", d, res, calls.Load())
		}
		// This run was refused and did nothing, but the first run's doubt
		// stays with the key.
		res = r.Execute(t.Context(), call)
		if res.Failure != nil || !res.PriorRunUnknown || calls.Load() != 2 {
			t.Fatalf("%+v, %d runs", res, calls.Load())
		}
		// So does the record that ends it: a repeat answered from it is
		// told that an earlier run may have taken effect too.
		if res := r.Execute(t.Context(), call); !res.Recorded || !res.PriorRunUnknown || calls.Load() != 2 {
			t.Fatalf("%+v, %d runs", res, calls.Load())
		}
	})
}

// TestRecordsAfterAPanic: a call that panics leaves its claim to expire, as
// a dead holder's would, and stops renewing it.
func TestRecordsAfterAPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		r := tool.Registry{Records: &tool.MemoryRecords{}, Lease: 3 * time.Second}
		r.Register("send", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
			if calls.Add(1) == 1 {
				time.Sleep(5 * time.Second) // renewed meanwhile
				panic("tool bug")
			}
			return "done", nil
		})
		call := tool.Call{ID: "c", Name: "send"}
		if got, returned := executeRecovering(&r, t.Context(), call); returned || got != "tool bug" {
			t.Fatalf("recovered %v", got)
		}
		start := time.Now()
		res := r.Execute(t.Context(), call)
		if d := time.Since(start); d < 2*time.Second || d > 3*time.Second+250*time.Millisecond || !res.PriorRunUnknown || res.Output != "done" {
			t.Fatalf("after %v: %+v", d, res)
		}
	})
}

func TestMemoryRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		m := &tool.MemoryRecords{Max: 3, TTL: time.Hour}
		if _, err := m.Claim(ctx, "k", 0); err == nil {
			t.Fatal("a claim without a lease was taken")
		}
		c, _ := m.Claim(ctx, "k", time.Minute)
		if err := m.Complete(ctx, "k", "not the token", tool.Record{Output: "x"}); err == nil {
			t.Fatal("a stranger completed the claim")
		}
		if err := m.Extend(ctx, "k", c.Token, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := m.Complete(ctx, "k", c.Token, tool.Record{Output: "x"}); err != nil {
			t.Fatal(err)
		}
		if err := m.Release(ctx, "k", c.Token); err == nil {
			t.Fatal("a completed claim was released")
		}
		if c, _ := m.Claim(ctx, "k", time.Minute); c.Record == nil || c.Record.Output != "x" {
			t.Fatalf("%+v", c)
		}

		// Past its TTL a record is forgotten.
		time.Sleep(time.Hour)
		if c, _ := m.Claim(ctx, "k", time.Minute); c.Token == "" || c.PriorRunUnknown {
			t.Fatalf("%+v", c)
		}

		// Past Max the oldest claims are forgotten; a claim's release and
		// renewal leave stale entries behind that never count.
		for i := range 100 {
			c, _ := m.Claim(ctx, "churn", time.Minute)
			if i%2 == 0 {
				m.Release(ctx, "churn", c.Token)
			} else {
				m.Complete(ctx, "churn", c.Token, tool.Record{})
			}
			time.Sleep(time.Hour)
		}
		for _, k := range []string{"a", "b", "c"} {
			m.Claim(ctx, k, time.Minute)
		}
		if c, _ := m.Claim(ctx, "a", time.Minute); c.Token != "" || c.Record != nil {
			t.Fatalf("a live claim among the last 3 was forgotten: %+v", c)
		}
		m.Claim(ctx, "d", time.Minute)
		if c, _ := m.Claim(ctx, "a", time.Minute); c.Token == "" || c.PriorRunUnknown {
			t.Fatalf("the oldest of 4 claims with Max 3 was kept: %+v", c)
		}
	})
}
