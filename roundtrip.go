package rebound

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/continuation"
	"github.com/rebound-go/rebound/internal/relay"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, t.Cache)
}

// roundTrip sends req as a call, through cache unless it is nil.
func (t *Transport) roundTrip(req *http.Request, cache ResponseCache) (*http.Response, error) {
	limit := t.MaxBufferedBody
	if limit == 0 {
		limit = relay.DefaultReplay
	}
	body, err := relay.Replayable(req, limit)
	if err != nil {
		return nil, err
	}
	sideEffects := t.sideEffects(req, body)
	if cache != nil {
		if b, ok := body.Bytes(limit); ok {
			return t.cached(cache, req, body, b, sideEffects)
		}
	}
	resp, _, err := t.call(req, body, sideEffects, nil)
	return resp, err
}

// call makes req's attempts under the Policy, reporting to obs instead of
// Policy.Observer if it is not nil. The *GiveUpError says why it gave up,
// if it did, whether it returns the last failed response or that error.
func (t *Transport) call(req *http.Request, body relay.Replay, sideEffects bool, obs Observer) (*http.Response, *GiveUpError, error) {
	ctx := req.Context()
	// What the attempts share, in one allocation: the policy, the latest
	// failed attempt, and the request they make.
	st := &roundTripState{p: t.Policy, t: t, ctx: ctx, req: req, body: body, sideEffects: sideEffects}
	p := &st.p
	if obs != nil {
		p.Observer = obs
	}
	if p.Budget == nil && !t.DisableRetryBudget {
		p.Budget = made(&t.budgets).Get(req.URL.Host, newRetryBudget)
	}
	var e engine
	e.init(ctx, p, req.URL.Host)
	key := callctx.Target(ctx)
	if key == "" {
		key = req.URL.Host
	}
	st.key = key
	e.loop.sideEffects = sideEffects
	if body.Once {
		e.loop.once = StopUnreplayableBody
	}
	e.noHedge = req.Header.Get("Upgrade") != ""
	e.randMu = &t.randMu
	// The latest failed attempt is kept until the next one is surely made,
	// so that a call that ends early (a breaker refusing the retry) can
	// still give back the provider's own response.
	last := &st.last
	var ok *http.Response
	stopped := e.run(nil, func(n int) outcome {
		st.n = n // hedged's attempts have all ended when it returns
		r, o := hedged(&e, n, key, attempter[roundTrip](st), roundTrip.discard)
		switch {
		case r.stream != nil:
			// The stream hands the permit back when it ends.
			var more *relay.Continuer
			if !e.loop.sideEffects { // a continuation is a request more
				more = t.continuer(req, body, key)
			}
			t.handStream(r.ok, r.stream, e.handOver(), more, req)
			ok = r.ok
		case r.ok != nil:
			ok = r.ok
		case !o.unsent && !o.refused: // else the latest attempt is still the one before
			*last = r.failed
		}
		return o
	})
	switch {
	case stopped == nil:
		return ok, nil, nil
	case stopped.Attempts == 0:
		body.Close(req) // never sent, yet a RoundTripper closes it
		return nil, stopped, stopped
	case e.inWait, stopped.Reason == StopRefused:
		// A refused retry is the caller's to know of: the failure before
		// it would hide the refusal (a spend cap reached).
		last.discard()
		return nil, stopped, stopped
	}
	resp, err := last.giveBack(stopped)
	return resp, stopped, err
}

// cached sends req, whose body is b, through cache: the call is next, and
// an answer the cache served instead is reported to the call's observer.
func (t *Transport) cached(cache ResponseCache, req *http.Request, body relay.Replay, b []byte, sideEffects bool) (*http.Response, error) {
	ctx := req.Context()
	obs, clock := t.Policy.Observer, callctx.ClockOf(ctx)
	var start time.Time
	if obs != nil {
		if co, ok := obs.(CallObserver); ok {
			// The call's one observer, for the cache's event as for the
			// attempts', and never asked again by the engine.
			obs = callObserver{co.ObserveCall(ctx)}
		}
		start = clock.Now()
	}
	if sideEffects && !callctx.SideEffects(ctx) {
		req = req.WithContext(callctx.WithSideEffects(ctx))
	}
	var sent bool
	var stopped *GiveUpError
	resp, err := cache.Exchange(req, b, func(r *http.Request) (*http.Response, error) {
		sent = true
		resp, s, err := t.call(r, body, sideEffects, obs)
		stopped = s
		return resp, err
	})
	if !sent {
		body.Close(req)
	}
	if obs == nil || err != nil || resp == nil {
		return resp, err
	}
	e := Event{Target: callctx.Target(ctx), Elapsed: clock.Now().Sub(start)}
	switch resp.Header.Get(cacheHeader) {
	case "hit":
		e.Type = EventCacheHit
	case "stale":
		e.Type = EventCacheStale
		if stopped != nil {
			e.Attempt, e.Err, e.Verdict, e.Reason, e.Waited = stopped.Attempts, stopped, stopped.Verdict, stopped.Reason, stopped.Waited
		}
	default:
		return resp, err
	}
	if e.Target == "" {
		e.Target = req.URL.Host
	}
	if age, err := strconv.ParseInt(resp.Header.Get("Age"), 10, 64); err == nil && age > 0 {
		e.Age = time.Duration(age) * time.Second
	}
	obs.Observe(e)
	return resp, nil
}

// callObserver is the observer of one call, which is not asked for another.
type callObserver struct{ Observer }

// roundTripState is what RoundTrip's attempts share with it, and what
// they make: each is its attempt method, attempt n.
type roundTripState struct {
	p    Policy
	last failedAttempt

	t           *Transport
	ctx         context.Context // the call's
	req         *http.Request
	body        relay.Replay
	key         string // names the target, for first-token times
	sideEffects bool
	n           int // the attempt being made
}

