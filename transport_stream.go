package rebound

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/sse"
)

// ErrStreamStalled is the failure of an event stream that went silent for
// the Transport's StreamLookahead before any content. It is transient.
var ErrStreamStalled = errors.New("rebound: event stream went silent before any content")

// errStreamEnded is the failure of an event stream that ended before any
// content: the provider gave up mid-answer.
var errStreamEnded = fmt.Errorf("rebound: event stream ended before any content: %w", io.ErrUnexpectedEOF)

func isEventStream(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// peekStream reads an event stream up to its first content event (see
// sse.Peek) and says how it failed before any, in rebound's terms: a
// *StreamError, errStreamEnded, or the read error.
func peekStream(body io.Reader, limit int) ([]byte, error) {
	read, err := sse.Peek(body, limit, MaxErrorBody)
	var ev *sse.ErrorEvent
	switch {
	case errors.As(err, &ev):
		return read, &StreamError{Event: ev.Name, Data: ev.Data}
	case err == sse.ErrEnded:
		return read, errStreamEnded
	}
	return read, err
}

// lookahead peeks into an event-stream response before the Transport
// hands it over: it returns the bytes read, as they came, and the stream's
// failure, if it failed before any content. A stream silent for the
// Transport's StreamLookahead before its first content event (not a byte,
// not a keep-alive) has its body closed and fails with ErrStreamStalled;
// one that keeps sending, however slow to its answer, is not stalled. A
// gzip or deflate stream (as a request that set Accept-Encoding itself
// gets) is decoded to be looked into, and handed over encoded.
func (t *Transport) lookahead(resp *http.Response) ([]byte, error) {
	limit, wait := t.StreamLookaheadBytes, t.StreamLookahead
	if limit <= 0 {
		limit = defaultStreamLookaheadBytes
	}
	if wait <= 0 {
		wait = defaultStreamLookahead
	}
	// One state decides the race between the timer and the look ahead:
	// whoever moves it first wins, so a body handed over is never closed.
	const (
		looking int32 = iota
		done
		stalled
	)
	var state atomic.Int32
	body := &heardBody{r: resp.Body, start: time.Now()}
	var timer *time.Timer
	timer = time.AfterFunc(wait, func() {
		if silent := body.silence(); silent < wait {
			timer.Reset(wait - silent)
			return
		}
		if state.CompareAndSwap(looking, stalled) {
			resp.Body.Close() // unblocks the read below
		}
	})
	defer timer.Stop()
	read, err := t.peek(resp, body, limit)
	if !state.CompareAndSwap(looking, done) {
		return read, ErrStreamStalled
	}
	return read, err
}

// peek reads body, resp's, up to its first content event: decoded if resp
// is encoded, and returns the bytes read as they came.
func (t *Transport) peek(resp *http.Response, body io.Reader, limit int) ([]byte, error) {
	if resp.Uncompressed {
		return peekStream(body, limit)
	}
	var raw bytes.Buffer
	decoded, err := decoder(resp.Header.Get("Content-Encoding"), io.TeeReader(body, &raw))
	switch {
	case decoded == nil && err == nil:
		return peekStream(body, limit)
	case errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrHeader):
		return raw.Bytes(), nil // not what its header says: the caller's to read
	case err == io.EOF:
		return raw.Bytes(), errStreamEnded
	case err != nil:
		return raw.Bytes(), err
	}
	_, err = peekStream(decoded, limit)
	return raw.Bytes(), err
}

// heardBody is a body read under a watch for silence: it notes when it
// last gave bytes.
type heardBody struct {
	r     io.Reader
	start time.Time
	heard atomic.Int64 // nanoseconds from start to the last read that gave bytes
}

func (b *heardBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.heard.Store(int64(time.Since(b.start)))
	}
	return n, err
}

// silence is how long the body has given nothing.
func (b *heardBody) silence() time.Duration {
	return time.Since(b.start) - time.Duration(b.heard.Load())
}

// streamBody is an event stream handed to the caller: the bytes the look
// ahead read, then the rest. It holds the breaker's permit, if any, and
// hands it back once, when the stream ends: success at its end, failure if
// it broke, nothing learned if the caller closed it early.
type streamBody struct {
	io.Reader
	body   io.ReadCloser
	cancel func()
	held   lease
	once   sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	switch {
	case err == io.EOF:
		b.finish(OutcomeSuccess)
	case err != nil:
		b.finish(OutcomeFailure)
	}
	return n, err
}

func (b *streamBody) Close() error {
	err := b.body.Close()
	b.finish(OutcomeIgnored)
	return err
}

func (b *streamBody) finish(o Outcome) {
	b.once.Do(func() {
		b.held.done(o)
		b.cancel()
	})
}
