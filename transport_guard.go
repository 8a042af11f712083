package rebound

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

// Defaults of the guards on a stream handed over.
const (
	// defaultStreamStall matches defaultStreamLookahead: a provider that
	// has begun to answer sends tokens, or at least keep-alives, far more
	// often; a connection silent that long is dead, and with no bound the
	// caller would wait on it for ever (http.DefaultTransport has no read
	// timeout).
	defaultStreamStall      = 2 * time.Minute
	defaultStreamRateWindow = 30 * time.Second
	streamReadSize          = 4 << 10 // the least room for a read; the store grows past it for long events
)

// maxStreamEvent bounds one event of a stream handed over: an SDK's own
// reader refuses longer lines (openai-go's at 32 MiB), and a server that
// never ends one must not take the memory it likes.
const maxStreamEvent = 32 << 20

// errEventTooLong is the end of a stream whose event passed maxStreamEvent.
var errEventTooLong = errors.New("rebound: an event of the stream is longer than 32 MiB")

// errStreamCut is the end of a stream the watch cut.
var errStreamCut = errors.New("rebound: event stream cut")

// streamBody is an event stream handed to the caller: the bytes the look
// ahead read, then the rest. It holds the breaker's permit, if any, and
// hands it back once, when the stream ends: success at its end, failure if
// it broke, nothing learned if the caller closed it early.
//
// A stream whose dialect the tracker recognised is handed over whole
// events at a time, and ends honestly: with its end marker then io.EOF, or
// with what incomplete decides. Any other stream passes through as it
// comes.
type streamBody struct {
	src    io.Reader // the look ahead's bytes, then body
	body   io.ReadCloser
	cancel func()
	held   lease
	once   sync.Once

	tr   *sse.Tracker // nil: passed through as it comes
	w    *watch       // the guards after content; nil when tr is
	more *continuer   // continues a text answer cut after content; nil: none
	// An error event after content is never handed on: the stream ends
	// before it, where errAt says (a stream offset; -1: none), with an
	// *IncompleteStreamError that carries it, or a continuation takes
	// over from there.
	errAt, lastEnd int64
	secrets        scrub.Secrets

	// Close may come from another goroutine while Read continues the
	// stream on a new body.
	mu       sync.Mutex // guards body, w and stopCont (once the stream is continued) and closed
	closed   bool
	stopCont func() // ends the continuation under way or spliced on; nil: none
	store    []byte // store[lo:hi] read and tracked, not yet given
	lo, hi   int
	base     int64 // the stream offset of store[lo]
	err      error // src's error, once it came
	ended    error // what Read returns once the stream is given out
}

// newStreamBody hands over resp's stream, the head read put back in front,
// to be continued by more if it is cut (nil: never); secrets are the
// request's, kept out of an error event's data. A stream whose dialect
// the head does not show is passed through. The head's tracker, if it
// has one, goes on tracking: its events are not read again.
func (t *Transport) newStreamBody(head sse.Head, body io.ReadCloser, cancel func(), held lease, encoded bool, more *continuer, secrets scrub.Secrets) *streamBody {
	read := head.Read
	b := &streamBody{src: io.MultiReader(bytes.NewReader(read), body), body: body, cancel: cancel, held: held, errAt: -1}
	if encoded {
		return b
	}
	b.more, b.secrets = more, secrets
	if b.tr = head.Tracker; b.tr != nil {
		for _, e := range head.Events {
			b.sawEvent(e.End, e.Kind)
		}
		b.tr.Each = b.sawEvent
	} else {
		b.tr = &sse.Tracker{Each: b.sawEvent}
		b.tr.Write(read)
	}
	if b.tr.Dialect() == sse.Unknown {
		b.tr, b.more = nil, nil
		return b
	}
	b.src = body
	b.store = make([]byte, max(streamReadSize, len(read)+streamReadSize))
	b.hi = copy(b.store, read)
	b.w = t.newWatch(body)
	return b
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.tr == nil {
		n, err := b.src.Read(p)
		switch {
		case err == io.EOF:
			b.finish(OutcomeSuccess)
		case err != nil:
			b.finish(OutcomeFailure)
		}
		return n, err
	}
	for {
		limit := b.tr.Complete()
		if b.errAt >= 0 {
			limit = b.errAt
		}
		if ready := int(limit - b.base); ready > 0 {
			n := copy(p, b.store[b.lo:b.lo+ready])
			b.lo += n
			b.base += int64(n)
			return n, nil
		}
		if b.ended != nil {
			return 0, b.ended
		}
		if b.err != nil {
			b.ended = b.end(b.err)
			if b.ended != io.EOF && b.resume(b.ended) {
				b.ended, b.err = nil, nil
				continue
			}
			if b.ended == io.EOF {
				b.finish(OutcomeSuccess)
			} else {
				b.finish(OutcomeFailure)
			}
			continue
		}
		b.fill()
	}
}

// fill reads the next bytes of the stream and tracks them.
func (b *streamBody) fill() {
	switch {
	case b.lo == b.hi:
		b.lo, b.hi = 0, 0
	case len(b.store)-b.hi < streamReadSize/2: // room for a read: move the partial event down, or grow
		if b.lo > 0 {
			b.hi = copy(b.store, b.store[b.lo:b.hi])
			b.lo = 0
		}
		if len(b.store)-b.hi < streamReadSize/2 {
			if b.hi >= maxStreamEvent { // one event that never ends
				b.w.cut(IncompleteCut)
				b.err = errEventTooLong
				return
			}
			grow := min(len(b.store), maxStreamEvent+streamReadSize-len(b.store))
			b.store = append(b.store[:b.hi], make([]byte, grow)...)
			b.store = b.store[:cap(b.store)]
		}
	}
	n, err := b.w.read(b.src, b.store[b.hi:])
	b.tr.Write(b.store[b.hi : b.hi+n])
	b.hi += n
	switch {
	case err != nil:
		b.err = err
	case b.w.tooSlow(b.tr.Events()):
		b.w.cut(IncompleteTooSlow)
		b.err = errStreamCut
	}
}

