package rebound_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
)

// A model call that fails twice with a 503 and then answers. Do retries
// the 503s and returns the answer; a 400 would have been returned at once.
func ExampleDo() {
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls < 3 {
			http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "hello")
	}))
	defer srv.Close()

	p := rebound.Policy{
		BaseDelay: 10 * time.Millisecond,
		Observer: rebound.ObserverFunc(func(e rebound.Event) {
			if e.Type == rebound.EventRetry {
				fmt.Printf("attempt %d failed (%v), retrying\n", e.Attempt, e.Verdict.Kind)
			}
		}),
	}
	answer, err := rebound.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			return "", rebound.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", rebound.NewHTTPError(resp)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	})
	fmt.Println(answer, err)
	// Output:
	// attempt 1 failed (transient), retrying
	// attempt 2 failed (transient), retrying
	// hello <nil>
}

// A call that gives up says why, and still reaches the last error.
func ExampleGiveUpError() {
	err := rebound.Run(context.Background(), rebound.Policy{}, func(context.Context) error {
		return &rebound.HTTPError{StatusCode: http.StatusUnauthorized}
	})
	var gu *rebound.GiveUpError
	if errors.As(err, &gu) {
		fmt.Println(gu.Attempts, gu.Reason, gu.Verdict.Kind)
	}
	fmt.Println(err)
	// Output:
	// 1 not retryable permanent
	// rebound: gave up after 1 attempt (permanent error, not retryable): http 401 Unauthorized
}

// Policies read from JSON: snake_case keys, integer milliseconds, an absent
// key meaning the default and an explicit 0 meaning zero. Writing a policy
// gives its effective values.
func ExamplePolicy_json() {
	var p rebound.Policy
	err := json.Unmarshal([]byte(`{
		"max_attempts": 4,
		"base_delay_ms": 0,
		"per_kind": {"rate_limited": {"max_attempts": 6, "base_delay_ms": 2000}}
	}`), &p)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := json.MarshalIndent(p, "", "  ")
	fmt.Println(string(out))

	err = json.Unmarshal([]byte(`{"max_attempts": 3, "backoff": "fast"}`), &p)
	fmt.Println(err)
	err = json.Unmarshal([]byte(`{"base_delay_ms": 2000, "max_delay_ms": 1000}`), &p)
	fmt.Println(err)
	// Output:
	// {
	//   "max_attempts": 4,
	//   "base_delay_ms": 0,
	//   "max_delay_ms": 10000,
	//   "multiplier": 2,
	//   "jitter": "full",
	//   "shape": "exponential",
	//   "wait_budget_ms": 30000,
	//   "max_server_wait_ms": 60000,
	//   "server_wait": "honor",
	//   "attempt_timeout_ms": 0,
	//   "per_kind": {
	//     "rate_limited": {
	//       "max_attempts": 6,
	//       "base_delay_ms": 2000,
	//       "max_delay_ms": 10000
	//     }
	//   }
	// }
	// rebound: policy: unknown key "backoff" (want max_attempts, base_delay_ms, max_delay_ms, multiplier, jitter, shape, wait_budget_ms, max_server_wait_ms, server_wait, attempt_timeout_ms, per_kind or rules)
	// rebound: policy: max_delay_ms: 1000 is below base_delay_ms 2000
}

// A tool that appends to a file must not run twice: a timeout does not
// mean nothing was written.
func ExampleWithSideEffects() {
	ctx := rebound.WithSideEffects(context.Background())
	calls := 0
	err := rebound.Run(ctx, rebound.Policy{}, func(context.Context) error {
		calls++
		return context.DeadlineExceeded
	})
	fmt.Println(calls, err)
	// Output:
	// 1 rebound: gave up after 1 attempt (side effects, not retried): context deadline exceeded
}

