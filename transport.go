package rebound

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/scrub"
)

// Defaults of a zero Transport: how much of a request body without
// GetBody it buffers to replay it, how much of an event stream it reads
// looking for content, and how long such a stream may stay silent first.
const (
	defaultMaxBufferedBody      = 1 << 20
	defaultStreamLookaheadBytes = 64 << 10
	defaultStreamLookahead      = 2 * time.Minute
)

// Transport is an http.RoundTripper that retries requests under a Policy.
// Put it in the http.Client of any SDK (OpenAI, Anthropic, Gemini, or your
// own) and turn the SDK's own retries off:
//
//	client := &http.Client{Transport: &rebound.Transport{}}
//
// Every request is retried, POSTs included, since LLM calls are stateless,
// unless its context is marked WithSideEffects and it carries no
// Idempotency-Key header. A failed response (status 400 or above) is judged
// by ClassifyResponse (or Policy.Classifier, given an *HTTPError) from its
// status, headers and the first MaxErrorBody bytes of its body; a transport
// error by Classify.
//
// An event stream (a 200 with Content-Type text/event-stream) is looked
// into before it is handed over, up to its first content event: if what
// comes first is an in-band error event (a *StreamError: OpenAI's error
// chunk, Anthropic's overloaded_error), or the stream ends, breaks or goes
// silent before any content, the attempt failed and is retried like an
// HTTP error.
// Otherwise the SDK gets the stream with the bytes read put back in front,
// unchanged, and nothing after the first content event is ever retried.
// Preamble (OpenAI chunks with only a role, response.created, Anthropic's
// message_start, ping and empty content_block_start) is safe to retry
// after.
//
// When Transport gives up on a failed response, it returns that response,
// body intact, so that the SDK reports the provider's own error; the reason
// it stopped goes to Policy.Observer. When there is no response, the error
// is a *GiveUpError wrapping the last transport error. Discarded responses
// are drained and closed so that connections are reused.
//
// A Transport keeps a RetryBudget per host unless its Policy has a Budget
// (or DisableRetryBudget is set): under a full outage its retries stay near
// a tenth of its calls, beyond a reserve of 100 retries in any 10 s.
//
// The body of a failed response is read to judge it for at most
// ErrorBodyTimeout and MaxErrorBody bytes, and decoded first if it is
// gzip or deflate (as it is when the request set Accept-Encoding itself).
//
// A Transport is used by pointer and is safe for concurrent use. Secrets in
// the request (Authorization, x-api-key, api-key, x-goog-api-key, a "key"
// query parameter) never appear in its errors or events, even when a server
// echoes them in an error body, an in-stream error event or a response
// header, raw or URL-encoded; nor does anything shaped like a provider's
// API key. (http.Client wraps a RoundTrip error in a *url.Error that
// repeats the request's URL, query and all: send a key in a header, as the
// providers' SDKs do.)
type Transport struct {
	// Base makes each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Policy says how requests are retried. Its AttemptTimeout bounds
	// each attempt until the response body is fully read or closed, not
	// merely until the headers arrive.
	Policy Policy

	// MaxBufferedBody bounds how much of a request body without GetBody
	// is buffered to be replayed; a larger body is sent once and not
	// retried. Zero means 1 MiB; negative means never
	// buffer.
	MaxBufferedBody int64

	// StreamLookahead bounds how long an event stream (a 200 with
	// Content-Type text/event-stream) may stay silent, sending not a byte,
	// before its first content event; one silent longer is closed and
	// retried as a transient failure. A stream that keeps sending
	// (preamble, keep-alives), however long it takes to its answer, is not
	// silent: a reasoning model may think for minutes. Zero means
	// 2 minutes. It is apart from
	// Policy.AttemptTimeout.
	StreamLookahead time.Duration

	// StreamLookaheadBytes bounds how much of an event stream is read
	// looking for its first content event; past it the stream is handed
	// over as it is. Zero means 64 KiB.
	StreamLookaheadBytes int

	// ErrorBodyTimeout bounds how long the body of a failed response
	// (status 400 or above) is read to judge it: a server that sends
	// part of an error body and holds the connection open does not hold
	// the call. A body not read in time is closed, and the attempt is
	// judged by what came. Zero means 5 seconds; negative means no bound
	// but the caller's deadline and Policy.AttemptTimeout.
	ErrorBodyTimeout time.Duration

	// DisableRetryBudget turns off the RetryBudget a Transport keeps per
	// host when Policy.Budget is nil. It keeps at most maxHostBudgets of
	// them: when a new host would pass that, the budgets idle for their
	// whole TTL (which hold nothing a fresh one does not) are dropped,
	// else the one used least recently.
	DisableRetryBudget bool

	mu      sync.Mutex             // guards budgets, and serialises draws from Policy.Rand
	budgets map[string]*hostBudget // per host, at most maxHostBudgets
}

// maxHostBudgets bounds how many hosts' retry budgets a Transport keeps.
const maxHostBudgets = 1024

// hostBudget is the retry budget of one host, and when it was last used.
type hostBudget struct {
	RetryBudget
	used time.Time
}