// end decides what Read returns once the stream's whole events are given
// out, err being what broke or ended it: io.EOF if the answer is whole,
// else an *IncompleteStreamError.
func (b *streamBody) end(err error) error {
	if r := b.w.cutBy(); r != 0 {
		return b.incomplete(r, nil)
	}
	var inner *IncompleteStreamError
	if errors.As(err, &inner) { // a continuation's own end says why
		return b.incomplete(inner.Reason, inner.Err)
	}
	switch {
	case b.tr.Ended(), b.tr.Finished():
		return io.EOF
	case b.tr.Errored():
		var ev error
		if name, data, ok := b.tr.ErrorEvent(); ok {
			ev = &StreamError{Event: name, Data: b.secrets.CutBytes(data, MaxErrorBody)}
		}
		return b.incomplete(IncompleteErrorEvent, ev)
	case err == io.EOF:
		return b.incomplete(IncompleteNoEnd, nil)
	}
	return b.incomplete(IncompleteCut, redactError(err, b.secrets))
}

// sawEvent is the tracker's Each. It makes b hold back an error event
// after content: the stream ends before it, with an *IncompleteStreamError
// that carries it, or a continuation takes over from there (the caller
// must not see an error in the middle of an answer that goes on).
func (b *streamBody) sawEvent(end int64, k sse.Kind) {
	if k == sse.Error && b.errAt < 0 {
		b.errAt = b.lastEnd
	}
	b.lastEnd = end
}

// incomplete is the error of a stream handed over that ended before its
// answer was whole (resume may yet continue it).
func (b *streamBody) incomplete(r IncompleteReason, err error) error {
	return &IncompleteStreamError{Reason: r, Events: b.tr.Events(), Text: b.tr.TextBytes(), Err: err}
}

func (b *streamBody) Close() error {
	b.mu.Lock()
	b.closed = true
	body := b.body
	b.mu.Unlock()
	err := body.Close()
	b.finish(OutcomeIgnored)
	return err
}

func (b *streamBody) finish(o Outcome) {
	b.once.Do(func() {
		b.mu.Lock()
		w, stopCont := b.w, b.stopCont
		b.mu.Unlock()
		if stopCont != nil {
			stopCont()
		}
		w.stop()
		b.held.done(o)
		b.cancel()
	})
}

// watch guards a stream after content: it closes body when a read waits
// longer than stall for bytes, and judges the rate of content events over
// the time spent waiting for them.
type watch struct {
	body     io.Closer
	stall    time.Duration // zero: no stall bound
	start    time.Time
	timer    *time.Timer
	reading  atomic.Int64  // when the pending read began, from start; -1: none
	sleeping atomic.Bool   // the timer is not armed: the next read arms it
	reason   atomic.Uint32 // the IncompleteReason of a cut; zero: none

	// The rate floor, touched by Read only.
	minRate float64
	window  time.Duration
	waited  time.Duration // waiting for bytes in this window
	events  int           // content events before this window
}

func (t *Transport) newWatch(body io.Closer) *watch {
	w := &watch{body: body, start: time.Now(), stall: t.StreamStall, minRate: t.StreamMinRate, window: t.StreamRateWindow}
	w.reading.Store(-1)
	switch {
	case w.stall == 0:
		w.stall = defaultStreamStall
	case w.stall < 0:
		w.stall = 0
	}
	if w.window <= 0 {
		w.window = defaultStreamRateWindow
	}
	if w.stall > 0 {
		w.sleeping.Store(true) // armed by the first read
		w.timer = time.AfterFunc(w.stall, w.check)
		w.timer.Stop()
	}
	return w
}

// read reads r under the watch.
func (w *watch) read(r io.Reader, p []byte) (int, error) {
	began := time.Since(w.start)
	w.reading.Store(int64(began))
	if w.timer != nil && w.sleeping.CompareAndSwap(true, false) {
		w.timer.Reset(w.stall)
	}
	n, err := r.Read(p)
	w.reading.Store(-1)
	if w.minRate > 0 {
		w.waited += time.Since(w.start) - began
	}
	return n, err
}

// check runs on the timer: it cuts a read that has waited stall, or arms
// the timer for when the pending read will have; with no read pending it
// sleeps until the next.
func (w *watch) check() {
	if w.cutBy() != 0 {
		return
	}
	w.sleeping.Store(true)
	r := w.reading.Load()
	if r < 0 || !w.sleeping.CompareAndSwap(true, false) {
		return // the next read arms it
	}
	silent := time.Since(w.start) - time.Duration(r)
	if silent >= w.stall {
		w.cut(IncompleteStalled)
		return
	}
	w.timer.Reset(w.stall - silent)
}

// tooSlow reports whether the window just ended with fewer content events
// than the floor; events is the count so far.
func (w *watch) tooSlow(events int) bool {
	if w.minRate <= 0 || w.waited < w.window {
		return false
	}
	slow := float64(events-w.events) < w.minRate*w.window.Seconds()
	w.waited, w.events = 0, events
	return slow
}

// cut closes the stream, once, for reason r.
func (w *watch) cut(r IncompleteReason) {
	if w.reason.CompareAndSwap(0, uint32(r)) {
		w.body.Close()
	}
}

func (w *watch) cutBy() IncompleteReason { return IncompleteReason(w.reason.Load()) }

func (w *watch) stop() {
	if w != nil && w.timer != nil {
		w.timer.Stop()
	}
}
