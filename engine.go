package rebound

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
)

// The retry protocol, written once. An engine runs one call: it deposits
// the call in the retry budget, asks the breaker before every attempt and
// tells it how each ended, classifies failures, asks the Loop and then the
// budget what to do, waits, refunds a retry that was never made, and
// reports every step to the observer. Do, Stream and Transport are
// adapters: each says what an attempt is and how its outcome reads.

// engine is the state of one call.
type engine struct {
	ctx    context.Context
	clock  Clock
	start  time.Time
	target string
	// loop holds the call's one copy of the caller's Policy, with the
	// call's own Observer; the rest of it is set up at the first failure.
	loop retryLoop
	held lease // the breaker's permit while an attempt holds it

	withdrewAt time.Time // when the latest retry was withdrawn from the budget
	lastErr    error     // the latest failure, and its verdict
	lastVerd   Verdict
	inWait     bool // the call stopped during a wait

	// Set by an adapter before the call starts, with the loop's
	// sideEffects (attempted once: a retry could repeat what it did) and
	// once (attempted once for this reason: a body that cannot be sent
	// again).
	noHedge bool        // never hedged (a protocol upgrade: a second socket)
	randMu  *sync.Mutex // serialises draws from the policy's Rand, shared by concurrent calls
}

// outcome is how one attempt ended.
type outcome struct {
	err      error // nil: it succeeded
	timedOut bool  // its own timeout ended it
	// final: the call ends with this attempt, failed or not (a stream
	// that failed after reaching the caller is the caller's).
	final bool
	// unsent: the attempt could not be made (err says why) and no
	// retry can fix that.
	unsent bool
	// refused: the context's Guard refused the attempt (err is its
	// error); nothing was sent.
	refused bool
	// unreached: the attempt failed and provably never reached the
	// server, so that a call with side effects may make it again. Only
	// an adapter that sees the wire can know: Do and Stream run the
	// caller's code, which may have acted before it failed.
	unreached bool
}

// init readies e, a zero engine, for a call under p: its observer, clock,
// start time and target, and its deposit in the retry budget. target, if
// the context names none, names what is called. (An engine is set up in
// place: it is large, and a call that needs no retry should not copy it.)
func (e *engine) init(ctx context.Context, p *Policy, target string) {
	e.ctx, e.clock, e.loop.policy = ctx, callctx.ClockOf(ctx), *p
	if obs := p.Observer; obs != nil {
		if co, ok := obs.(CallObserver); ok {
			e.loop.policy.Observer = co.ObserveCall(ctx)
		}
		e.start = e.clock.Now()
		if e.target = callctx.Target(ctx); e.target == "" {
			e.target = target
		}
	}
	if b := p.Budget; b != nil {
		b.Deposit(e.clock.Now())
	}
}

// run makes the call's attempts with attempt, numbered from 1, until one
// succeeds, one is final, or the call stops; it returns nil, or why the
// call stopped. first, if not nil, is the outcome of a first attempt the
// caller made itself, with nothing set up (no breaker, budget or
// observer): run goes on from the second.
func (e *engine) run(first *outcome, attempt func(n int) outcome) *GiveUpError {
	// Whatever panics below (an attempt, the classifier, an observer),
	// a permit still held goes back as a failure: a half-open breaker's
	// probe always ends. The panic goes on unchanged.
	defer e.held.abandon()
	for n := 1; ; n++ {
		var o outcome
		if n == 1 && first != nil {
			o = *first
		} else {
			if refused := e.permit(); refused != nil {
				if n == 1 {
					return e.stop(Verdict{}, decision{Reason: StopBreakerOpen}, refused, nil)
				}
				e.refund()
				return e.stop(e.lastVerd, decision{Reason: StopBreakerOpen}, e.lastErr, refused)
			}
			o = attempt(n)
		}
		switch {
		case o.refused && n == 1:
			e.held.done(OutcomeIgnored)
			return e.stop(Verdict{}, decision{Reason: StopRefused}, o.err, nil)
		case o.unsent || o.refused:
			e.held.done(OutcomeIgnored)
			if n > 1 {
				e.refund()
			}
			reason := StopUnreplayableBody
			if o.refused {
				reason = StopRefused
			}
			return e.stop(e.lastVerd, decision{Reason: reason}, e.lastErr, o.err)
		}
		e.attempted(n, o.err)
		if o.err == nil {
			e.held.done(OutcomeSuccess) // unless the adapter took the permit over
			return nil
		}
		if n == 1 {
			if invalid := e.begin(); invalid != nil {
				e.held.done(OutcomeIgnored)
				return invalid
			}
		}
		verdict := e.classify(o.err, o.timedOut)
		e.held.done(OutcomeOf(o.err, verdict))
		if o.final {
			return nil
		}
		d := e.next(verdict, o.unreached)
		if !d.Retry {
			return e.giveUp(verdict, d, o.err)
		}
		e.retrying(n, o.err, verdict, d)
		if stopped := e.wait(d, o.err); stopped != nil {
			return stopped
		}
		e.lastErr, e.lastVerd = o.err, verdict
	}
}

