package rebound

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// DefaultMaxBufferedBody is how much of a request body without GetBody a
// Transport buffers so that it can be replayed.
const DefaultMaxBufferedBody = 1 << 20

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
// When Transport gives up on a failed response, it returns that response,
// body intact, so that the SDK reports the provider's own error; the reason
// it stopped goes to Policy.Observer. When there is no response, the error
// is a *GiveUpError wrapping the last transport error. Discarded responses
// are drained and closed so that connections are reused.
//
// A Transport is used by pointer and is safe for concurrent use. Secrets in
// the request (Authorization, x-api-key, api-key, x-goog-api-key, a "key"
// query parameter) never appear in its errors or events, even when a server
// echoes them in an error body.
type Transport struct {
	// Base makes each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Policy says how requests are retried. Its AttemptTimeout bounds
	// each attempt until the response body is fully read or closed, not
	// merely until the headers arrive.
	Policy Policy

	// MaxBufferedBody bounds how much of a request body without GetBody
	// is buffered to be replayed; a larger body is sent once and not
	// retried. Zero means DefaultMaxBufferedBody; negative means never
	// buffer.
	MaxBufferedBody int64
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	ctx := req.Context()
	body, err := t.replayableBody(req)
	if err != nil {
		return nil, err
	}
	p := t.Policy
	r := run{obs: p.Observer}
	if r.obs != nil {
		r.start = time.Now()
	}
	for attempt := 1; ; attempt++ {
		areq, cancel := attemptRequest(req, body, attempt, p.AttemptTimeout)
		resp, err := base.RoundTrip(areq)
		timedOut := err != nil && areq != req && attemptTimedOut(ctx, areq.Context())

		var failure error // the attempt's error, as the loop sees it
		var snippet []byte
		switch {
		case err != nil:
			failure = err
			cancel()
		case resp.StatusCode < http.StatusBadRequest:
			r.attempted(attempt, nil)
			if areq.Context() != ctx { // a per-attempt timeout runs until the body is read
				resp.Body = &attemptBody{ReadCloser: resp.Body, cancel: cancel}
			}
			return resp, nil
		default:
			snippet, _ = io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
			failure = &HTTPError{StatusCode: resp.StatusCode, Header: resp.Header, Body: redact(snippet, req)}
		}
		r.attempted(attempt, failure)
		if attempt == 1 {
			if invalid := r.begin(ctx, &p, HasSideEffects(ctx) && req.Header.Get("Idempotency-Key") == ""); invalid != nil {
				return giveBack(resp, snippet, cancel, failure, invalid)
			}
			if body.once && r.loop.once == 0 {
				r.loop.once = StopUnreplayableBody
			}
		}
		verdict := r.classify(ctx, failure, timedOut)
		d := r.next(verdict)
		if !d.Retry {
			return giveBack(resp, snippet, cancel, failure, r.giveUp(ctx, verdict, d, failure))
		}
		r.retrying(attempt, failure, verdict, d)
		if resp != nil {
			discard(resp.Body)
			cancel()
		}
		if stopped := r.wait(ctx, d, failure); stopped != nil {
			return nil, stopped
		}
	}
}

// giveBack ends a RoundTrip that gave up: with the last response, its body
// put back together, if there is one; else with the give-up error.
func giveBack(resp *http.Response, snippet []byte, cancel context.CancelFunc, failure error, stopped *GiveUpError) (*http.Response, error) {
	if resp == nil {
		cancel()
		return nil, stopped
	}
	resp.Body = &attemptBody{
		ReadCloser: readCloser{Reader: io.MultiReader(bytes.NewReader(snippet), resp.Body), Closer: resp.Body},
		cancel:     cancel,
	}
	return resp, nil
}

// requestBody says how a request's body is sent again.
type requestBody struct {
	get  func() (io.ReadCloser, error) // a fresh copy of the body; nil: none
	once bool                          // the body can be sent only once
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
		limit = DefaultMaxBufferedBody
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
	return requestBody{get: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }}, nil
}

// attemptRequest returns the request of one attempt: req itself when it
// can go as it is, else a copy with a fresh body and, with a per-attempt
// timeout, a context of its own.
func attemptRequest(req *http.Request, body requestBody, attempt int, timeout time.Duration) (*http.Request, context.CancelFunc) {
	fresh := body.get != nil && (attempt > 1 || req.GetBody == nil)
	if !fresh && timeout <= 0 {
		return req, noCancel
	}
	ctx, cancel := req.Context(), context.CancelFunc(noCancel)
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	areq := req.Clone(ctx)
	if fresh {
		// GetBody of the original request, or of the buffer, cannot fail
		// on a retry in a way a retry could fix.
		b, err := body.get()
		if err != nil {
			b = io.NopCloser(errReader{err})
		}
		areq.Body = b
		if body.once {
			areq.GetBody = nil
		} else if req.GetBody == nil {
			areq.GetBody = body.get
		}
	}
	return areq, cancel
}

func noCancel() {}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

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

// maxDrain bounds how much of a discarded response is read so that its
// connection can be reused; beyond it, closing is cheaper.
const maxDrain = 64 << 10

func discard(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrain)
	body.Close()
}

// secretHeaders carry credentials; their values never leave RoundTrip.
var secretHeaders = []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key"}

// minSecret is the shortest value treated as a secret to scrub: shorter
// ones would scrub ordinary words.
const minSecret = 8

// redact replaces the request's credentials in an error body, in case a
// server echoes them, before the body reaches errors and events. The
// response body given back to the caller is not touched.
func redact(body []byte, req *http.Request) []byte {
	out := body
	scrub := func(secret string) {
		secret = strings.TrimSpace(secret)
		if len(secret) >= minSecret && bytes.Contains(out, []byte(secret)) {
			out = bytes.ReplaceAll(out, []byte(secret), []byte("[redacted]"))
		}
	}
	for _, h := range secretHeaders {
		for _, v := range req.Header.Values(h) {
			scrub(v)
			if _, token, ok := strings.Cut(v, " "); ok {
				scrub(token) // "Bearer sk-…": the token alone
			}
		}
	}
	if req.URL != nil {
		scrub(req.URL.Query().Get("key"))
	}
	return out
}
