package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/continuation"
	"github.com/rebound-go/rebound/internal/sse"
)

// continuingKey marks the context of a continuation's request: its own
// stream is not continued from inside it, but by the stream it is spliced
// onto, which knows the whole text delivered.
type continuingKey struct{}

// Continuing reports whether ctx is a continuation's request's.
func Continuing(ctx context.Context) bool { return ctx.Value(continuingKey{}) != nil }

// Continuer continues a text answer whose stream was cut after content:
// it keeps what a continuation needs of the request that was cut.
type Continuer struct {
	// Max is how many continuations are made at most.
	Max int
	// Req is the request that was cut, and Body gets its body again.
	Req  *http.Request
	Body func() (io.ReadCloser, error)
	// Dialect is the API Req speaks.
	Dialect continuation.Dialect
	// Send sends a continuation's request, the made-th, for a stream cut
	// by cut: a call of its own, retried and reported as the caller's
	// Transport would.
	Send func(req *http.Request, made int, cut error) (*http.Response, error)

	made int // continuations made so far
}

// errNoContinuation says a cut stream is not continued.
var errNoContinuation = errors.New("rebound: no continuation")

// EndsContinuation reports whether head, the stream of a continuation's
// request (ctx's) that ended before any content, ended as an answer ends
// (its end marker, or a finish reason): the text delivered before the cut
// was the whole answer, and the continuation brings its end, to be spliced
// on rather than retried.
func EndsContinuation(ctx context.Context, head sse.Head) bool {
	return Continuing(ctx) && head.Tracker != nil && (head.Tracker.Ended() || head.Tracker.Finished())
}

// next opens, on ctx, the continuation of the answer cut by cut, whose text
// so far (in stream dialect d) is text: the new stream's body, and the
// whitespace its text begins with that the caller has already had. Until
// the new stream's headers come, it is bounded by stall, as a stall is
// (zero: no bound).
func (c *Continuer) next(ctx context.Context, cancel func(), stall time.Duration, cut error, d sse.Dialect, text []byte) (io.ReadCloser, string, error) {
	if c == nil || c.made >= c.Max || ctx.Err() != nil ||
		!(d == sse.Chat && c.Dialect == continuation.OpenAIChat || d == sse.Anthropic && c.Dialect == continuation.AnthropicMessages) {
		return nil, "", errNoContinuation
	}
	rc, err := c.Body()
	if err != nil {
		return nil, "", err
	}
	raw, err := io.ReadAll(io.LimitReader(rc, DefaultReplay+1))
	rc.Close()
	if err != nil || len(raw) > DefaultReplay {
		return nil, "", errNoContinuation
	}
	cont, err := continuation.Continue(c.Dialect, raw, string(text))
	if err != nil {
		return nil, "", err
	}
	c.made++
	req := c.Req.Clone(context.WithValue(ctx, continuingKey{}, true))
	req.Body = io.NopCloser(bytes.NewReader(cont.Body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cont.Body)), nil }
	req.ContentLength = int64(len(cont.Body))
	req.Header.Set("Content-Length", strconv.Itoa(len(cont.Body)))
	if stall > 0 {
		waiting := time.AfterFunc(stall, cancel)
		defer waiting.Stop()
	}
	resp, err := c.Send(req, c.made, cut)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK || !sse.IsStream(resp.Header) {
		resp.Body.Close()
		return nil, "", fmt.Errorf("rebound: the continuation was answered %s, not a stream", resp.Status)
	}
	return resp.Body, cont.Trimmed, nil
}

// resume carries on a stream cut after content with its continuation,
// if it has one: the caller, who has had every complete event of the cut
// stream, reads the continuation's content events next. It reports
// whether it did; ended is how the stream ended. A stream the caller has
// closed, or whose context is done, is not continued, nor one whose
// continuation answered with other than text.
func (b *Stream) resume(ended error) bool {
	if b.more == nil || !b.tr.TextOnly() || !b.tr.TextKept() || b.tr.TextBytes() == 0 {
		return false
	}
	if r, _, ok := b.errs.Reason(ended); !ok || r == NotText {
		return false
	}
	ctx, cancel := context.WithCancel(b.more.Req.Context())
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel()
		return false
	}
	if b.stopCont != nil {
		b.stopCont() // the continuation before this one, cut in its turn
	}
	b.stopCont = cancel // Close ends the continuation, under way or spliced on
	b.mu.Unlock()
	next, trim, err := b.more.next(ctx, cancel, b.guards.Stall, ended, b.tr.Dialect(), b.tr.Text())
	if err != nil {
		return false
	}
	b.mu.Lock()
	if b.closed { // the caller has gone: so does the continuation
		b.mu.Unlock()
		next.Close()
		return false
	}
	old, oldWatch := b.body, b.w
	b.body = next
	b.w = newWatch(next, b.guards)
	b.mu.Unlock()
	oldWatch.stop()
	old.Close()
	// The provider cut this attempt: its breaker hears so now; the
	// continuation is a call of its own.
	b.tell(Broken)
	// What the caller has not had of the cut stream (half an event, an
	// error event held back) is dropped.
	b.tr.Rewind(b.base)
	b.hi = b.lo
	b.errAt, b.errEnd, b.lastEnd = -1, -1, b.base
	id, created := b.tr.ChatID()
	s := &splice{r: next, dialect: b.tr.Dialect(), trim: trim, id: id, created: created, open: -1, notText: b.errs.Incomplete(NotText, 0, 0, nil)}
	if n, open := b.tr.Blocks(); open {
		s.open, s.shift = n-1, n-1
	} else {
		s.shift = n
	}
	b.src = s
	return true
}