// permit asks the policy's breaker, if any, to let an attempt through; the
// permit it gives is held until the attempt's outcome is known.
func (e *engine) permit() error {
	l, refused := e.allow()
	if refused == nil {
		e.held = l
	}
	return refused
}

// allow asks the policy's breaker, if any, for a permit: an attempt's or a
// hedge's. This is the one place that asks.
func (e *engine) allow() (lease, error) {
	b := e.loop.policy.Breaker
	if b == nil {
		return lease{}, nil
	}
	permit, refused := b.Allow()
	if refused != nil {
		return lease{}, refused
	}
	return lease{b: b, permit: permit}, nil
}

// handOver gives the breaker's permit, if one is held, to the adapter,
// which hands it back itself (a stream body, when the stream ends).
func (e *engine) handOver() lease {
	l := e.held
	e.held = lease{}
	return l
}

// begin sets up the Loop after the first failure. The policy is validated
// here, off the success path, so that a call that needs no retry pays
// nothing for it; an invalid one stops the call.
func (e *engine) begin() *GiveUpError {
	e.loop.deadline, _ = e.ctx.Deadline()
	if invalid := e.loop.policy.validate(); invalid != nil {
		e.loop.attempts = 1
		return e.stop(Verdict{}, decision{Reason: StopInvalidPolicy}, nil, invalid)
	}
	if e.randMu != nil && e.loop.policy.Rand != nil {
		e.loop.policy.Rand = lockedRand{mu: e.randMu, r: e.loop.policy.Rand}
	}
	return nil
}

// classify returns the verdict on a failed attempt's error: the caller's
// cancellation first, then the attempt's own timeout, then the policy's
// rules, then its classifier or Classify, by the call's clock.
func (e *engine) classify(err error, timedOut bool) Verdict {
	switch {
	case e.ctx.Err() != nil:
		return Verdict{Kind: KindCanceled}
	case timedOut:
		return Verdict{Kind: KindTransient}
	}
	return e.loop.policy.classify(err, e.clock.Now)
}

// next asks the Loop, and then the retry budget, if any, about an attempt
// that failed with v (and, if unreached, provably never reached the
// server); the clock is read only when one of them needs it.
func (e *engine) next(v Verdict, unreached bool) decision {
	var now time.Time
	if !e.loop.deadline.IsZero() {
		now = e.clock.Now()
	}
	d := e.loop.next(v, now, unreached)
	if b := e.loop.policy.Budget; d.Retry && b != nil {
		if now.IsZero() {
			now = e.clock.Now()
		}
		if !b.Withdraw(now) {
			e.loop.waited -= d.Wait
			return decision{Reason: StopRetryBudget, ServerWait: d.ServerWait, HasServerWait: d.HasServerWait}
		}
		e.withdrewAt = now
	}
	return d
}

// refund gives a retry that was withdrawn but never made back to the
// budget, as of when it was withdrawn.
func (e *engine) refund() {
	if b := e.loop.policy.Budget; b != nil {
		b.Refund(e.withdrewAt)
	}
}

