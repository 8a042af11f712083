package rebound

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/firsttoken"
	"github.com/rebound-go/rebound/internal/lru"
	"github.com/rebound-go/rebound/internal/relay"
)

// Defaults of a zero Transport: how much of a request body without
// GetBody it buffers to replay it, how much of an event stream it reads
// looking for content, and how long such a stream may stay silent first.
const (
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
// unless it has side effects (its context is marked WithSideEffects, or
// SideEffects says so) and carries no Idempotency-Key header: such a
// request is attempted again only when the attempt before provably never
// reached the server. A failed response (status 400 or above) is judged
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
// after. FirstTokenTimeout (fixed, or adaptive) bounds the wait for that
// first content event. If the body Base returned has a method
// ContentArrived(), it is called once then, before the stream is handed
// over: the provider has admitted the request (ratelimit.Transport's body
// gives its slot of the limit on requests in flight back then, rather
// than when the stream ends); never for a stream that fails before any
// content, nor for a response that is not an event stream.
//
// A stream handed over in a dialect Transport recognises (OpenAI Chat
// Completions and Responses, Anthropic Messages, Gemini, and plain
// {"delta": …} events ending in [DONE]) ends honestly: it is handed over
// whole events at a time, and ends either with its end marker ([DONE],
// response.completed, message_stop, a finishReason; for Chat Completions,
// a finish_reason too) and then io.EOF, or with an *IncompleteStreamError
// from Read, after every complete event that came and never half of
// one: when it broke, ended without its end marker or on an error event,
// or was cut by StreamStall (default 2 minutes) or StreamMinRate. The
// breaker is told such a stream failed. A stream in another dialect, or
// encoded (gzip, deflate), passes through as it comes.
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

	// SideEffects, if set, says which requests have side effects, as
	// well as those whose context is marked WithSideEffects;
	// ProviderSideEffects knows the providers' APIs. A request with side
	// effects and no Idempotency-Key header (the caller's word that the
	// server carries it out once, however often it comes) is never
	// hedged, never continued, and attempted again only when the attempt
	// before provably never reached the server: net/http got no
	// connection for it (a refused or failed dial, a TLS handshake or a
	// proxy's tunnel that failed, or the attempt's time ran out first),
	// or the server refused it with a 429, 503, 529 or 498, which say it
	// was not taken on. Any other failure (a connection dropped once it
	// was made, a timeout after that, a 500, 502 or 504) may have come
	// after the server acted, and ends the call. It is called at most
	// once per RoundTrip (not for a request with an Idempotency-Key or a
	// marked context), with the body, if the Transport buffered it,
	// readable through GetBody. Nil means the context's mark alone.
	SideEffects func(*http.Request) bool

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

	// FirstTokenTimeout bounds how long an event stream may take, from
	// its response headers, to its first content event, keep-alives and
	// preamble or not; past it the attempt is closed and retried as a
	// transient failure (nothing has reached the caller yet). Zero means
	// no bound but StreamLookahead's on silence.
	FirstTokenTimeout time.Duration

	// FirstTokenAdaptive raises the first-token bound to 3 times the
	// 90th percentile of the last 64 first-token times of the request's
	// target (WithTarget) or else its host, once 16 are known: a stream
	// far slower to start than its peers is retried, whatever the model's
	// usual pace. FirstTokenTimeout, if set, is the least bound; without
	// it and before 16 samples there is none. The Transport keeps samples
	// for at most 1024 targets.
	FirstTokenAdaptive bool

	// StreamStall bounds how long an event stream already handed over,
	// after its first content event, may keep a read waiting without a
	// byte; one silent longer is closed, and the caller's Read returns an
	// *IncompleteStreamError (IncompleteStalled). Time the caller spends
	// between reads does not count. Zero means 2 minutes, as
	// StreamLookahead: a provider mid-answer sends tokens or keep-alives
	// far more often, and a dead connection would otherwise hold the
	// caller for ever. Negative means no bound.
	StreamStall time.Duration

	// StreamMinRate, in content events a second, is the least pace of an
	// event stream handed over, judged over each StreamRateWindow of time
	// spent waiting for it (time the caller spends between reads does not
	// count), when its bytes arrive; a slower stream is closed and the
	// caller's Read returns an *IncompleteStreamError
	// (IncompleteTooSlow). Zero means no floor.
	StreamMinRate float64

	// StreamRateWindow is the span StreamMinRate is judged over. Zero
	// means 30 seconds.
	StreamRateWindow time.Duration

	// Continuations is how many times a text answer whose stream was cut
	// after content (broken, stalled, too slow, ended without its end
	// marker or with an error event) is continued: the Transport sends a
	// new request that gives the model the text delivered so far, and
	// splices the new stream's content onto the old, so that the caller
	// reads one answer. Anthropic's Messages API continues the text as a
	// prefill; OpenAI's Chat Completions API, and the servers that speak
	// it, get it as an assistant message and a request to continue. Only
	// plain text is continued: never tool calls, structured output
	// (response_format), several choices, or other APIs; those, and a
	// continuation that fails, end with the *IncompleteStreamError. A
	// continuation is offered no tools where the API allows: OpenAI's
	// under tool_choice "none", Anthropic's without tools (kept, under
	// tool_choice none, when the conversation holds tool blocks, as the
	// API demands); one that answers with other than text (a tool call,
	// a thinking block, an end naming a tool call) ends the stream with
	// IncompleteNotText, none of it handed on. One that adds no text but
	// ends (the cut came after the last text) hands on its end: the
	// finish reason, usage and end marker. Each
	// continuation is a call of its own, retried under Policy, and is
	// reported to Policy.Observer as an EventContinue. Zero (the default)
	// means never: a continuation is paid for again as input.
	Continuations int

	// ErrorBodyTimeout bounds how long the body of a failed response
	// (status 400 or above) is read to judge it: a server that sends
	// part of an error body and holds the connection open does not hold
	// the call. A body not read in time is closed, and the attempt is
	// judged by what came. Zero means 5 seconds; negative means no bound
	// but the caller's deadline and Policy.AttemptTimeout.
	ErrorBodyTimeout time.Duration

	// DisableRetryBudget turns off the RetryBudget a Transport keeps per
	// host when Policy.Budget is nil. It keeps at most 1024 of them: when
	// a new host would pass that, the one used least recently is dropped
	// (one idle for its whole TTL holds nothing a fresh one does not).
	DisableRetryBudget bool

	// Cache, if set, answers requests asked again (package cache's Cache
	// is one). Each request whose body the Transport can buffer (see
	// MaxBufferedBody; a body it cannot goes around the Cache) goes
	// through Cache.Exchange, which sends it on by the Transport's own
	// round trip, retries, breaker and all, and may answer it from what
	// it stored instead: at once, when it serves fresh answers, or in
	// place of the failure the round trip gave up with. A request with
	// side effects (SideEffects, or its context's mark) reaches the Cache
	// marked WithSideEffects: its answer is never stored, nor served. An
	// answer served says so: its header X-Rebound-Cache is "hit" or
	// "stale" and its Age its age in seconds, and Policy.Observer (or a
	// CallObserver's observer of the call) gets an EventCacheHit or
	// EventCacheStale, so that a caller that must not act on an old
	// answer can tell. A continuation goes around the Cache.
	Cache ResponseCache

	// Made on first use, so that a Transport made for each request (as
	// a proxy's may be) costs nothing for what it does not use.
	budgets     atomic.Pointer[lru.Map[string, *RetryBudget]] // per host
	firstTokens atomic.Pointer[firsttoken.Times]              // per target or host, for FirstTokenAdaptive
	randMu      sync.Mutex                                    // serialises draws from Policy.Rand
}

