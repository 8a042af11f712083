package rebound

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

// roundTrip is what one attempt of RoundTrip got: a response to hand
// over, or a failure.
type roundTrip struct {
	ok     *http.Response
	stream *lookedInto // ok is an event stream, looked into up to its first content
	failed failedAttempt
}

// lookedInto is an event stream read up to its first content, to be
// handed over.
type lookedInto struct {
	head    sse.Head // the bytes read, as they came, and what tracked them
	encoded bool     // gzip or deflate, passed through as it comes
	cancel  context.CancelFunc
}

// discard frees what r holds: a hedged race's loser.
func (r roundTrip) discard() {
	if r.ok != nil {
		r.ok.Body.Close()
	}
	if r.stream != nil {
		r.stream.cancel()
	}
	r.failed.discard()
}

// try makes one attempt with areq, whose context is within actx's (a
// per-attempt timeout's, ended by cancel, a Guard's), and judges its
// response; key names its target for first-token times, and settle tells
// the Guard what came of it. For a call with sideEffects, it notes whether
// a failed attempt provably never reached the server.
func (t *Transport) try(actx context.Context, req, areq *http.Request, cancel context.CancelFunc, key string, settle func(*http.Response, error), sideEffects bool) (roundTrip, outcome) {
	send, sent := areq, (*sentTrace)(nil)
	if sideEffects {
		send, sent = traceSent(areq)
	}
	resp, err := t.base().RoundTrip(send)
	var watcher contentWatcher // Base's own body, before a Guard's goes in front of it
	if resp != nil {
		watcher, _ = resp.Body.(contentWatcher)
	}
	settle(resp, err)
	headers := time.Now()
	timedOut := areq != req && attemptTimedOut(actx, areq.Context(), err)
	cur := failedAttempt{cancel: cancel}
	switch {
	case err != nil:
		cur.err = redactError(err, scrub.Of(req))
	case resp.StatusCode == http.StatusOK && isEventStream(resp):
		bound := t.firstTokenBound(key)
		head, failed := t.lookahead(resp, bound)
		if failed == errStreamEnded && endsContinuation(areq.Context(), head) {
			failed = nil
		}
		if failed == errFirstToken {
			// A stream cut at the bound took at least that long: noted,
			// so that a provider that has slowed for good raises the
			// bound rather than being cut for ever.
			t.firstTokenTook(key, bound)
		}
		if failed != nil {
			cur.resp, cur.body.raw, cur.err = resp, head.Read, failed
			if se, ok := failed.(*StreamError); ok {
				se.Data = scrub.Of(req).CutBytes(se.Data, MaxErrorBody)
			} else {
				cur.err = redactError(failed, scrub.Of(req))
			}
			// A stalled stream's body is closed: nothing to give back.
			cur.dead = errors.Is(failed, ErrStreamStalled)
			break // a failed attempt, like any other
		}
		t.firstTokenTook(key, time.Since(headers))
		if watcher != nil {
			watcher.ContentArrived()
		}
		encoded := !resp.Uncompressed && resp.Header.Get("Content-Encoding") != ""
		return roundTrip{ok: resp, stream: &lookedInto{head: head, encoded: encoded, cancel: cancel}}, outcome{}
	case resp.StatusCode < http.StatusBadRequest:
		// A per-attempt timeout runs until the body is read; a protocol
		// upgrade's body (a connection to write to as well) has none.
		if areq.Context() != req.Context() && resp.StatusCode != http.StatusSwitchingProtocols {
			resp.Body = &attemptBody{ReadCloser: resp.Body, cancel: cancel}
		}
		return roundTrip{ok: resp}, outcome{}
	default:
		cur.resp = resp
		cur.body = readErrorBody(resp, t.errorBodyTimeout())
		cur.err = httpError(resp, cur.body, scrub.Of(req))
	}
	o := outcome{err: cur.err, timedOut: timedOut}
	if sideEffects {
		if err != nil {
			o.unreached = sent.unreached(err)
		} else {
			o.unreached = refusal(resp.StatusCode)
		}
	}
	return roundTrip{failed: cur}, o
}

// stack returns a function that calls first and then second.
func stack(first, second func()) context.CancelFunc {
	return func() { first(); second() }
}

// failedAttempt is an attempt that failed: with a response (status 400 or
// above) or a transport error.
type failedAttempt struct {
	resp    *http.Response // nil after a transport error
	body    errorBody      // what was read of resp's body
	dead    bool           // resp's body was closed: give back the error, not resp
	cancel  context.CancelFunc
	err     error
	verdict Verdict
}