// attempt makes attempt st.n of the call, under actx (the call's, or a
// hedge race's for one of its racers, ended by end); hedge says it is the
// hedge of the attempt beside it.
func (st *roundTripState) attempt(actx context.Context, end func(), hedge bool) (roundTrip, outcome) {
	areq, cancel, bodyErr := st.body.Request(actx, st.req, st.n > 1 || hedge, st.p.AttemptTimeout)
	if bodyErr != nil {
		end()
		return roundTrip{}, outcome{err: bodyErr, unsent: true}
	}
	if actx != st.ctx { // a hedged attempt's context ends with it
		cancel = stack(cancel, end)
	}
	gctx, settle, refused := admit(areq.Context(), areq)
	if refused != nil {
		cancel()
		return roundTrip{}, *refused
	}
	if gctx != areq.Context() {
		areq = areq.WithContext(gctx)
	}
	if !hedge {
		st.last.discard() // the next attempt is surely made
	}
	return st.t.try(actx, st.req, areq, cancel, st.key, settle, st.sideEffects)
}

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
	send, sent := areq, (*relay.Sent)(nil)
	if sideEffects {
		send, sent = relay.Trace(areq)
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
	case relay.LooksInto(resp):
		bound := t.firstTokenBound(key)
		head, failed := t.look(resp, bound).Head(resp)
		if failed == sse.ErrEnded && relay.EndsContinuation(areq.Context(), head) {
			failed = nil
		}
		if failed == relay.ErrLate {
			// A stream cut at the bound took at least that long: noted,
			// so that a provider that has slowed for good raises the
			// bound rather than being cut for ever.
			t.firstTokenTook(key, bound)
		}
		if failed != nil {
			cur.resp, cur.body.Raw, cur.err = resp, head.Read, lookFailure(failed, scrub.Of(req))
			// A stalled stream's body is closed: nothing to give back.
			cur.dead = errors.Is(cur.err, ErrStreamStalled)
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
			resp.Body = relay.EndWith(resp.Body, cancel)
		}
		return roundTrip{ok: resp}, outcome{}
	default:
		cur.resp = resp
		cur.body = relay.ReadErrorBody(resp, MaxErrorBody, t.errorBodyTimeout())
		cur.err = httpError(resp, cur.body, scrub.Of(req))
	}
	o := outcome{err: cur.err, timedOut: timedOut}
	if sideEffects {
		if err != nil {
			o.unreached = sent.Unreached(err)
		} else {
			o.unreached = relay.Refusal(resp.StatusCode)
		}
	}
	return roundTrip{failed: cur}, o
}

// failedAttempt is an attempt that failed: with a response (status 400 or
// above) or a transport error.
type failedAttempt struct {
	resp   *http.Response  // nil after a transport error
	body   relay.ErrorBody // what was read of resp's body
	dead   bool            // resp's body was closed: give back the error, not resp
	cancel context.CancelFunc
	err    error
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
func (f *failedAttempt) giveBack(stopped *GiveUpError) (*http.Response, error) {
	if f.resp == nil || f.dead {
		if f.resp != nil {
			f.resp.Body.Close()
		}
		f.cancel()
		return nil, stopped
	}
	relay.GiveBack(f.resp, f.body, f.cancel)
	return f.resp, nil
}

// contentWatcher is a body of Base's that wants to hear when its event
// stream's first content came (see Transport).
type contentWatcher interface{ ContentArrived() }

// streamBody is an event stream handed to the caller (see relay.Stream),
// and the breaker's permit it holds: handed back once, when the stream
// ends, as a success at its end, a failure if it broke, nothing learned if
// the caller closed it early.
type streamBody struct {
	relay.Stream
	held lease
}

// Ended implements relay.Reporter.
func (b *streamBody) Ended(e relay.End) {
	switch e {
	case relay.Whole:
		b.held.done(OutcomeSuccess)
	case relay.Broken:
		b.held.done(OutcomeFailure)
	default:
		b.held.done(OutcomeIgnored)
	}
}

// handStream hands s, an event stream looked into, to the caller of req
// as the body of resp, holding l; more continues it if it is cut (nil:
// never). A caller that marked req's context (rebound proxy) has an error
// event after content handed on before the stream's end.
func (t *Transport) handStream(resp *http.Response, s *lookedInto, l lease, more *relay.Continuer, req *http.Request) {
	b := &streamBody{held: l}
	b.Start(relay.Handover{Head: s.head, Body: resp.Body, Encoded: s.encoded, Cancel: s.cancel, Report: b,
		Guards: t.guards(), More: more, Secrets: scrub.Of(req), Errors: &streamErrors,
		HandOnError: relay.HandsOnErrorEvents(req.Context())})
	resp.Body = b
}

// continuer returns the continuer of req's stream, or nil when the
// Transport makes none or req cannot be continued: an unreplayable body,
// an API that has no continuation, a continuation's own request. Each
// continuation is a round trip of its own (around any Cache), reported as
// an EventContinue.
func (t *Transport) continuer(req *http.Request, body relay.Replay, target string) *relay.Continuer {
	d := continuation.DialectOf(req.URL.Path)
	if t.Continuations <= 0 || body.Get == nil || body.Once || d == continuation.Unknown || relay.Continuing(req.Context()) {
		return nil
	}
	return &relay.Continuer{Max: t.Continuations, Req: req, Body: body.Get, Dialect: d,
		Send: func(creq *http.Request, made int, cut error) (*http.Response, error) {
			if obs := t.Policy.Observer; obs != nil {
				obs.Observe(Event{Type: EventContinue, Target: target, Attempt: made, Err: cut})
			}
			return t.roundTrip(creq, nil)
		}}
}
