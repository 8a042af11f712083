package rebound

import (
	"context"
	"iter"
)

// Stream opens a stream with open and retries under p while nothing has
// reached the caller: once an event has been yielded, the stream is the
// caller's, and a later error passes through unchanged and is never
// retried (the caller has already shown half an answer; a replay would
// show it twice).
//
// Leading events for which preamble reports true (a stream's "message
// started" or keep-alive events, say) are held back, not yielded, until the
// first other event: a failure after preamble alone is still retried, and
// the held events of a failed attempt are dropped. A nil preamble holds
// nothing back. A stream that ends cleanly after preamble alone yields it
// and ends.
//
// A failure before the first event is classified and retried as in Do; if
// the call gives up, the stream yields one *GiveUpError. A Breaker in p is
// asked before each attempt and told the outcome when the attempt's stream
// ends. p.AttemptTimeout does not apply: a stream's length is its own.
//
// An attempt that panics (in open, or in the stream it returned) is
// reported to the Breaker as a failure; a panic in the caller's own loop
// body, as an attempt that says nothing of the provider. Either way the
// panic then goes on unchanged.
func Stream[E any](ctx context.Context, p Policy, open func(context.Context) iter.Seq2[E, error], preamble func(E) bool) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		e := newEngine(ctx, p, "")
		e.sideEffects = HasSideEffects(ctx)
		var (
			delivered, stopped bool
			failure            error
		)
		gaveUp := e.run(nil, func(int) outcome {
			delivered, stopped, failure = streamAttempt(ctx, open, preamble, yield, &e.held)
			// A failure after an event reached the caller is the caller's.
			return outcome{err: failure, final: delivered}
		})
		switch {
		case gaveUp != nil:
			var zero E
			yield(zero, gaveUp)
		case failure != nil && !stopped:
			var zero E
			yield(zero, failure) // the caller's stream broke: theirs to handle
		}
	}
}

// streamAttempt runs one attempt's stream into yield, holding preamble back
// until the first other event. It returns whether any event reached the
// caller, whether the caller stopped asking, and the attempt's error (nil
// if the stream ended cleanly or the caller stopped). While the caller's
// code runs, l says so.
func streamAttempt[E any](ctx context.Context, open func(context.Context) iter.Seq2[E, error], preamble func(E) bool,
	give func(E, error) bool, l *lease) (delivered, stopped bool, failure error) {
	yield := func(e E, err error) bool {
		l.caller = true
		more := give(e, err)
		l.caller = false
		return more
	}
	var held []E
	for e, err := range open(ctx) {
		if err != nil {
			return delivered, false, err
		}
		if !delivered && preamble != nil && preamble(e) {
			held = append(held, e)
			continue
		}
		if !delivered {
			delivered = true
			for _, h := range held {
				if !yield(h, nil) {
					return true, true, nil
				}
			}
			held = nil
		}
		if !yield(e, nil) {
			return true, true, nil
		}
	}
	for _, h := range held {
		if !yield(h, nil) {
			return true, true, nil
		}
	}
	return delivered || len(held) > 0, false, nil
}
