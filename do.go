package rebound

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do calls fn until it succeeds or p says to stop, and returns its result.
//
// Each failure is classified (p.Classifier, else Classify) and handed to a
// Loop, which says how long to wait or why to stop. A wait ends early when
// ctx is done. The caller's cancellation is never retried; a per-attempt
// timeout (p.AttemptTimeout) is. A ctx marked WithSideEffects gets exactly
// one attempt.
//
// When Do gives up, the error is a *GiveUpError that wraps fn's last error.
// An invalid p (see Policy.Validate) is found at the first failure: the
// call then stops with StopInvalidPolicy and the error wraps the
// *PolicyError too.
//
// An attempt that panics (or calls runtime.Goexit), or a classifier or
// observer that does, is reported to p.Breaker as a failure, so that a
// probe of a half-open breaker always ends; the panic then goes on
// unchanged, and the caller's recover sees the value it panicked with.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	var (
		v     T
		first *outcome
	)
	if p.Breaker == nil && p.Budget == nil && p.Observer == nil {
		// The first attempt is made with nothing set up, so that a call
		// that succeeds at once costs one function call.
		var o outcome
		v, o.err, o.timedOut = call(ctx, p.AttemptTimeout, fn)
		if o.err == nil {
			return v, nil
		}
		first = &o
	}
	e := newEngine(ctx, p, "")
	e.sideEffects = HasSideEffects(ctx)
	stopped := e.run(first, func(int) outcome {
		var o outcome
		v, o.err, o.timedOut = call(ctx, p.AttemptTimeout, fn)
		return o
	})
	if stopped != nil {
		var zero T
		return zero, stopped
	}
	return v, nil
}

// Run is Do for a function that returns only an error.
func Run(ctx context.Context, p Policy, fn func(context.Context) error) error {
	_, err := Do(ctx, p, func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) })
	return err
}

// call makes one attempt, under its own timeout if there is one.
func call[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (v T, err error, timedOut bool) {
	if timeout <= 0 {
		v, err = fn(ctx)
		return v, err, false
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err = fn(actx)
	return v, err, attemptTimedOut(ctx, actx, err)
}

// attemptTimedOut reports whether an attempt failed with err because its
// own timeout ended it, not the caller's context. An error that does not
// say so (a Permanent mark returned after the deadline, say) is left to the
// classifier.
func attemptTimedOut(ctx, actx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) &&
		errors.Is(err, context.DeadlineExceeded)
}

// GiveUpError is the error of a call that stopped without success. It wraps
// the last attempt's error, so errors.Is and errors.As reach it.
type GiveUpError struct {
	// Attempts is how many attempts were made.
	Attempts int
	// Reason is why the loop stopped.
	Reason StopReason
	// Verdict is the classifier's verdict on the last error.
	Verdict Verdict
	// Waited is the total time spent waiting between attempts.
	Waited time.Duration
	// ServerWait is the wait the server asked for last, if HasServerWait;
	// with Reason StopServerWait, the wait that was judged too long.
	ServerWait    time.Duration
	HasServerWait bool
	// Err is the last attempt's error.
	Err error

	cause error // the context's cause, the *PolicyError or the breaker's refusal that stopped the call
}

func (e *GiveUpError) Error() string {
	s := "attempts"
	if e.Attempts == 1 {
		s = "attempt"
	}
	why := e.Reason.String()
	switch e.Reason {
	case StopNotRetryable:
		why = e.Verdict.Kind.String() + " error, " + why
	case StopInvalidPolicy, StopBreakerOpen:
		if e.cause != nil {
			why += ": " + e.cause.Error()
		}
	case StopServerWait, StopWaitBudget, StopDeadline:
		if e.HasServerWait {
			why += fmt.Sprintf(", server asked to wait %v", e.ServerWait)
		}
	}
	return fmt.Sprintf("rebound: gave up after %d %s (%s): %v", e.Attempts, s, why, e.Err)
}

// Unwrap returns the last attempt's error and, when the caller's context
// stopped the call, the context's cause; when the policy was invalid, the
// *PolicyError; when a breaker refused a retry, its refusal. A call that a
// breaker refused before its first attempt has only the refusal.
func (e *GiveUpError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}

type sideEffectsKey struct{}

// WithSideEffects marks the calls made with the returned context as having
// side effects (sending a message, appending to a file, charging a card): a
// timeout does not mean nothing happened, so such a call is attempted
// exactly once, whatever its error.
func WithSideEffects(ctx context.Context) context.Context {
	return context.WithValue(ctx, sideEffectsKey{}, true)
}

// HasSideEffects reports whether ctx carries the WithSideEffects mark.
func HasSideEffects(ctx context.Context) bool {
	marked, _ := ctx.Value(sideEffectsKey{}).(bool)
	return marked
}
