package rebound

import (
	"context"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/firsttoken"
)

// defaultHedgePercentile is the share of a target's recent first-token
// times a hedge waits for: about one call in ten is hedged, the share of
// calls a RetryBudget lets retry. It is the rule behind `rebound sim
// --scenario hedge`, not a figure tuned to it.
const defaultHedgePercentile = 0.9

// Hedge, set in a Policy, hedges the attempts that are slow to their first
// token. When an attempt has produced nothing after the hedge delay, a
// second attempt of the same call starts beside it; whichever produces
// content first wins, and the other is cancelled (its context ends with
// ErrHedgeLost) and waited for, its response body closed: an attempt must
// heed its context, or the call waits for it. Once a target has a delay,
// each of its attempts runs in a goroutine of its own, hedged or not. What counts as
// content is the adapter's: in Do, the function's success; in Transport, a
// response below 400 (for an event stream, its first content event); in
// Stream, the first event past the preamble.
//
// A hedge is an upstream request more, so it is never made unless asked
// for, and never for a call that is not safe to repeat: one marked
// WithSideEffects (in Transport, or by its SideEffects, and without an
// Idempotency-Key), or whose body can be sent only once. It is a retry as far as the provider is
// concerned: it draws from the Policy's Budget, if any, and is not made
// when that is spent, nor when the Policy's Breaker refuses it a permit.
// An attempt that fails while the other runs leaves the race to the
// other; when both fail, the later failure is the attempt's, and the
// Policy judges it as any other.
//
// The delay is the Percentile of the target's (WithTarget; in Transport,
// else the host) recent first-token times, once 16 of them are known;
// until then it is After. It is timed by the real clock, since the
// attempts are real goroutines, whatever Clock the call's waits go by. A
// Hedge keeps the times of at most 1024 targets and is safe for
// concurrent use; share one among the calls to the same targets. Its zero
// value hedges at the 90th percentile once enough times are known.
type Hedge struct {
	// Percentile, in (0, 1], is the share of recent first-token times an
	// attempt may be slower than before it is hedged (1: slower than all). Zero means 0.9:
	// about one call in ten is hedged, the share of calls a RetryBudget
	// lets retry; negative means After alone.
	Percentile float64
	// After is the delay while too few first-token times are known for
	// Percentile (or always, if Percentile is negative). Zero means no
	// hedge until then.
	After time.Duration

	times firsttoken.Times
}

// hedgeSamples is how many recent first-token times a Hedge keeps per
// target; it trusts their percentile from firsttoken.MinSamples, as the
// Transport's adaptive first-token bound does.
const hedgeSamples = 256

// Delay returns how long an attempt to target may go without content
// before it is hedged; zero means no hedge.
func (h *Hedge) Delay(target string) time.Duration {
	q := h.Percentile
	if q == 0 {
		q = defaultHedgePercentile
	}
	if !(q <= 1) { // NaN too: an invalid Hedge hedges nothing (see Policy.Validate)
		return 0
	}
	if q > 0 {
		if d, ok := h.times.Percentile(target, q, firsttoken.MinSamples); ok {
			return d
		}
	}
	return max(h.After, 0)
}

// Observe notes that an attempt to target took d from its start to its
// first content. Do, Transport and Stream call it for the attempts they
// make under the Hedge; a caller that times first tokens itself (a
// simulation, a stream read inside Do) may call it too. An attempt
// cancelled because its hedge won is noted at the time it was cancelled:
// it was slower than that, which is all a percentile needs to know.
func (h *Hedge) Observe(target string, d time.Duration) {
	if d >= 0 {
		h.times.Add(target, d, hedgeSamples)
	}
}

// validate reports what is wrong with h, for Policy.Validate.
func (h *Hedge) validate() error {
	if q := h.Percentile; math.IsNaN(q) || q > 1 {
		return policyErr("hedge.percentile", "must be at most 1, e.g. 0.9 for the 90th percentile (got %v)", q)
	}
	if h.After < 0 {
		return policyErr("hedge.after", "must not be negative (got %v)", h.After)
	}
	return nil
}