// An escalation (the Rust article's): retry at once, then linearly, then exponentially.
func ExamplePolicy_schedule() {
	p := rebound.Policy{
		MaxAttempts: 6,
		MaxDelay:    10 * time.Second,
		Jitter:      rebound.JitterNone,
		Schedule: func(retry int) time.Duration {
			switch {
			case retry == 1:
				return 0
			case retry <= 3:
				return time.Duration(retry-1) * 500 * time.Millisecond
			}
			return time.Second << (retry - 3)
		},
	}
	p.Observer = rebound.ObserverFunc(func(e rebound.Event) {
		if e.Type == rebound.EventRetry {
			fmt.Println("wait", e.Wait)
		}
	})
	// A clock that does not sleep, so that the example runs at once.
	ctx := rebound.WithClock(context.Background(), instantClock{})
	err := rebound.Run(ctx, p, func(context.Context) error { return errors.New("flaky") })
	var g *rebound.GiveUpError
	if errors.As(err, &g) {
		fmt.Println("stop:", g.Reason)
	}
	// Output:
	// wait 0s
	// wait 500ms
	// wait 1s
	// wait 2s
	// wait 4s
	// stop: attempts exhausted
}

// An SDK's http.Client with rebound underneath: the provider answers the
// first request with a 503 and the second with the answer; the client sees
// only the answer. (Turn the SDK's own retries off, as in the sdk module's
// examples, so that rebound alone decides.)
func ExampleTransport() {
	status := []int{http.StatusServiceUnavailable, http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status[0])
		fmt.Fprintf(w, `{"status":%d}`, status[0])
		status = status[1:]
	}))
	defer srv.Close()

	retries := rebound.ObserverFunc(func(e rebound.Event) {
		if e.Type == rebound.EventRetry {
			fmt.Printf("attempt %d failed (%v), a %v failure: retrying\n", e.Attempt, e.Err, e.Verdict.Kind)
		}
	})
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: retries}}}
	resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// attempt 1 failed (http 503 Service Unavailable: {"status":503}), a transient failure: retrying
	// 200 {"status":200}
}

// A provider words its per-minute limit like an exhausted quota; a rule
// says what it means, and how long to wait when the response does not say.
func ExampleRule() {
	p := rebound.Policy{
		Rules: []rebound.Rule{
			{Status: 429, Message: "quota exceeded for this minute", Kind: rebound.KindRateLimited, Wait: 30 * time.Second},
		},
		MaxAttempts: 1, // to show the verdict without waiting for the retry
		Observer: rebound.ObserverFunc(func(e rebound.Event) {
			if e.Type == rebound.EventGiveUp {
				fmt.Printf("%v, wait %v\n", e.Verdict.Kind, e.Verdict.ServerWait)
			}
		}),
	}
	_, _ = rebound.Do(context.Background(), p, func(context.Context) (string, error) {
		return "", &rebound.HTTPError{StatusCode: 429, Body: []byte(`{"error":{"message":"Quota exceeded for this minute","code":"insufficient_quota"}}`)}
	})

	var q rebound.Policy
	fmt.Println(json.Unmarshal([]byte(`{"rules":[{"status":429,"kind":"slow"}]}`), &q))
	// Output:
	// rate_limited, wait 30s
	// rebound: policy: rules[0].kind: unknown value "slow" (want transient, rate_limited, overloaded, quota_exhausted, context_overflow or permanent)
}

// A call whose first attempt is stuck: after the hedge's delay a second
// attempt starts beside it and answers; the stuck one is cancelled with
// ErrHedgeLost and waited for. In use, share one Hedge with a zero value:
// it learns each target's first-token times and hedges the slowest tenth.
func ExampleHedge() {
	hedge := &rebound.Hedge{After: 10 * time.Millisecond, Percentile: -1} // a fixed delay, for the example
	var attempts atomic.Int32
	answer, err := rebound.Do(context.Background(), rebound.Policy{Hedge: hedge}, func(ctx context.Context) (string, error) {
		if attempts.Add(1) == 1 {
			<-ctx.Done() // a provider that never sends its first token
			fmt.Println("first attempt:", context.Cause(ctx))
			return "", ctx.Err()
		}
		return "the hedge's answer", nil
	})
	fmt.Println(answer, err)
	// Output:
	// first attempt: rebound: another attempt of the hedged call answered first
	// the hedge's answer <nil>
}

// instantClock is a rebound.Clock whose sleeps end at once.
type instantClock struct{}

func (instantClock) Now() time.Time { return time.Time{} }

func (instantClock) Sleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }
