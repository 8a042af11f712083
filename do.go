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
// An attempt that panics (or calls runtime.Goexit) is reported to
// p.Breaker as a failure, so that a probe of a half-open breaker always
// ends; the panic then goes on unchanged, and the caller's recover sees
// the value fn panicked with.
func Do[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error)) (T, error) {
	// The first attempt is made here, with nothing set up, so that a call
	// that succeeds at once costs one function call.
	var (
		start  time.Time
		target string
	)
	if p.Observer != nil {
		p.Observer, start, target = observeCall(ctx, p.Observer)
	}
	if p.Budget != nil {
		p.Budget.Deposit(ClockFrom(ctx).Now())
	}
	var (
		held     lease
		v        T
		err      error
		timedOut bool
	)
	if p.Breaker != nil {
		permit, refused := p.Breaker.Allow()
		if refused != nil {
			var zero T
			r := run{obs: p.Observer, start: start, clock: ClockFrom(ctx), target: target}
			return zero, r.stop(Verdict{}, Decision{Reason: StopBreakerOpen}, refused, nil)
		}
		held = lease{b: p.Breaker, permit: permit}
		v, err, timedOut = callHeld(ctx, p.AttemptTimeout, fn, &held)
	} else if p.AttemptTimeout <= 0 { // call, inlined by hand: one frame fewer
		v, err = fn(ctx)
	} else {
		v, err, timedOut = callTimed(ctx, p.AttemptTimeout, fn)
	}
	if err == nil {
		held.done(OutcomeSuccess)
		if p.Observer != nil {
			p.Observer.Observe(Event{Type: EventAttempt, Target: target, Attempt: 1, Elapsed: ClockFrom(ctx).Now().Sub(start)})
		}
		return v, nil
	}
	return retry(ctx, p, fn, start, target, held, err, timedOut)
}

// lease is a Breaker's permit while a call holds it. A call that unwinds
// holding one (a panic or runtime.Goexit in an attempt, the classifier or
// an observer) hands it back as a failure in abandon, deferred: a
// half-open breaker would otherwise wait for its probe for ever.
type lease struct {
	b      Breaker // nil when no permit is held
	permit Permit
	// attempting is set while an attempt's function runs.
	attempting bool
	// caller is set while the caller's own code runs with the permit
	// held (a stream's loop body): a panic there says nothing of the
	// provider.
	caller bool
}

// done hands the permit back with outcome o, if one is held.
func (l *lease) done(o Outcome) {
	if b := l.b; b != nil {
		l.b = nil
		b.Done(l.permit, o)
	}
}

// abandon hands back a permit still held when the call unwinds.
func (l *lease) abandon() {
	if l.caller {
		l.done(OutcomeIgnored)
	}
	l.done(OutcomeFailure)
}

// unwound hands the permit back as a failure if the attempt's function
// did not return.
func (l *lease) unwound() {
	if l.attempting {
		l.attempting = false
		l.done(OutcomeFailure)
	}
}

// retry goes on with a call whose first attempt, made under the permit
// held (if any), failed with err.
func retry[T any](ctx context.Context, p Policy, fn func(context.Context) (T, error), start time.Time, target string,
	held lease, err error, timedOut bool) (T, error) {
	defer held.abandon()
	var zero T
	r := run{obs: p.Observer, start: start, clock: ClockFrom(ctx), target: target}
	r.attempted(1, err)
	if invalid := r.begin(ctx, &p, HasSideEffects(ctx)); invalid != nil {
		held.done(OutcomeIgnored)
		return zero, invalid
	}
	for attempt := 2; ; attempt++ {
		verdict := r.classify(ctx, err, timedOut)
		held.done(OutcomeOf(err, verdict))
		d := r.next(verdict)
		if !d.Retry {
			return zero, r.giveUp(ctx, verdict, d, err)
		}
		r.retrying(attempt-1, err, verdict, d)
		if stopped := r.wait(ctx, d, err); stopped != nil {
			return zero, stopped
		}
		if p.Breaker != nil {
			permit, refused := p.Breaker.Allow()
			if refused != nil {
				r.refund()
				return zero, r.stop(verdict, Decision{Reason: StopBreakerOpen}, err, refused)
			}
			held = lease{b: p.Breaker, permit: permit}
		}
		var v T
		v, err, timedOut = call(ctx, p.AttemptTimeout, fn)
		r.attempted(attempt, err)
		if err == nil {
			held.done(OutcomeSuccess)
			return v, nil
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
	return callTimed(ctx, timeout, fn)
}

// callTimed makes one attempt under its own timeout.
func callTimed[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (v T, err error, timedOut bool) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err = fn(actx)
	return v, err, attemptTimedOut(ctx, actx, err)
}

// callHeld is call for a first attempt made under a breaker's permit: if
// fn does not return (it panics, or calls runtime.Goexit), the permit is
// handed back as a failure. Later attempts are covered by retry's deferred
// abandon.
func callHeld[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error), held *lease) (v T, err error, timedOut bool) {
	held.attempting = true
	defer held.unwound()
	if timeout <= 0 { // call, inlined by hand: one frame fewer
		v, err = fn(ctx)
	} else {
		v, err, timedOut = callTimed(ctx, timeout, fn)
	}
	held.attempting = false
	return v, err, timedOut
}

// attemptTimedOut reports whether an attempt failed with err because its
// own timeout ended it, not the caller's context. An error that does not
// say so (a Permanent mark returned after the deadline, say) is left to the
// classifier.
func attemptTimedOut(ctx, actx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) &&
		errors.Is(err, context.DeadlineExceeded)
}