// racer is one attempt of a hedged race: what it returned, or the panic
// or runtime.Goexit that ended it.
type racer[T any] struct {
	v     T
	o     outcome
	i     int           // 0 for the first attempt, 1 for the hedge
	took  time.Duration // from its start to its end
	abort *abort
}

// abort is a panic or runtime.Goexit that ended an attempt in its own
// goroutine, to be raised again in the caller's.
type abort struct {
	value any // the panic's value; nil for runtime.Goexit
}

func (a *abort) raise() {
	if a.value == nil {
		runtime.Goexit()
	}
	panic(a.value)
}

// hedged makes attempt n of e's call with attempt: once, and again beside
// it if e's Policy hedges, the call may be repeated, and the first has
// produced nothing after the hedge delay (see Hedge). attempt returns once
// its try has produced content (a nil error) or failed; end ends its
// context, and it calls end once what it returned is no longer in use (at
// once, or when a response body is closed). The first content wins; the
// other's context is cancelled with ErrHedgeLost and it is waited for.
// What an attempt returned and is not the call's (a loser's, or a failure
// the other's outcome replaced) goes to discard, if not nil. key names the
// target whose first-token times set the delay.
//
// The hedge has a breaker permit and a budget withdrawal of its own: the
// permit of the attempt returned is left in e.held for the engine to
// settle, the other's is settled here (a loser's as saying nothing). A
// panic in either attempt is raised again here, once neither is running,
// with its own value; so is a panic in the race itself (an observer, the
// breaker, the classifier), and either way every attempt has ended, every
// value has gone to discard and every permit has been handed back.
func hedged[T any](e *engine, n int, key string, attempt func(ctx context.Context, end func(), hedge bool) (T, outcome), discard func(T)) (T, outcome) {
	h := e.policy.Hedge
	if h == nil || e.sideEffects || e.once != 0 || e.noHedge {
		return attempt(e.ctx, noCancel, false)
	}
	delay := h.Delay(key)
	if delay <= 0 {
		start := time.Now()
		v, o := attempt(e.ctx, noCancel, false)
		if o.err == nil {
			h.Observe(key, time.Since(start))
		}
		return v, o
	}
	r := &race[T]{results: make(chan racer[T], 2), discard: discard}
	r.leases[0] = e.handOver()
	defer r.unwind() // a panic anywhere below: nothing left running or held
	r.launch(e.ctx, 0, attempt)
	timer := time.NewTimer(delay)
	defer timer.Stop()

	ret := -1 // the attempt whose outcome is the call's
	for r.running > 0 && (ret < 0 || r.ended[ret].o.err != nil && r.ended[ret].abort == nil) {
		select {
		case <-timer.C:
			// No hedge for an attempt whose answer is already in, nor
			// for a call already over.
			if len(r.results) == 0 && e.ctx.Err() == nil && e.startHedge(&r.leases[1], n) {
				r.launch(e.ctx, 1, attempt)
			}
		case x := <-r.results:
			r.running--
			r.ended[x.i] = &x
			// A hedge that could not be sent, or that the guard refused,
			// leaves the call to the first.
			if x.i == 0 || !x.o.unsent && !x.o.refused {
				ret = x.i
			}
		}
	}
	r.stop()
	var aborted *abort
	if a := r.ended[ret].abort; a != nil {
		aborted = a
	}
	e.held = r.leases[ret] // the engine's to settle, even if what follows panics
	r.leases[ret] = lease{}
	for i, x := range r.ended {
		if x == nil || i == ret {
			continue
		}
		switch {
		case x.abort != nil:
			if aborted == nil {
				aborted = x.abort
			}
			r.leases[i].done(OutcomeFailure)
		case r.lost[i] || x.o.unsent || x.o.refused:
			if x.o.unsent || x.o.refused {
				e.refund()
			}
			r.leases[i].done(OutcomeIgnored)
		case x.o.err == nil:
			r.leases[i].done(OutcomeSuccess)
		default:
			r.leases[i].done(OutcomeOf(x.o.err, e.classify(x.o.err, x.o.timedOut)))
		}
		r.free(i)
	}
	if x := r.ended[0]; x.abort == nil && (r.lost[0] || ret == 0 && x.o.err == nil) {
		h.Observe(key, x.took) // a loser's: slower than this, at least
	}
	if aborted != nil {
		r.free(ret) // a winner nobody will read
		aborted.raise()
	}
	r.handed = true
	return r.ended[ret].v, r.ended[ret].o
}

