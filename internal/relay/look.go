package relay

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/sse"
)

// The failures of a look ahead that gave up waiting: ErrSilent when the
// stream sent nothing for its silence bound, ErrLate when its first
// content took longer than its first-token bound. The root reports both
// as a stall.
var (
	ErrSilent = errors.New("relay: event stream silent before any content")
	ErrLate   = errors.New("relay: no content within the first-token bound")
)

// Look says how an event stream is looked into before it is handed over.
type Look struct {
	// Bytes bounds how much of the stream is read looking for content.
	Bytes int
	// Silence bounds how long the stream may send not a byte.
	Silence time.Duration
	// FirstToken bounds how long it may take to its first content; zero
	// means no bound.
	FirstToken time.Duration
	// MaxEvent bounds the data kept of an error event.
	MaxEvent int
}

// LooksInto reports whether resp, an attempt's response, is looked into
// before it is handed over (Look.Head): an event stream answered 200 is
// read up to its first content, so that a stream that fails before it can
// be retried. Such a response is handed over with its first content in
// hand.
func LooksInto(resp *http.Response) bool {
	return resp.StatusCode == http.StatusOK && sse.IsStream(resp.Header)
}

// Head reads resp, an event stream, up to its first content event, and
// returns the bytes read, as they came (with the tracker that read them,
// unless they were encoded), and the stream's failure if it failed before
// any content: an *sse.ErrorEvent, sse.ErrEnded, ErrSilent, ErrLate, or
// the read error. A stream silent for l.Silence before its first content
// event (not a byte, not a keep-alive) has its body closed; one that keeps
// sending, however slow to its answer, is not silent, unless its first
// content takes longer than l.FirstToken. A gzip or deflate stream (as a
// request that set Accept-Encoding itself gets) is decoded to be looked
// into, and handed over encoded.
func (l Look) Head(resp *http.Response) (sse.Head, error) {
	k := &looking{l: l, resp: resp, body: heardBody{r: resp.Body, start: time.Now()}}
	first := l.Silence
	if l.FirstToken > 0 {
		first = min(first, l.FirstToken)
	}
	// One timer keeps both bounds: it wakes at the nearer, and sleeps
	// again until the next while neither is passed.
	k.timer = time.AfterFunc(first, k.wake)
	defer k.timer.Stop()
	head, err := l.peek(resp, &k.body)
	if !k.state.CompareAndSwap(lookingAhead, lookDone) {
		if k.state.Load() == lookLate {
			return head, ErrLate
		}
		return head, ErrSilent
	}
	return head, err
}

// The states of a look ahead. One state decides the race between its
// timer and the look ahead itself: whoever moves it first wins, so a body
// handed over is never closed.
const (
	lookingAhead int32 = iota
	lookDone
	lookSilent
	lookLate
)

// looking is a look ahead under its bounds.
type looking struct {
	l     Look
	resp  *http.Response
	body  heardBody
	state atomic.Int32
	timer *time.Timer
}

// wake runs on the timer: it gives the look ahead up if a bound has
// passed (closing the body unblocks its read), else sleeps until the
// nearer bound could pass.
func (k *looking) wake() {
	if k.state.Load() != lookingAhead {
		return // decided: the timer is not to wake again
	}
	took := time.Since(k.body.start)
	if k.l.FirstToken > 0 && took >= k.l.FirstToken {
		if k.state.CompareAndSwap(lookingAhead, lookLate) {
			k.resp.Body.Close()
		}
		return
	}
	quiet := k.body.silence()
	if quiet >= k.l.Silence {
		if k.state.CompareAndSwap(lookingAhead, lookSilent) {
			k.resp.Body.Close()
		}
		return
	}
	next := k.l.Silence - quiet
	if k.l.FirstToken > 0 {
		next = min(next, k.l.FirstToken-took)
	}
	k.timer.Reset(next)
}

// peek reads body, resp's, up to its first content event: decoded if resp
// is encoded, and returns the bytes read as they came, with their tracker
// only if they were not encoded.
func (l Look) peek(resp *http.Response, body io.Reader) (sse.Head, error) {
	if resp.Uncompressed {
		return sse.Peek(body, l.Bytes, l.MaxEvent)
	}
	var raw bytes.Buffer
	decoded, err := decoder(resp.Header.Get("Content-Encoding"), io.TeeReader(body, &raw))
	switch {
	case decoded == nil && err == nil:
		return sse.Peek(body, l.Bytes, l.MaxEvent)
	case errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrHeader):
		return sse.Head{Read: raw.Bytes()}, nil // not what its header says: the caller's to read
	case err == io.EOF:
		return sse.Head{Read: raw.Bytes()}, sse.ErrEnded
	case err != nil:
		return sse.Head{Read: raw.Bytes()}, err
	}
	_, err = sse.Peek(decoded, l.Bytes, l.MaxEvent)
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
