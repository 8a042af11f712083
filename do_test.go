package rebound_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// failing returns a function that fails with the given errors in turn and
// then succeeds, and a pointer to its call count.
func failing(errs ...error) (func(context.Context) (string, error), *int) {
	calls := 0
	return func(context.Context) (string, error) {
		calls++
		if calls <= len(errs) {
			return "", errs[calls-1]
		}
		return "ok", nil
	}, &calls
}

func http503() error { return &rebound.HTTPError{StatusCode: 503} }

func TestDoRetriesUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn, calls := failing(http503(), http503())
		start := time.Now()
		got, err := rebound.Do(t.Context(), rebound.Policy{BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone}, fn)
		if err != nil || got != "ok" || *calls != 3 {
			t.Fatalf("Do = %q, %v after %d calls", got, err, *calls)
		}
		if elapsed := time.Since(start); elapsed != 300*time.Millisecond {
			t.Fatalf("took %v, want 100ms + 200ms of backoff", elapsed)
		}
	})
}

func TestDoGivesUpWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		last := &rebound.HTTPError{StatusCode: 502}
		fn, calls := failing(http503(), http503(), last, http503())
		_, err := rebound.Do(t.Context(), rebound.Policy{}, fn)
		var gu *rebound.GiveUpError
		if !errors.As(err, &gu) || gu.Attempts != 3 || gu.Reason != rebound.StopAttempts || *calls != 3 {
			t.Fatalf("err %v (%#v) after %d calls", err, gu, *calls)
		}
		var herr *rebound.HTTPError
		if !errors.As(err, &herr) || herr != last {
			t.Fatalf("errors.As does not reach the last error: %v", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "gave up after 3 attempts (attempts exhausted)") || !strings.Contains(msg, "http 502") {
			t.Fatalf("message %q", msg)
		}
	})
}

func TestDoDoesNotRetryPermanent(t *testing.T) {
	sentinel := errors.New("invalid tool arguments")
	for _, err := range []error{&rebound.HTTPError{StatusCode: 400}, rebound.Permanent(sentinel)} {
		fn, calls := failing(err, err)
		_, got := rebound.Do(context.Background(), rebound.Policy{}, fn)
		var gu *rebound.GiveUpError
		if *calls != 1 || !errors.As(got, &gu) || gu.Reason != rebound.StopNotRetryable || !errors.Is(got, err) {
			t.Fatalf("%v: %d calls, err %v", err, *calls, got)
		}
	}
	_, err := rebound.Do(context.Background(), rebound.Policy{}, func(context.Context) (int, error) {
		return 0, rebound.Permanent(sentinel)
	})
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), "permanent error, not retryable") {
		t.Fatalf("err %v", err)
	}
}

func TestRetryableRejectsABadResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		got, err := rebound.Do(t.Context(), rebound.Policy{}, func(context.Context) (string, error) {
			calls++
			if calls < 2 {
				return "", rebound.Retryable(errors.New("empty model response"))
			}
			return "answer", nil
		})
		if err != nil || got != "answer" || calls != 2 {
			t.Fatalf("%q %v %d", got, err, calls)
		}
	})
}

func TestDoSideEffectsAttemptedOnce(t *testing.T) {
	ctx := rebound.WithSideEffects(context.Background())
	for _, err := range []error{http503(), &rebound.HTTPError{StatusCode: 429}, errors.New("timeout?"), context.DeadlineExceeded} {
		fn, calls := failing(err, err, err)
		_, got := rebound.Do(ctx, rebound.Policy{MaxAttempts: 10, BaseDelay: rebound.NoDelay}, fn)
		var gu *rebound.GiveUpError
		if *calls != 1 || !errors.As(got, &gu) || gu.Reason != rebound.StopSideEffects {
			t.Fatalf("%v: %d calls, err %v", err, *calls, got)
		}
	}
}

// TestSideEffectsPropertyOverRandomPolicies: whatever the policy and the
// error, a call with side effects runs once.
func TestSideEffectsPropertyOverRandomPolicies(t *testing.T) {
	const seed = 5
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	ctx := rebound.WithSideEffects(context.Background())
	errs := []error{http503(), &rebound.HTTPError{StatusCode: 529}, rebound.Retryable(errors.New("x")), errors.New("y")}
	for i := range 500 {
		p := rebound.Policy{MaxAttempts: 1 + r.IntN(20), BaseDelay: rebound.NoDelay, Jitter: rebound.Jitter(r.IntN(4))}
		calls := 0
		_ = rebound.Run(ctx, p, func(context.Context) error { calls++; return errs[r.IntN(len(errs))] })
		if calls != 1 {
			t.Fatalf("policy %d: %d calls", i, calls)
		}
	}
}

func TestCancellationWakesAWaitAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(2 * time.Second) // virtual: the bubble's clock
			cancel()
		}()
		start := time.Now()
		fn, calls := failing(http503(), http503(), http503())
		_, err := rebound.Do(ctx, rebound.Policy{BaseDelay: 20 * time.Second, MaxDelay: time.Minute, Jitter: rebound.JitterNone}, fn)
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Fatalf("returned after %v, want 2s (at the cancellation)", elapsed)
		}
		var gu *rebound.GiveUpError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &gu) || gu.Reason != rebound.StopCanceled || *calls != 1 {
			t.Fatalf("err %v after %d calls", err, *calls)
		}
	})
}

func TestCallerCancellationIsNotRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := rebound.Run(ctx, rebound.Policy{BaseDelay: rebound.NoDelay}, func(ctx context.Context) error {
		calls++
		cancel()
		return errors.New("request aborted")
	})
	var gu *rebound.GiveUpError
	if calls != 1 || !errors.As(err, &gu) || gu.Reason != rebound.StopCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("%d calls, err %v", calls, err)
	}
}

func TestDeadlineStopsBeforeAFutileWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		fn, calls := failing(http503(), http503(), http503())
		_, err := rebound.Do(ctx, rebound.Policy{BaseDelay: 2 * time.Second, Jitter: rebound.JitterNone}, fn)
		var gu *rebound.GiveUpError
		if !errors.As(err, &gu) || gu.Reason != rebound.StopDeadline || *calls != 2 {
			t.Fatalf("err %v after %d calls", err, *calls)
		}
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Fatalf("returned after %v, want 2s: the second wait (4s) would pass the deadline", elapsed)
		}
	})
}

func TestWaitBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const budget = 1500 * time.Millisecond
		rng := rand.New(rand.NewPCG(1, 1))
		for range 200 {
			start := time.Now()
			waited := time.Duration(0)
			obs := rebound.ObserverFunc(func(e rebound.Event) {
				if e.Type == rebound.EventRetry {
					waited += e.Wait
				}
			})
			calls := 0
			err := rebound.Run(t.Context(), rebound.Policy{MaxAttempts: 20, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second, WaitBudget: budget, Rand: rng, Observer: obs},
				func(context.Context) error { calls++; return http503() })
			var gu *rebound.GiveUpError
			if !errors.As(err, &gu) || gu.Reason != rebound.StopWaitBudget {
				t.Fatalf("err %v", err)
			}
			if elapsed := time.Since(start); elapsed > budget || elapsed != waited || gu.Waited != waited {
				t.Fatalf("slept %v, observed %v, reported %v; budget %v", elapsed, waited, gu.Waited, budget)
			}
			if calls >= 20 {
				t.Fatalf("%d calls: the budget did not stop the loop", calls)
			}
		}
	})
}

func TestRetryAfterHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limited := &rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"1"}}}
		fn, _ := failing(limited)
		start := time.Now()
		if _, err := rebound.Do(t.Context(), rebound.Policy{BaseDelay: 20 * time.Millisecond}, fn); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != time.Second {
			t.Fatalf("waited %v, want the server's 1s", elapsed)
		}

		fn, _ = failing(limited)
		start = time.Now()
		if _, err := rebound.Do(t.Context(), rebound.Policy{ServerWait: rebound.ServerWaitClamp, MaxServerWait: 300 * time.Millisecond}, fn); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != 300*time.Millisecond {
			t.Fatalf("clamped wait %v, want 300ms", elapsed)
		}
	})
}

func TestServerWaitTooLongStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long := &rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"3600"}}}
		fn, calls := failing(long)
		start := time.Now()
		_, err := rebound.Do(t.Context(), rebound.Policy{}, fn)
		var gu *rebound.GiveUpError
		if !errors.As(err, &gu) || gu.Reason != rebound.StopServerWait || !gu.HasServerWait || gu.ServerWait != time.Hour {
			t.Fatalf("err %v (%+v)", err, gu)
		}
		if time.Since(start) != 0 || *calls != 1 {
			t.Fatalf("slept %v, %d calls", time.Since(start), *calls)
		}
		if !strings.Contains(err.Error(), "server asked to wait 1h0m0s") {
			t.Fatalf("message %q does not carry the hint", err)
		}
	})
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		got, err := rebound.Do(t.Context(), rebound.Policy{AttemptTimeout: time.Second, BaseDelay: rebound.NoDelay},
			func(ctx context.Context) (int, error) {
				calls++
				if calls < 3 {
					<-ctx.Done() // a provider that never answers
					return 0, ctx.Err()
				}
				return 42, nil
			})
		if err != nil || got != 42 || calls != 3 {
			t.Fatalf("%d %v after %d calls", got, err, calls)
		}
	})
}

func TestObserverEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []string
		obs := rebound.ObserverFunc(func(e rebound.Event) {
			s := e.Type.String()
			switch e.Type {
			case rebound.EventAttempt:
				s += map[bool]string{true: " ok", false: " failed"}[e.Err == nil]
			case rebound.EventRetry:
				s += " " + e.Verdict.Kind.String() + " wait " + e.Wait.String()
			case rebound.EventGiveUp:
				s += " " + e.Reason.String()
			}
			events = append(events, s)
		})
		p := rebound.Policy{MaxAttempts: 2, BaseDelay: 50 * time.Millisecond, Jitter: rebound.JitterNone, Observer: obs}
		fn, _ := failing(&rebound.HTTPError{StatusCode: 429})
		if _, err := rebound.Do(t.Context(), p, fn); err != nil {
			t.Fatal(err)
		}
		fn, _ = failing(http503(), http503())
		_, _ = rebound.Do(t.Context(), p, fn)
		want := "attempt failed|retry rate_limited wait 50ms|attempt ok|attempt failed|retry transient wait 50ms|attempt failed|give_up attempts exhausted"
		if got := strings.Join(events, "|"); got != want {
			t.Fatalf("events\n%s\nwant\n%s", got, want)
		}
	})
}

func TestPerKindThroughDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := rebound.Policy{
			MaxAttempts: 2, BaseDelay: 10 * time.Millisecond, Jitter: rebound.JitterNone,
			PerKind: map[rebound.Kind]rebound.Override{rebound.KindRateLimited: {MaxAttempts: 4, BaseDelay: time.Second}},
		}
		limited := &rebound.HTTPError{StatusCode: 429}
		fn, calls := failing(limited, limited, limited)
		start := time.Now()
		if _, err := rebound.Do(t.Context(), p, fn); err != nil || *calls != 4 {
			t.Fatalf("%v after %d calls", err, *calls)
		}
		if elapsed := time.Since(start); elapsed != 7*time.Second {
			t.Fatalf("rate-limited waits took %v, want 1s+2s+4s", elapsed)
		}
	})
}

func TestRunPassesThroughNil(t *testing.T) {
	if err := rebound.Run(context.Background(), rebound.Policy{}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if rebound.Permanent(nil) != nil || rebound.Retryable(nil) != nil {
		t.Fatal("marks of nil are not nil")
	}
}

func TestCustomClassifier(t *testing.T) {
	emptyAnswer := errors.New("empty")
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Classifier: func(err error) rebound.Verdict {
		if errors.Is(err, emptyAnswer) {
			return rebound.Verdict{Kind: rebound.KindPermanent}
		}
		return rebound.Classify(err)
	}}
	fn, calls := failing(emptyAnswer, emptyAnswer)
	if _, err := rebound.Do(context.Background(), p, fn); err == nil || *calls != 1 {
		t.Fatalf("%v after %d calls", err, *calls)
	}
}

func TestInvalidPolicyStopsAtTheFirstFailure(t *testing.T) {
	fn, calls := failing(http503(), http503())
	_, err := rebound.Do(context.Background(), rebound.Policy{MaxDelay: time.Second, BaseDelay: time.Minute}, fn)
	var gu *rebound.GiveUpError
	var perr *rebound.PolicyError
	if !errors.As(err, &gu) || gu.Reason != rebound.StopInvalidPolicy || !errors.As(err, &perr) || *calls != 1 {
		t.Fatalf("err %v after %d calls", err, *calls)
	}
	if perr.Key != "max_delay_ms" || !strings.Contains(err.Error(), "invalid policy: rebound: policy: max_delay_ms") {
		t.Fatalf("message %q", err)
	}
	// A call that succeeds at once is not checked: it needs no policy.
	if _, err := rebound.Do(context.Background(), rebound.Policy{MaxAttempts: -1}, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
}

// A function that overruns its attempt's timeout but says, on its way out,
// that the failure is permanent is believed.
func TestTimedOutAttemptStillClassified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := rebound.Run(t.Context(), rebound.Policy{AttemptTimeout: 10 * time.Millisecond, BaseDelay: rebound.NoDelay},
			func(ctx context.Context) error {
				calls++
				time.Sleep(20 * time.Millisecond) // ignores ctx; virtual time
				return rebound.Permanent(errors.New("invalid tool arguments"))
			})
		var gu *rebound.GiveUpError
		if calls != 1 || !errors.As(err, &gu) || gu.Reason != rebound.StopNotRetryable {
			t.Fatalf("%d calls, err %v", calls, err)
		}
	})
}

// A hint of a day is a long wait, not an absurd one: honouring it stops
// the call instead of retrying in half a second.
func TestVeryLongHintStops(t *testing.T) {
	fn, calls := failing(&rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"90000"}}})
	_, err := rebound.Do(context.Background(), rebound.Policy{}, fn)
	var gu *rebound.GiveUpError
	if *calls != 1 || !errors.As(err, &gu) || gu.Reason != rebound.StopServerWait || gu.ServerWait != 25*time.Hour {
		t.Fatalf("%d calls, err %v", *calls, err)
	}
}
