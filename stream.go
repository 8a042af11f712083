package rebound

import (
	"context"
	"iter"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
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
//
// Under p.Hedge, an attempt that has yielded nothing past its preamble
// after the hedge delay gets a second beside it (see Hedge), and the
// stream that reaches content first is the one the caller reads. Each
// attempt's open, and its stream up to its first content, then runs in a
// goroutine of its own.
func StreamWith[E any](ctx context.Context, p Policy, open func(context.Context) iter.Seq2[E, error], o StreamOptions[E]) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		var e engine
		e.init(ctx, &p, "")
		e.loop.sideEffects = callctx.SideEffects(ctx)
		key := callctx.Target(ctx)
		var (
			delivered, stopped bool
			failure            error
		)
		gaveUp := e.run(nil, func(n int) outcome {
			s, head := hedged(&e, n, key, attempterFunc[*streamTry[E]](func(ctx context.Context, end func(), _ bool) (*streamTry[E], outcome) {
				actx, settle, refused := admit(ctx, nil)
				if refused != nil {
					end()
					return nil, *refused
				}
				s := startStream(actx, open, o, end)
				s.settle = settle
				headed := false
				defer func() {
					if !headed { // open or its stream panicked
						s.err = errPanicked
						s.close()
					}
				}()
				s.err = s.head()
				headed = true
				return s, outcome{err: s.err}
			}), (*streamTry[E]).close)
			if head.err != nil {
				s.close() // nil when the guard refused it
				delivered, stopped, failure = false, false, head.err
				return head
			}
			delivered, stopped, failure = s.deliver(yield, &e.held)
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

// streamTry is one attempt's stream, read by pulling: up to its first
// content event (head), perhaps in a hedged race, and then into the
// caller's loop (deliver).
type streamTry[E any] struct {
	o       StreamOptions[E]
	next    func() (E, error, bool)
	stop    func()
	end     func()                      // ends the attempt's context
	settle  func(*http.Response, error) // tells the context's Guard the attempt is over
	err     error                       // the attempt's failure, once known
	timer   *time.Timer
	stalled atomic.Bool
	pulled  bool // an event was asked for: later waits arm the timer afresh

	held    []E // the preamble, held back until the first other event
	first   E   // the first content event, once head has read it
	found   bool
	content int  // events past the preamble
	done    bool // the Done event came
	// delivered says an event reached the caller.
	delivered bool
}

// startStream opens an attempt's stream under ctx; end ends ctx.
func startStream[E any](ctx context.Context, open func(context.Context) iter.Seq2[E, error], o StreamOptions[E], end func()) *streamTry[E] {
	s := &streamTry[E]{o: o, end: end, settle: noEnd}
	if o.Stall > 0 {
		actx, cancel := context.WithCancelCause(ctx)
		ctx = actx
		s.end = stack(func() { cancel(nil) }, end)
		// Running from now: open itself may wait on the provider (an
		// SDK sends the request before it returns the stream).
		s.timer = time.AfterFunc(o.Stall, func() {
			s.stalled.Store(true)
			cancel(ErrStreamStalled)
		})
	}
	s.next, s.stop = iter.Pull2(open(ctx))
	return s
}

// pull returns the stream's next event, or its error, or ok false at its
// end. The stall bound covers the wait, and only the wait: time in the
// caller's loop body does not count. The first wait's bound runs from the
// attempt's start.
func (s *streamTry[E]) pull() (ev E, err error, ok bool) {
	if s.timer != nil && s.pulled && !s.stalled.Load() {
		s.timer.Reset(s.o.Stall)
	}
	s.pulled = true
	ev, err, ok = s.next()
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.stalled.Load() && ok {
		err = ErrStreamStalled
	}
	return ev, err, ok
}

// head reads the stream up to its first content event, holding the
// preamble back; nil means it came, or the stream ended cleanly where an
// end is whole (after preamble alone, with no Done to wait for, or after
// Done).
func (s *streamTry[E]) head() error {
	for {
		ev, err, ok := s.pull()
		switch {
		case !ok:
			return s.failure(nil)
		case err != nil:
			return s.failure(err)
		}
		if s.o.Done != nil && s.o.Done(ev) {
			s.done = true
		}
		if s.o.Preamble == nil || !s.o.Preamble(ev) {
			s.first, s.found = ev, true
			return nil
		}
		s.held = append(s.held, ev)
	}
}

// deliver yields the held preamble and the rest of the stream to the
// caller, and returns whether any event reached the caller, whether the
// caller stopped asking, and the stream's failure (nil if it ended whole
// or the caller stopped). While the caller's code runs, l says so. It
// closes the stream.
func (s *streamTry[E]) deliver(give func(E, error) bool, l *lease) (delivered, stopped bool, failure error) {
	defer func() {
		s.err = failure
		s.close()
	}()
	yield := func(e E, err error) bool {
		s.delivered = true
		l.caller = true
		more := give(e, err)
		l.caller = false
		return more
	}
	if s.found {
		s.content++
	}
	for _, h := range s.held {
		if !yield(h, nil) {
			return true, true, nil
		}
	}
	s.held = nil
	if !s.found {
		return s.delivered, false, nil // ended whole after preamble alone
	}
	if !yield(s.first, nil) {
		return true, true, nil
	}
	for {
		ev, err, ok := s.pull()
		switch {
		case !ok:
			return true, false, s.failure(nil)
		case err != nil:
			return true, false, s.failure(err)
		}
		if s.o.Done != nil && s.o.Done(ev) {
			s.done = true
		}
		s.content++
		if !yield(ev, nil) {
			return true, true, nil
		}
	}
}

// failure is the attempt's error once its stream stops with err (nil: a
// clean end); nil when that end is whole.
func (s *streamTry[E]) failure(err error) error {
	switch {
	case s.stalled.Load() && s.delivered:
		return &IncompleteStreamError{Reason: IncompleteStalled, Events: s.content}
	case s.stalled.Load():
		return ErrStreamStalled
	case s.o.Done == nil || s.done:
		return err
	case !s.delivered && err == nil:
		return errStreamEnded
	case !s.delivered:
		return err
	case err != nil:
		return &IncompleteStreamError{Reason: IncompleteCut, Events: s.content, Err: err}
	}
	return &IncompleteStreamError{Reason: IncompleteNoEnd, Events: s.content}
}

// close stops the stream and ends its context; it may be called again.
func (s *streamTry[E]) close() {
	if s == nil {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.stop()
	s.end()
	s.settle(nil, s.err)
	s.settle = noEnd
}