// wait sleeps for d.Wait, or stops the call if its context ends first.
func (e *engine) wait(d decision, err error) *GiveUpError {
	cause := e.clock.Sleep(e.ctx, d.Wait)
	if cause == nil {
		return nil
	}
	e.refund()
	e.inWait = true
	d.Reason = StopCanceled
	return e.stop(Verdict{Kind: KindCanceled}, d, err, cause)
}

// giveUp ends the call after decision d on err.
func (e *engine) giveUp(v Verdict, d decision, err error) *GiveUpError {
	var cause error
	if v.Kind == KindCanceled && e.ctx.Err() != nil {
		cause = context.Cause(e.ctx)
	}
	return e.stop(v, d, err, cause)
}

// stop ends the call: an event, and the error that says why.
func (e *engine) stop(v Verdict, d decision, err, cause error) *GiveUpError {
	if obs := e.loop.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventGiveUp, Target: e.target, Attempt: e.loop.attempts, Err: err, Verdict: v,
			Reason: d.Reason, Waited: e.loop.waited, Elapsed: e.elapsed(), BudgetLeft: e.budgetLeft()})
	}
	return &GiveUpError{
		Attempts: e.loop.attempts, Reason: d.Reason, Verdict: v, Waited: e.loop.waited,
		ServerWait: d.ServerWait, HasServerWait: d.HasServerWait, Err: err, cause: cause,
	}
}

// attempted reports an attempt's end to the observer.
func (e *engine) attempted(n int, err error) {
	if obs := e.loop.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventAttempt, Target: e.target, Attempt: n, Err: err, Waited: e.loop.waited, Elapsed: e.elapsed()})
	}
}

// retrying reports a scheduled retry to the observer.
func (e *engine) retrying(n int, err error, v Verdict, d decision) {
	if obs := e.loop.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventRetry, Target: e.target, Attempt: n, Err: err, Verdict: v,
			Wait: d.Wait, Waited: e.loop.waited, Elapsed: e.elapsed(), BudgetLeft: e.budgetLeft()})
	}
}

func (e *engine) elapsed() time.Duration { return e.clock.Now().Sub(e.start) }

// budgetLeft is what the retry budget still allows, for events; -1
// without a budget.
func (e *engine) budgetLeft() float64 {
	if b := e.loop.policy.Budget; b != nil {
		return b.Available(e.clock.Now())
	}
	return -1
}

// lease is a Breaker's permit while a call holds it.
type lease struct {
	b      Breaker // nil when no permit is held
	permit Permit
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

// abandon hands back a permit still held when the call unwinds: as a
// failure, or as nothing learned if the caller's own code was running.
func (l *lease) abandon() {
	if l.caller {
		l.done(OutcomeIgnored)
	}
	l.done(OutcomeFailure)
}

// lockedRand serialises draws from a Policy's Rand shared by concurrent
// calls.
type lockedRand struct {
	mu *sync.Mutex
	r  interface{ Int64N(int64) int64 }
}

func (l lockedRand) Int64N(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int64N(n)
}

// noCancel ends nothing: the end of an attempt that has no context of its
// own.
func noCancel() {}

// stack returns a function that ends an attempt's context with first and
// then second.
func stack(first, second func()) context.CancelFunc {
	return func() { first(); second() }
}

// admit asks ctx's Guard, if any, to admit an attempt with req (nil in Do
// and Stream); without a Guard the attempt goes under ctx, and end does
// nothing. A refusal is an outcome the engine stops on.
func admit(ctx context.Context, req *http.Request) (context.Context, func(*http.Response, error), *outcome) {
	g := guardFrom(ctx)
	if g == nil {
		return ctx, noEnd, nil
	}
	actx, end, err := g.Admit(ctx, req)
	if err != nil {
		return ctx, noEnd, &outcome{err: err, refused: true}
	}
	return actx, end, nil
}

func noEnd(*http.Response, error) {}

// errPanicked is what a Guard is told of an attempt that panicked.
var errPanicked = errors.New("rebound: the attempt panicked")

// attemptTimedOut reports whether an attempt failed with err because its
// own timeout ended it, not the caller's context. An error that does not
// say so (a Permanent mark returned after the deadline, say) is left to the
// classifier.
func attemptTimedOut(ctx, actx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) &&
		errors.Is(err, context.DeadlineExceeded)
}
