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
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/firsttoken"
	"github.com/rebound-go/rebound/internal/sse"
)

// ErrStreamStalled is the failure of an event stream that went silent for
// the Transport's StreamLookahead before any content. It is transient.
var ErrStreamStalled = errors.New("rebound: event stream went silent before any content")

// errStreamEnded is the failure of an event stream that ended before any
// content: the provider gave up mid-answer.
var errStreamEnded = fmt.Errorf("rebound: event stream ended before any content: %w", io.ErrUnexpectedEOF)

// contentWatcher is a body of Base's that wants to hear when its event
// stream's first content came (see Transport).
type contentWatcher interface{ ContentArrived() }

func isEventStream(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// peekStream reads an event stream up to its first content event (see
// sse.Peek) and says how it failed before any, in rebound's terms: a
// *StreamError, errStreamEnded, or the read error.
func peekStream(body io.Reader, limit int) (sse.Head, error) {
	head, err := sse.Peek(body, limit, MaxErrorBody)
	var ev *sse.ErrorEvent
	switch {
	case errors.As(err, &ev):
		return head, &StreamError{Event: ev.Name, Data: ev.Data}
	case err == sse.ErrEnded:
		return head, errStreamEnded
	}
	return head, err
}

// errFirstToken is the failure of an event stream whose first content
// event took longer than the Transport's first-token bound. It is a stall,
// and transient.
var errFirstToken = fmt.Errorf("rebound: no content within the first-token timeout: %w", ErrStreamStalled)

// lookahead peeks into an event-stream response before the Transport
// hands it over: it returns the bytes read, as they came (with the tracker
// that read them, unless they were encoded), and the stream's
// failure, if it failed before any content. A stream silent for the
// Transport's StreamLookahead before its first content event (not a byte,
// not a keep-alive) has its body closed and fails with ErrStreamStalled;
// one that keeps sending, however slow to its answer, is not stalled,
// unless its first content takes longer than firstToken (zero: no bound).
// A gzip or deflate stream (as a request that set Accept-Encoding itself
// gets) is decoded to be looked into, and handed over encoded.
func (t *Transport) lookahead(resp *http.Response, firstToken time.Duration) (sse.Head, error) {
	limit, wait := t.StreamLookaheadBytes, t.StreamLookahead
	if limit <= 0 {
		limit = defaultStreamLookaheadBytes
	}
	if wait <= 0 {
		wait = defaultStreamLookahead
	}
	// One state decides the race between the timers and the look ahead:
	// whoever moves it first wins, so a body handed over is never closed.
	const (
		looking int32 = iota
		done
		stalled
		late
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
	if firstToken > 0 {
		deadline := time.AfterFunc(firstToken, func() {
			if state.CompareAndSwap(looking, late) {
				resp.Body.Close()
			}
		})
		defer deadline.Stop()
	}
	head, err := t.peek(resp, body, limit)
	if !state.CompareAndSwap(looking, done) {
		if state.Load() == late {
			return head, errFirstToken
		}
		return head, ErrStreamStalled
	}
	return head, err
}

// peek reads body, resp's, up to its first content event: decoded if resp
// is encoded, and returns the bytes read as they came, with their tracker
// only if they were not encoded.
func (t *Transport) peek(resp *http.Response, body io.Reader, limit int) (sse.Head, error) {
	if resp.Uncompressed {
		return peekStream(body, limit)
	}
	var raw bytes.Buffer
	decoded, err := decoder(resp.Header.Get("Content-Encoding"), io.TeeReader(body, &raw))
	switch {
	case decoded == nil && err == nil:
		return peekStream(body, limit)
	case errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrHeader):
		return sse.Head{Read: raw.Bytes()}, nil // not what its header says: the caller's to read
	case err == io.EOF:
		return sse.Head{Read: raw.Bytes()}, errStreamEnded
	case err != nil:
		return sse.Head{Read: raw.Bytes()}, err
	}
	_, err = peekStream(decoded, limit)
	return sse.Head{Read: raw.Bytes()}, err
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

// The adaptive first-token bound: factor × the percentile of the last
// tokenSamples first-token times, once firsttoken.MinSamples are known.
const (
	tokenSamples    = 64
	tokenPercentile = 0.9
	tokenFactor     = 3
)

// firstTokenBound is the first-token bound of a request to key (its target
// or host): zero for none.
func (t *Transport) firstTokenBound(key string) time.Duration {
	bound := t.FirstTokenTimeout
	if !t.FirstTokenAdaptive {
		return bound
	}
	p, ok := t.firstTokens.Percentile(key, tokenPercentile, firsttoken.MinSamples)
	if !ok {
		return bound
	}
	return max(bound, tokenFactor*p)
}

// firstTokenTook notes how long a stream to key took to its first content.
func (t *Transport) firstTokenTook(key string, d time.Duration) {
	if t.FirstTokenAdaptive {
		t.firstTokens.Add(key, d, tokenSamples)
	}
}
