package rebound

import (
	"context"
	"iter"
	"sync/atomic"
	"time"
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
	return StreamWith(ctx, p, open, StreamOptions[E]{Preamble: preamble})
}

// StreamOptions say how StreamWith reads a stream. The zero value is
// Stream's behaviour with a nil preamble.
type StreamOptions[E any] struct {
	// Preamble reports the leading events held back until the first
	// other event, as Stream's preamble. Nil holds nothing back.
	Preamble func(E) bool

	// Done reports the event that ends a whole answer (OpenAI's [DONE],
	// Anthropic's message_stop, a chunk with a finish reason). After it,
	// the stream's end is the answer's. Before it, a stream that ends
	// cleanly with no content is a failed attempt, retried like a broken
	// one (with io.ErrUnexpectedEOF); and once content has reached the
	// caller, a stream that ends or breaks yields an
	// *IncompleteStreamError (IncompleteNoEnd or IncompleteCut, wrapping
	// the error) rather than a clean end or the bare error. Nil judges no
	// end, as Stream.
	Done func(E) bool

	// Stall bounds how long the stream may keep the caller waiting for
	// its next event (time in the caller's loop body does not count). A
	// stream silent longer has its attempt's context cancelled, so
	// open's stream must honour its context: before content the attempt
	// is retried as ErrStreamStalled; after, the stream yields an
	// *IncompleteStreamError (IncompleteStalled). Zero means no bound.
	Stall time.Duration
}

// StreamWith is Stream, with the honest end and the stall bound of o: a
// stream with Done ends, after content, either with its Done event and
// then cleanly, or with an *IncompleteStreamError.
func StreamWith[E any](ctx context.Context, p Policy, open func(context.Context) iter.Seq2[E, error], o StreamOptions[E]) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		e := newEngine(ctx, p, "")
		e.sideEffects = HasSideEffects(ctx)
		var (
			delivered, stopped bool
			failure            error
		)
		gaveUp := e.run(nil, func(int) outcome {
			delivered, stopped, failure = streamAttempt(ctx, open, o, yield, &e.held)
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
// if the stream ended whole or the caller stopped). While the caller's
// code runs, l says so.
func streamAttempt[E any](ctx context.Context, open func(context.Context) iter.Seq2[E, error], o StreamOptions[E],
	give func(E, error) bool, l *lease) (delivered, stopped bool, failure error) {
	yield := func(e E, err error) bool {
		l.caller = true
		more := give(e, err)
		l.caller = false
		return more
	}
	var (
		held    []E
		content int  // events past the preamble
		done    bool // the Done event came
		stalled atomic.Bool
		timer   *time.Timer
	)
	if o.Stall > 0 {
		actx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		ctx = actx
		timer = time.AfterFunc(o.Stall, func() {
			stalled.Store(true)
			cancel(ErrStreamStalled)
		})
		defer timer.Stop()
	}
	// end is the attempt's error once its stream stops with err (nil: a
	// clean end).
	end := func(err error) error {
		switch {
		case stalled.Load() && delivered:
			return &IncompleteStreamError{Reason: IncompleteStalled, Events: content}
		case stalled.Load():
			return ErrStreamStalled
		case o.Done == nil || done:
			return err
		case !delivered && err == nil:
			return errStreamEnded
		case !delivered:
			return err
		case err != nil:
			return &IncompleteStreamError{Reason: IncompleteCut, Events: content, Err: err}
		}
		return &IncompleteStreamError{Reason: IncompleteNoEnd, Events: content}
	}
	for e, err := range open(ctx) {
		if timer != nil {
			timer.Stop()
		}
		if err != nil || stalled.Load() {
			return delivered, false, end(err)
		}
		if o.Done != nil && o.Done(e) {
			done = true
		}
		if !delivered && o.Preamble != nil && o.Preamble(e) {
			held = append(held, e)
		} else {
			content++
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
		if timer != nil {
			timer.Reset(o.Stall)
		}
	}
	if err := end(nil); err != nil {
		return delivered, false, err
	}
	for _, h := range held {
		if !yield(h, nil) {
			return true, true, nil
		}
	}
	return delivered || len(held) > 0, false, nil
}
