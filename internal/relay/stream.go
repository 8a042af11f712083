package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

// streamReadSize is the least room for a read; the store grows past it for
// long events.
const streamReadSize = 4 << 10

// maxStreamEvent bounds one event of a stream handed over: an SDK's own
// reader refuses longer lines (openai-go's at 32 MiB), and a server that
// never ends one must not take the memory it likes.
const maxStreamEvent = 32 << 20

// errEventTooLong is the end of a stream whose event passed maxStreamEvent.
var errEventTooLong = errors.New("rebound: an event of the stream is longer than 32 MiB")

// errStreamCut is the end of a stream the watch cut.
var errStreamCut = errors.New("rebound: event stream cut")

// Handover is an event stream looked into, as it is handed over.
type Handover struct {
	// Head is what the look ahead read.
	Head sse.Head
	// Body is the rest of the stream.
	Body io.ReadCloser
	// Encoded says the stream is gzip or deflate: it passes through as
	// it comes.
	Encoded bool
	// Cancel ends the attempt's context, once the stream has ended.
	Cancel func()
	// Report is told once how the stream ended.
	Report Reporter
	// Guards bound the stream after content.
	Guards Guards
	// More continues a text answer cut after content; nil: never.
	More *Continuer
	// Secrets are the request's, kept out of an error event's data and
	// of a read error.
	Secrets scrub.Secrets
	// Errors makes the errors the reader sees.
	Errors *Errors
	// HandOnError hands on an error event after content before the
	// error that ends the stream, as the provider sent it but for the
	// credentials in it (see HandsOnErrorEvents).
	HandOnError bool
}

// HandOnErrorKey is the context key of the mark by which a caller that
// passes a stream on to a client of its own (rebound proxy) asks that an
// error event after content reach it: the client's SDK raises the
// provider's own error from it. A Go caller reads that error from the
// stream's end instead, and does not see the event. The mark's value is
// true.
type HandOnErrorKey struct{}

// HandsOnErrorEvents reports whether ctx carries the HandOnErrorKey mark.
func HandsOnErrorEvents(ctx context.Context) bool {
	on, _ := ctx.Value(HandOnErrorKey{}).(bool)
	return on
}

// Reporter is told how a stream handed over ended.
type Reporter interface{ Ended(End) }

// Guards bound a stream after its first content.
type Guards struct {
	// Stall bounds how long a read may wait for a byte; zero means no
	// bound.
	Stall time.Duration
	// MinRate, in content events a second, is the least pace over each
	// Window of time spent waiting for bytes; zero means no floor.
	MinRate float64
	Window  time.Duration
}

// Stream is an event stream handed to the caller: the bytes the look
// ahead read, then the rest. It tells its Reporter how it ended, once:
// Whole at its end, Broken if it broke, Dropped if the caller closed it
// early. A Stream is set up by Start, and used by pointer: its owner may
// keep it inside a struct of its own, the Reporter, so that handing a
// stream over costs one allocation.
//
// A stream whose dialect the tracker recognised is handed over whole
// events at a time, and ends honestly: with its end marker then io.EOF, or
// with an error Errors.Incomplete makes (after the error event that ended
// it, with Handover.HandOnError). Any other stream passes through as it
// comes.
type Stream struct {
	src    io.Reader // passed through: the look ahead's bytes, then body; tracked: body
	body   io.ReadCloser
	cancel func()
	report Reporter
	once   sync.Once
	errs   *Errors
	guards Guards

	tr   *sse.Tracker // nil: passed through as it comes
	w    *watch       // the guards after content; nil when tr is
	more *Continuer   // continues a text answer cut after content; nil: none
	// An error event after content is held back: the stream ends before
	// it, where errAt says (a stream offset; -1: none), with an error
	// that carries it, or a continuation takes over from there. With
	// handOn the event, which ends at errEnd, goes before that error:
	// held is what is left of it to give.
	errAt, errEnd, lastEnd int64
	handOn                 bool
	held                   []byte
	secrets                scrub.Secrets

	// Close may come from another goroutine while Read continues the
	// stream on a new body.
	mu       sync.Mutex // guards body, w and stopCont (once the stream is continued), closed and reported
	closed   bool
	reported bool
	stopCont func() // ends the continuation under way or spliced on; nil: none
	store    []byte // store[lo:hi] read and tracked, not yet given
	lo, hi   int
	base     int64 // the stream offset of store[lo]
	err      error // src's error, once it came
	ended    error // what Read returns once the stream is given out
}

