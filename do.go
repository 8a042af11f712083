package rebound

import (
	"context"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
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
// Under p.Hedge (see Hedge), fn may run twice at once, each attempt in a
// goroutine of its own whose context ends when fn returns, as under
// p.AttemptTimeout: a result that still reads from it (an HTTP response
// body, an SDK's stream) must be read inside fn.
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
	if p.Breaker == nil && p.Budget == nil && p.Observer == nil && p.Hedge == nil && guardFrom(ctx) == nil {
		// The first attempt is made with nothing set up, so that a call
		// that succeeds at once costs one function call.
		var o outcome
		if p.AttemptTimeout <= 0 { // call, inlined by hand: one frame fewer
			v, o.err = fn(ctx)
		} else {
			v, o = call(ctx, p.AttemptTimeout, fn)
		}
		if o.err == nil {
			return v, nil
		}
		first = &o
	}
	var e engine
	e.init(ctx, &p, "")
	e.loop.sideEffects = callctx.SideEffects(ctx)
	stopped := e.run(first, func(n int) outcome {
		var o outcome
		if p.Hedge == nil {
			v, o = call(ctx, p.AttemptTimeout, fn)
		} else {
			v, o = hedgedCall(&e, n, p.AttemptTimeout, fn)
		}
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

// hedgedCall makes attempt n of e's call to fn under e's Hedge. It is a
// function of its own so that a Do that does not hedge keeps its
// variables on the stack.
func hedgedCall[T any](e *engine, n int, timeout time.Duration, fn func(context.Context) (T, error)) (T, outcome) {
	return hedged(e, n, callctx.Target(e.ctx), attempterFunc[T](func(ctx context.Context, end func(), _ bool) (T, outcome) {
		defer end()
		return call(ctx, timeout, fn)
	}), nil)
}

// call makes one attempt, once the context's Guard, if any, admits it,
// under its own timeout if there is one.
func call[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (v T, o outcome) {
	ctx, end, refused := admit(ctx, nil)
	if refused != nil {
		return v, *refused
	}
	ended := false
	defer func() {
		if !ended { // fn panicked: the Guard hears of it all the same
			end(nil, errPanicked)
		}
	}()
	if timeout <= 0 {
		v, o.err = fn(ctx)
		ended = true
		end(nil, o.err)
		return v, o
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, o.err = fn(actx)
	ended = true
	end(nil, o.err)
	return v, outcome{err: o.err, timedOut: attemptTimedOut(ctx, actx, o.err)}
}
