package rebound

import (
	"context"
	"runtime"
	"sync"
	"time"
)

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

// hedged makes attempt n of e's call with a: once, and again beside
// it if e's Policy hedges, the call may be repeated, and the first has
// produced nothing after the hedge delay (see Hedge). a.attempt returns once
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
func hedged[T any](e *engine, n int, key string, a attempter[T], discard func(T)) (T, outcome) {
	h := e.loop.policy.Hedge
	if h == nil || e.loop.sideEffects || e.loop.once != 0 || e.noHedge {
		return a.attempt(e.ctx, noCancel, false)
	}
	delay := h.Delay(key)
	if delay <= 0 {
		start := time.Now()
		v, o := a.attempt(e.ctx, noCancel, false)
		if o.err == nil {
			h.Observe(key, time.Since(start))
		}
		return v, o
	}
	r := &race[T]{results: make(chan racer[T], 2), discard: discard}
	r.leases[0] = e.handOver()
	defer r.unwind() // a panic anywhere below: nothing left running or held
	r.launch(e.ctx, 0, a)
	timer := time.NewTimer(delay)
	defer timer.Stop()

	ret := -1 // the attempt whose outcome is the call's
	for r.running > 0 && (ret < 0 || r.ended[ret].o.err != nil && r.ended[ret].abort == nil) {
		select {
		case <-timer.C:
			// No hedge for an attempt whose answer is already in, nor
			// for a call already over.
			if len(r.results) == 0 && e.ctx.Err() == nil && e.startHedge(&r.leases[1], n) {
				r.launch(e.ctx, 1, a)
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

// attempter makes the attempts of a hedged call (see hedged). An adapter
// whose attempts share state already on the heap implements it there, and
// saves the allocation of a closure per attempt; the rest pass an
// attempterFunc.
type attempter[T any] interface {
	attempt(ctx context.Context, end func(), hedge bool) (T, outcome)
}

// attempterFunc is an attempter that is a function.
type attempterFunc[T any] func(ctx context.Context, end func(), hedge bool) (T, outcome)

func (f attempterFunc[T]) attempt(ctx context.Context, end func(), hedge bool) (T, outcome) {
	return f(ctx, end, hedge)
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
func (r *race[T]) launch(call context.Context, i int, a attempter[T]) {
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
		x.v, x.o = a.attempt(ctx, func() { cancel(nil) }, i == 1)
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
	if b := e.loop.policy.Budget; b != nil {
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
	if obs := e.loop.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventHedge, Target: e.target, Attempt: n, Elapsed: e.elapsed(), BudgetLeft: e.budgetLeft()})
	}
	return true
}