// race is the state of one hedged attempt: its two racers.
type race[T any] struct {
	results chan racer[T]
	discard func(T)
	wg      sync.WaitGroup
	running int
	cancels [2]context.CancelCauseFunc
	leases  [2]lease     // each racer's breaker permit
	ended   [2]*racer[T] // what each returned, once it has
	lost    [2]bool      // cancelled before it ended
	freed   [2]bool      // its value went to discard and its context ended
	handed  bool         // the call's outcome was returned
}

// launch starts racer i (0: the first attempt, 1: the hedge) under the
// call's context.
func (r *race[T]) launch(call context.Context, i int, attempt func(ctx context.Context, end func(), hedge bool) (T, outcome)) {
	ctx, cancel := context.WithCancelCause(call)
	r.cancels[i] = cancel
	r.running++
	start := time.Now()
	r.wg.Go(func() {
		x := racer[T]{i: i}
		returned := false
		defer func() {
			x.took = time.Since(start)
			if !returned {
				// A recovered value is never nil since Go 1.21
				// (panic(nil) gives a *runtime.PanicNilError), so nil
				// means runtime.Goexit.
				x.abort = &abort{value: recover()}
			}
			r.results <- x
		}()
		x.v, x.o = attempt(ctx, func() { cancel(nil) }, i == 1)
		returned = true
	})
}

// stop cancels the racers still running, as losers, and waits for them.
func (r *race[T]) stop() {
	for i, cancel := range r.cancels {
		if cancel != nil && r.ended[i] == nil {
			r.lost[i] = true
			cancel(ErrHedgeLost)
		}
	}
	for ; r.running > 0; r.running-- {
		x := <-r.results
		r.ended[x.i] = &x
	}
	r.wg.Wait()
}

// free gives what racer i returned to discard, once, and ends its context.
func (r *race[T]) free(i int) {
	x := r.ended[i]
	if x == nil || r.freed[i] {
		return
	}
	r.freed[i] = true
	r.cancels[i](nil)
	if x.abort == nil && r.discard != nil {
		r.discard(x.v)
	}
}

// unwind, deferred, cleans up after a race that a panic cut short: every
// racer is stopped and freed, and every permit still held goes back as a
// failure, as the engine hands back its own.
func (r *race[T]) unwind() {
	if r.handed {
		return
	}
	r.stop()
	for i := range r.ended {
		r.free(i)
		r.leases[i].done(OutcomeFailure)
	}
}

// startHedge starts the hedge of attempt n, if the budget and the breaker
// allow one: it withdraws a retry, takes the breaker's permit into l, and
// tells the observer.
func (e *engine) startHedge(l *lease, n int) bool {
	now := e.clock.Now()
	if b := e.policy.Budget; b != nil {
		if !b.Withdraw(now) {
			return false
		}
		e.withdrewAt = now
	}
	permit, refused := e.allow()
	if refused != nil {
		e.refund()
		return false
	}
	*l = permit
	if obs := e.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventHedge, Target: e.target, Attempt: n, Elapsed: e.elapsed(), BudgetLeft: e.budgetLeft()})
	}
	return true
}
