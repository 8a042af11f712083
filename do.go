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
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	var (
		loop  Loop
		start time.Time
	)
	observed := p.Observer != nil
	if observed {
		start = time.Now()
	}
	for attempt := 1; ; attempt++ {
		v, err, timedOut := call(ctx, p.AttemptTimeout, fn)
		if observed {
			p.Observer.Observe(Event{Type: EventAttempt, Attempt: attempt, Err: err, Elapsed: time.Since(start)})
		}
		if err == nil {
			return v, nil
		}
		if attempt == 1 {
			deadline, _ := ctx.Deadline()
			loop = NewLoop(p, deadline, HasSideEffects(ctx))
			// Checked here, off the success path, so that a call that
			// needs no retry pays nothing for it.
			if invalid := p.Validate(); invalid != nil {
				loop.attempts = 1
				var zero T
				return zero, giveUp(&p, &loop, start, Verdict{}, Decision{Reason: StopInvalidPolicy}, err, invalid)
			}
		}
		var verdict Verdict
		switch {
		case ctx.Err() != nil:
			verdict.Kind = KindCanceled
		case timedOut:
			verdict.Kind = KindTransient
		case p.Classifier != nil:
			verdict = p.Classifier(err)
		default:
			verdict = Classify(err)
		}
		var now time.Time
		if !loop.deadline.IsZero() {
			now = time.Now()
		}
		d := loop.Next(verdict, now)
		if !d.Retry {
			var cause error
			if verdict.Kind == KindCanceled && ctx.Err() != nil {
				cause = context.Cause(ctx)
			}
			var zero T
			return zero, giveUp(&p, &loop, start, verdict, d, err, cause)
		}
		if observed {
			p.Observer.Observe(Event{Type: EventRetry, Attempt: attempt, Err: err, Verdict: verdict,
				Wait: d.Wait, Waited: loop.waited, Elapsed: time.Since(start)})
		}
		if cause := wait(ctx, d.Wait); cause != nil {
			d.Reason = StopCanceled
			var zero T
			return zero, giveUp(&p, &loop, start, Verdict{Kind: KindCanceled}, d, err, cause)
		}
	}
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
	return v, err, err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
}

// wait sleeps for d or until ctx is done, and returns ctx's cause if that
// came first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func giveUp(p *Policy, loop *Loop, start time.Time, v Verdict, d Decision, err, cause error) error {
	e := &GiveUpError{
		Attempts: loop.attempts, Reason: d.Reason, Verdict: v, Waited: loop.waited,
		ServerWait: d.ServerWait, HasServerWait: d.HasServerWait, Err: err, cause: cause,
	}
	if p.Observer != nil {
		p.Observer.Observe(Event{Type: EventGiveUp, Attempt: loop.attempts, Err: err, Verdict: v,
			Reason: d.Reason, Waited: loop.waited, Elapsed: time.Since(start)})
	}
	return e
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

	cause error // the context's cause, or the *PolicyError that stopped the call
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
	case StopInvalidPolicy:
		why += ": " + e.cause.Error()
	case StopServerWait, StopWaitBudget, StopDeadline:
		if e.HasServerWait {
			why += fmt.Sprintf(", server asked to wait %v", e.ServerWait)
		}
	}
	return fmt.Sprintf("rebound: gave up after %d %s (%s): %v", e.Attempts, s, why, e.Err)
}

// Unwrap returns the last attempt's error and, when the caller's context
// stopped the call, the context's cause, or when the policy was invalid,
// the *PolicyError.
func (e *GiveUpError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}

// Observer receives a call's events. Observe is called synchronously on
// the calling goroutine and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventType is what an Event reports.
type EventType uint8

// Event types.
const (
	// EventAttempt: an attempt ended; Err is nil on success.
	EventAttempt EventType = iota + 1
	// EventRetry: a failed attempt will be retried after Wait.
	EventRetry
	// EventGiveUp: the call stopped without success, for Reason.
	EventGiveUp
)

var eventNames = [...]string{EventAttempt: "attempt", EventRetry: "retry", EventGiveUp: "give_up"}

func (t EventType) String() string { return enumString(eventNames[:], int(t), "event") }

// Event is one step of a call, as seen by an Observer.
type Event struct {
	Type EventType
	// Attempt is the attempt number, from 1.
	Attempt int
	// Err is the attempt's error; nil for a successful attempt.
	Err error
	// Verdict is the classifier's verdict on Err (EventRetry, EventGiveUp).
	Verdict Verdict
	// Wait is the wait before the next attempt (EventRetry).
	Wait time.Duration
	// Waited is the call's total wait so far, Wait included.
	Waited time.Duration
	// Reason is why the call stopped (EventGiveUp).
	Reason StopReason
	// Elapsed is the time since the call started.
	Elapsed time.Duration
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