// run is the state of one call that Do and Transport share: the observer
// and the start time for its events, the clock, and the Loop (holding the
// policy) once an attempt has failed. It holds the policy by value so that
// the caller's copy stays on the stack.
type run struct {
	obs        Observer
	start      time.Time
	clock      Clock
	target     string
	loop       Loop
	withdrewAt time.Time // when the latest retry was withdrawn from the budget
}

func (r *run) elapsed() time.Duration { return r.clock.Now().Sub(r.start) }

// observeCall readies an observer for one call: the call's own, if obs is
// a CallObserver; the start time; and the target.
func observeCall(ctx context.Context, obs Observer) (Observer, time.Time, string) {
	if co, ok := obs.(CallObserver); ok {
		obs = co.ObserveCall(ctx)
	}
	return obs, ClockFrom(ctx).Now(), TargetFrom(ctx)
}

// attempted reports an attempt's end to the observer.
func (r *run) attempted(attempt int, err error) {
	if r.obs != nil {
		r.obs.Observe(Event{Type: EventAttempt, Target: r.target, Attempt: attempt, Err: err, Waited: r.loop.waited, Elapsed: r.elapsed()})
	}
}

// begin sets up the Loop after the first failure. The policy is validated
// here, off the success path, so that a call that needs no retry pays
// nothing for it; an invalid one stops the call.
func (r *run) begin(ctx context.Context, p *Policy, sideEffects bool) *GiveUpError {
	deadline, _ := ctx.Deadline()
	r.loop = NewLoop(*p, deadline, sideEffects)
	if invalid := p.Validate(); invalid != nil {
		r.loop.attempts = 1
		return r.stop(Verdict{}, Decision{Reason: StopInvalidPolicy}, nil, invalid)
	}
	return nil
}

// classify returns the verdict on a failed attempt's error.
func (r *run) classify(ctx context.Context, err error, timedOut bool) Verdict {
	switch {
	case ctx.Err() != nil:
		return Verdict{Kind: KindCanceled}
	case timedOut:
		return Verdict{Kind: KindTransient}
	case r.loop.policy.Classifier != nil:
		return r.loop.policy.Classifier(err)
	}
	return Classify(err)
}

// next asks the Loop, and then the retry budget, if any; the clock is read
// only when one of them needs it.
func (r *run) next(v Verdict) Decision {
	var now time.Time
	if !r.loop.deadline.IsZero() {
		now = r.clock.Now()
	}
	d := r.loop.Next(v, now)
	if b := r.loop.policy.Budget; d.Retry && b != nil {
		if now.IsZero() {
			now = r.clock.Now()
		}
		if !b.Withdraw(now) {
			r.loop.waited -= d.Wait
			return Decision{Reason: StopRetryBudget, ServerWait: d.ServerWait, HasServerWait: d.HasServerWait}
		}
		r.withdrewAt = now
	}
	return d
}

// refund gives a retry that was allowed but not made back to a budget that
// takes refunds, as of when it was withdrawn.
func (r *run) refund() {
	if b, ok := r.loop.policy.Budget.(interface{ Refund(time.Time) }); ok {
		b.Refund(r.withdrewAt)
	}
}

// budgetLeft is what the retry budget still allows, for events; -1
// without a budget that can say.
func (r *run) budgetLeft() float64 {
	if b, ok := r.loop.policy.Budget.(interface{ Available(time.Time) float64 }); ok {
		return b.Available(r.clock.Now())
	}
	return -1
}

// retrying reports a scheduled retry to the observer.
func (r *run) retrying(attempt int, err error, v Verdict, d Decision) {
	if r.obs != nil {
		r.obs.Observe(Event{Type: EventRetry, Target: r.target, Attempt: attempt, Err: err, Verdict: v,
			Wait: d.Wait, Waited: r.loop.waited, Elapsed: r.elapsed(), BudgetLeft: r.budgetLeft()})
	}
}

// wait sleeps for d.Wait, or gives up if ctx ends first.
func (r *run) wait(ctx context.Context, d Decision, err error) *GiveUpError {
	cause := r.clock.Sleep(ctx, d.Wait)
	if cause == nil {
		return nil
	}
	r.refund()
	d.Reason = StopCanceled
	return r.stop(Verdict{Kind: KindCanceled}, d, err, cause)
}

// giveUp ends the call after decision d on err.
func (r *run) giveUp(ctx context.Context, v Verdict, d Decision, err error) *GiveUpError {
	var cause error
	if v.Kind == KindCanceled && ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	return r.stop(v, d, err, cause)
}

func (r *run) stop(v Verdict, d Decision, err, cause error) *GiveUpError {
	if r.obs != nil {
		r.obs.Observe(Event{Type: EventGiveUp, Target: r.target, Attempt: r.loop.attempts, Err: err, Verdict: v,
			Reason: d.Reason, Waited: r.loop.waited, Elapsed: r.elapsed(), BudgetLeft: r.budgetLeft()})
	}
	return &GiveUpError{
		Attempts: r.loop.attempts, Reason: d.Reason, Verdict: v, Waited: r.loop.waited,
		ServerWait: d.ServerWait, HasServerWait: d.HasServerWait, Err: err, cause: cause,
	}
}

// sleep waits for d or until ctx is done, and returns ctx's cause if that
// came first.
func sleep(ctx context.Context, d time.Duration) error {
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