// ResponseCache answers requests asked again from the answers it keeps
// (see Transport.Cache). Package cache's Cache is one; the interface lives
// here so that rebound itself imports nothing.
type ResponseCache interface {
	// Exchange answers req, whose whole body is body (nil for none),
	// by next (the Transport's own round trip) or from what it keeps,
	// marking an answer it serves with the header X-Rebound-Cache, "hit"
	// or "stale". A response of next's it does not return, it closes.
	Exchange(req *http.Request, body []byte, next func(*http.Request) (*http.Response, error)) (*http.Response, error)
}

// cacheHeader is the response header by which a ResponseCache marks an
// answer it served (package cache's Header).
const cacheHeader = "X-Rebound-Cache"

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

// sideEffects reports whether req is attempted again only after an
// attempt that provably never reached the server: it has side effects (by
// its context's mark, or by SideEffects) and no Idempotency-Key. A body
// buffered here is shown to SideEffects through GetBody; one that can be
// sent only once is not, since reading it would consume it.
func (t *Transport) sideEffects(req *http.Request, body relay.Replay) bool {
	switch {
	case req.Header.Get("Idempotency-Key") != "":
		return false
	case callctx.SideEffects(req.Context()):
		return true
	case t.SideEffects == nil:
		return false
	}
	if req.GetBody == nil && body.Get != nil && !body.Once {
		req = req.WithContext(req.Context()) // a copy, not the caller's
		req.GetBody = body.Get
	}
	return t.SideEffects(req)
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

// look says how t looks into an event stream whose first content is
// bounded by firstToken (zero: no bound).
func (t *Transport) look(resp *http.Response, firstToken time.Duration) relay.Look {
	l := relay.Look{Bytes: t.StreamLookaheadBytes, Silence: t.StreamLookahead, FirstToken: firstToken, MaxEvent: MaxErrorBody}
	if l.Bytes <= 0 {
		l.Bytes = defaultStreamLookaheadBytes
	}
	if l.Silence <= 0 {
		l.Silence = defaultStreamLookahead
	}
	return l
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
	p, ok := made(&t.firstTokens).Percentile(key, tokenPercentile, firsttoken.MinSamples)
	if !ok {
		return bound
	}
	return max(bound, tokenFactor*p)
}

// firstTokenTook notes how long a stream to key took to its first content.
func (t *Transport) firstTokenTook(key string, d time.Duration) {
	if t.FirstTokenAdaptive {
		made(&t.firstTokens).Add(key, d, tokenSamples)
	}
}

// Defaults of the guards on a stream handed over.
const (
	// defaultStreamStall matches defaultStreamLookahead: a provider that
	// has begun to answer sends tokens, or at least keep-alives, far more
	// often; a connection silent that long is dead, and with no bound the
	// caller would wait on it for ever (http.DefaultTransport has no read
	// timeout).
	defaultStreamStall      = 2 * time.Minute
	defaultStreamRateWindow = 30 * time.Second
)

// guards are the bounds on a stream t hands over, defaults resolved.
func (t *Transport) guards() relay.Guards {
	g := relay.Guards{Stall: t.StreamStall, MinRate: t.StreamMinRate, Window: t.StreamRateWindow}
	switch {
	case g.Stall == 0:
		g.Stall = defaultStreamStall
	case g.Stall < 0:
		g.Stall = 0
	}
	if g.Window <= 0 {
		g.Window = defaultStreamRateWindow
	}
	return g
}

// made returns what p points to, made on first use.
func made[T any](p *atomic.Pointer[T]) *T {
	if v := p.Load(); v != nil {
		return v
	}
	p.CompareAndSwap(nil, new(T))
	return p.Load()
}