// discard closes the attempt's response, if any, and ends the attempt's
// context. A body read to its end has already freed its connection for
// reuse; one that has not (an error body longer than MaxErrorBody, an
// event stream after its error event) is closed as it is: draining it
// could wait on a server that never sends the rest.
func (f *failedAttempt) discard() {
	if f.resp != nil {
		f.resp.Body.Close()
	}
	if f.cancel != nil {
		f.cancel()
	}
	*f = failedAttempt{}
}

// giveBack ends a RoundTrip that gave up: with the attempt's response, its
// body put back together, if there is one; else with the give-up error.
// A body read whole is given back from memory, so that it stays readable
// after the attempt's context has ended.
func (f *failedAttempt) giveBack(stopped *GiveUpError) (*http.Response, error) {
	if f.resp == nil || f.dead {
		if f.resp != nil {
			f.resp.Body.Close()
		}
		f.cancel()
		return nil, stopped
	}
	resp := f.resp
	if f.body.whole {
		resp.Body.Close()
		f.cancel()
		resp.Body = io.NopCloser(bytes.NewReader(f.body.raw))
		return resp, nil
	}
	resp.Body = &attemptBody{
		ReadCloser: readCloser{Reader: io.MultiReader(bytes.NewReader(f.body.raw), resp.Body), Closer: resp.Body},
		cancel:     f.cancel,
	}
	return resp, nil
}

// requestBody says how a request's body is sent again.
type requestBody struct {
	get  func() (io.ReadCloser, error) // a fresh copy of the body; nil: none
	once bool                          // the body can be sent only once
	// closed says the request's own body was already closed (after it
	// was buffered).
	closed bool
}

// close closes req's body if nothing has: for a request given up before
// its first attempt was sent.
func (b requestBody) close(req *http.Request) {
	if req.Body != nil && !b.closed {
		req.Body.Close()
	}
}

// replayableBody prepares req's body for replay: GetBody if the request has
// one, else a buffer of up to MaxBufferedBody bytes. A larger body is sent
// once.
func (t *Transport) replayableBody(req *http.Request) (requestBody, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return requestBody{}, nil
	case req.GetBody != nil:
		return requestBody{get: req.GetBody}, nil
	}
	limit := t.MaxBufferedBody
	if limit == 0 {
		limit = defaultMaxBufferedBody
	}
	if limit < 0 {
		return requestBody{once: true}, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		req.Body.Close()
		return requestBody{}, fmt.Errorf("rebound: reading the request body to replay it: %w", err)
	}
	if int64(len(buf)) > limit {
		// Too large to keep: send what was read and the rest, once.
		rest := req.Body
		first := io.NopCloser(io.MultiReader(bytes.NewReader(buf), rest))
		return requestBody{once: true, get: func() (io.ReadCloser, error) {
			return readCloser{Reader: first, Closer: rest}, nil
		}}, nil
	}
	req.Body.Close()
	return requestBody{closed: true, get: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }}, nil
}

// attemptRequest returns the request of one attempt under ctx: req itself
// when it can go as it is, else a copy with a fresh body (for a request
// sent again) and a context of its own (ctx, under a per-attempt timeout if
// there is one). A protocol upgrade gets no per-attempt timeout: the
// connection it returns outlives any body. The error is GetBody's.
func attemptRequest(ctx context.Context, req *http.Request, body requestBody, again bool, timeout time.Duration) (*http.Request, context.CancelFunc, error) {
	if req.Header.Get("Upgrade") != "" {
		timeout = 0
	}
	fresh := body.get != nil && (again || req.GetBody == nil)
	if !fresh && timeout <= 0 && ctx == req.Context() {
		return req, noCancel, nil
	}
	var b io.ReadCloser
	if fresh {
		var err error
		if b, err = body.get(); err != nil {
			return nil, nil, fmt.Errorf("rebound: getting the request body again: %w", err)
		}
	}
	cancel := context.CancelFunc(noCancel)
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	areq := req.Clone(ctx)
	if fresh {
		areq.Body = b
		if body.once {
			areq.GetBody = nil
		} else if req.GetBody == nil {
			areq.GetBody = body.get
		}
	}
	return areq, cancel, nil
}

func noCancel() {}

type readCloser struct {
	io.Reader
	io.Closer
}

// attemptBody ends an attempt's context when its response body is fully
// read or closed, so a per-attempt timeout covers reading the body without
// cutting it off once RoundTrip has returned.
type attemptBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *attemptBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.cancel()
	}
	return n, err
}

func (b *attemptBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// redactError returns err with the request's credentials scrubbed from
// its message (a base transport may put the URL, key and all, in it);
// errors.Is and errors.As still reach err.
func redactError(err error, secrets scrub.Secrets) error {
	msg := err.Error()
	if scrubbed := secrets.String(msg); scrubbed != msg {
		return &redactedError{msg: scrubbed, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