// Start hands over h's stream, the head read put back in front, as b. A
// stream whose dialect the head does not show is passed through. The
// head's tracker, if it has one, goes on tracking: its events are not
// read again.
func (b *Stream) Start(h Handover) {
	read := h.Head.Read
	b.src, b.body, b.cancel, b.report, b.errs, b.guards, b.errAt = h.Body, h.Body, h.Cancel, h.Report, h.Errors, h.Guards, -1
	if h.Encoded {
		b.src = io.MultiReader(bytes.NewReader(read), h.Body)
		return
	}
	b.more, b.secrets, b.handOn = h.More, h.Secrets, h.HandOnError
	if b.tr = h.Head.Tracker; b.tr != nil {
		for _, e := range h.Head.Events {
			b.sawEvent(e.End, e.Kind)
		}
		b.tr.Each = b.sawEvent
	} else {
		b.tr = &sse.Tracker{Each: b.sawEvent}
		b.tr.Write(read)
	}
	if b.tr.Dialect() == sse.Unknown {
		b.tr, b.more = nil, nil
		b.src = io.MultiReader(bytes.NewReader(read), h.Body)
		return
	}
	if cap(read)-len(read) >= streamReadSize/2 {
		// The look ahead's own buffer, with room left: the stream goes
		// on in it, and nothing else holds it once handed over.
		b.store, b.hi = read[:cap(read)], len(read)
	} else {
		b.store = make([]byte, len(read)+streamReadSize)
		b.hi = copy(b.store, read)
	}
	b.w = newWatch(h.Body, h.Guards)
}

func (b *Stream) Read(p []byte) (int, error) {
	if b.tr == nil {
		n, err := b.src.Read(p)
		switch {
		case err == io.EOF:
			b.finish(Whole)
		case err != nil:
			b.finish(Broken)
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
			if len(b.held) > 0 {
				n := copy(p, b.held)
				b.held = b.held[n:]
				return n, nil
			}
			return 0, b.ended
		}
		if b.err != nil {
			b.ended = b.end(b.err)
			if b.ended != io.EOF && b.resume(b.ended) {
				b.ended, b.err = nil, nil
				continue
			}
			if b.handOn && b.errAt >= 0 {
				b.holdErrorEvent()
			}
			if b.ended == io.EOF {
				b.finish(Whole)
			} else {
				b.finish(Broken)
			}
			continue
		}
		b.fill()
	}
}

// fill reads the next bytes of the stream and tracks them.
func (b *Stream) fill() {
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
				b.w.cut(Cut)
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
		b.w.cut(TooSlow)
		b.err = errStreamCut
	}
}

// end decides what Read returns once the stream's whole events are given
// out, err being what broke or ended it: io.EOF if the answer is whole,
// else the error of an incomplete stream.
func (b *Stream) end(err error) error {
	if r := b.w.cutBy(); r != 0 {
		return b.incomplete(r, nil)
	}
	if r, inner, ok := b.errs.Reason(err); ok { // a continuation's own end says why
		return b.incomplete(r, inner)
	}
	switch {
	case b.tr.Ended(), b.tr.Finished():
		return io.EOF
	case b.tr.Errored():
		var ev error
		if name, data, ok := b.tr.ErrorEvent(); ok {
			ev = b.errs.Event(name, data, b.secrets)
		}
		return b.incomplete(ErrorEvent, ev)
	case err == io.EOF:
		return b.incomplete(NoEnd, nil)
	}
	return b.incomplete(Cut, b.errs.Redact(err, b.secrets))
}

// sawEvent is the tracker's Each. It makes b hold back an error event
// after content: the stream ends before it (or, handing it on, with it),
// with an error that carries it, or a continuation takes over from there
// (the caller must not see an error in the middle of an answer that goes
// on).
func (b *Stream) sawEvent(end int64, k sse.Kind) {
	if k == sse.Error && b.errAt < 0 {
		b.errAt, b.errEnd = b.lastEnd, end
	}
	b.lastEnd = end
}

// holdErrorEvent makes the error event held back, scrubbed, the bytes
// Read gives before the stream's end. Every event before it has been
// given: the store begins with it.
func (b *Stream) holdErrorEvent() {
	end := b.lo + int(b.errEnd-b.errAt)
	if end < b.hi && b.store[end-1] == '\r' && b.store[end] == '\n' {
		end++ // the tracker ends an event at its blank line's CR; its LF came with it
	}
	b.held = b.secrets.Bytes(b.store[b.lo:end])
}

// incomplete is the error of a stream handed over that ended before its
// answer was whole (resume may yet continue it).
func (b *Stream) incomplete(r Reason, err error) error {
	return b.errs.Incomplete(r, b.tr.Events(), b.tr.TextBytes(), err)
}

func (b *Stream) Close() error {
	b.mu.Lock()
	b.closed = true
	body := b.body
	b.mu.Unlock()
	err := body.Close()
	b.finish(Dropped)
	return err
}

// tell tells the Reporter how the stream ended, if nothing has yet.
func (b *Stream) tell(e End) {
	b.mu.Lock()
	told := b.reported
	b.reported = true
	b.mu.Unlock()
	if !told {
		b.report.Ended(e)
	}
}

func (b *Stream) finish(e End) {
	b.once.Do(func() {
		b.mu.Lock()
		w, stopCont := b.w, b.stopCont
		b.mu.Unlock()
		if stopCont != nil {
			stopCont()
		}
		w.stop()
		b.tell(e)
		b.cancel()
	})
}