// hostBudget returns the retry budget of host, made on first use.
func (t *Transport) hostBudget(host string, now time.Time) *RetryBudget {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.budgets[host]
	if b == nil {
		if t.budgets == nil {
			t.budgets = map[string]*hostBudget{}
		}
		if len(t.budgets) >= maxHostBudgets {
			t.evictBudgets(now)
		}
		b = &hostBudget{}
		t.budgets[host] = b
	}
	b.used = now
	return &b.RetryBudget
}

// evictBudgets drops the budgets idle for a whole TTL, or else the one
// used least recently; one still in use by a call goes on working for it.
// t.mu is held.
func (t *Transport) evictBudgets(now time.Time) {
	var oldest string
	for host, b := range t.budgets {
		if now.Sub(b.used) >= b.ttl() {
			delete(t.budgets, host)
		} else if oldest == "" || b.used.Before(t.budgets[oldest].used) {
			oldest = host
		}
	}
	if len(t.budgets) >= maxHostBudgets {
		delete(t.budgets, oldest)
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base == nil {
		return http.DefaultTransport
	}
	return t.Base
}

// CloseIdleConnections closes the idle connections of Base (of
// http.DefaultTransport when Base is nil), if it keeps any, so that
// http.Client.CloseIdleConnections reaches through a Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.base()
	ctx := req.Context()
	body, err := t.replayableBody(req)
	if err != nil {
		return nil, err
	}
	p := t.Policy
	if p.Budget == nil && !t.DisableRetryBudget {
		p.Budget = t.hostBudget(req.URL.Host, ClockFrom(ctx).Now())
	}
	e := newEngine(ctx, p, req.URL.Host)
	e.sideEffects = HasSideEffects(ctx) && req.Header.Get("Idempotency-Key") == ""
	if body.once {
		e.once = StopUnreplayableBody
	}
	e.randMu = &t.mu
	// The latest failed attempt is kept until the next one is surely made,
	// so that a call that ends early (a breaker refusing the retry) can
	// still give back the provider's own response.
	var last failedAttempt
	var ok *http.Response
	stopped := e.run(nil, func(n int) outcome {
		areq, cancel, bodyErr := attemptRequest(req, body, n, p.AttemptTimeout)
		if bodyErr != nil {
			return outcome{err: bodyErr, unsent: true}
		}
		last.discard()
		resp, err := base.RoundTrip(areq)
		timedOut := areq != req && attemptTimedOut(ctx, areq.Context(), err)
		cur := failedAttempt{cancel: cancel}
		switch {
		case err != nil:
			cur.err = redactError(err, scrub.Of(req))
		case resp.StatusCode == http.StatusOK && isEventStream(resp):
			read, failed := t.lookahead(resp)
			if failed != nil {
				cur.resp, cur.body.raw, cur.err = resp, read, failed
				if se, ok := failed.(*StreamError); ok {
					se.Data = scrub.Of(req).CutBytes(se.Data, MaxErrorBody)
				} else {
					cur.err = redactError(failed, scrub.Of(req))
				}
				// A stalled stream's body is closed: nothing to give back.
				cur.dead = errors.Is(failed, ErrStreamStalled)
				break // a failed attempt, like any other
			}
			// The stream hands the permit back when it ends.
			resp.Body = &streamBody{Reader: io.MultiReader(bytes.NewReader(read), resp.Body), body: resp.Body, cancel: cancel, held: e.handOver()}
			ok = resp
			return outcome{}
		case resp.StatusCode < http.StatusBadRequest:
			if areq.Context() != ctx { // a per-attempt timeout runs until the body is read
				resp.Body = &attemptBody{ReadCloser: resp.Body, cancel: cancel}
			}
			ok = resp
			return outcome{}
		default:
			cur.resp = resp
			cur.body = readErrorBody(resp, t.errorBodyTimeout())
			cur.err = httpError(resp, cur.body, scrub.Of(req))
		}
		last = cur
		return outcome{err: cur.err, timedOut: timedOut}
	})
	switch {
	case stopped == nil:
		return ok, nil
	case stopped.Attempts == 0:
		body.close(req) // never sent, yet a RoundTripper closes it
		return nil, stopped
	case e.inWait:
		last.discard()
		return nil, stopped
	}
	return last.giveBack(stopped)
}

// errorBodyTimeout is the bound on reading an error body; zero for none.
func (t *Transport) errorBodyTimeout() time.Duration {
	switch {
	case t.ErrorBodyTimeout < 0:
		return 0
	case t.ErrorBodyTimeout == 0:
		return defaultErrorBodyTimeout
	}
	return t.ErrorBodyTimeout
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

// attemptRequest returns the request of one attempt: req itself when it
// can go as it is, else a copy with a fresh body and, with a per-attempt
// timeout, a context of its own. A protocol upgrade gets no per-attempt
// timeout: the connection it returns outlives any body. The error is
// GetBody's.
func attemptRequest(req *http.Request, body requestBody, attempt int, timeout time.Duration) (*http.Request, context.CancelFunc, error) {
	if req.Header.Get("Upgrade") != "" {
		timeout = 0
	}
	fresh := body.get != nil && (attempt > 1 || req.GetBody == nil)
	if !fresh && timeout <= 0 {
		return req, noCancel, nil
	}
	var b io.ReadCloser
	if fresh {
		var err error
		if b, err = body.get(); err != nil {
			return nil, nil, fmt.Errorf("rebound: getting the request body again: %w", err)
		}
	}
	ctx, cancel := req.Context(), context.CancelFunc(noCancel)
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
