package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/provider"
	"github.com/rebound-go/rebound/internal/sse"
	"github.com/rebound-go/rebound/ratelimit"
)

// forward sends out, the client's request under the call's context,
// along c's route's chain (fallback.Chain): to its upstream through
// rebound.Transport, and on to the fallbacks by the chain's rules while
// the one before is down, overloaded, out of quota, out of retries or of
// room for another request in flight. Without an answer the client gets
// the last upstream's own, as it came.
func (p *Proxy) forward(out *http.Request, c *call) (*http.Response, error) {
	ctx := out.Context()
	if idempotencyKey(out.Header) && c.createsAt(p.upstreamRequest(ctx, out, c, c.rt.targets[0])) {
		// The key binds the upstream it is sent to, which alone knows
		// it: to the chain the request has side effects, and once an
		// attempt was made it goes to no other upstream.
		ctx = rebound.WithSideEffects(ctx)
	}
	res, err := c.rt.chain.Do(ctx, request{out: out, c: c})
	for _, s := range res.Trail {
		if s.Skipped != "" && s.Err == nil { // passed over without a call: cooling down
			c.skipped = append(c.skipped, s.Target)
		}
	}
	if err == nil || res.Value != nil {
		return res.Value, nil
	}
	var ce *fallback.ChainError
	if errors.As(err, &ce) {
		err = ce.Err // the last upstream's own error
	}
	return nil, err
}

// idempotencyKey reports whether h, a client's request header, carries an
// Idempotency-Key that goes to the upstream (one its Connection header
// names does not).
func idempotencyKey(h http.Header) bool {
	return h.Get("Idempotency-Key") != "" && !hasToken(h["Connection"], "Idempotency-Key")
}

// request is what a route's chain sends: the client's request, under the
// call's context, and what the proxy knows of it.
type request struct {
	out *http.Request
	c   *call
}

// newChain returns the chain of route rt: a target per upstream, each
// call keyed by upstream and model label (modelLabels), the last one the
// last resort, so that its own answer reaches the client.
func (p *Proxy) newChain(rt *route) *fallback.Chain[request, *http.Response] {
	ch := &fallback.Chain[request, *http.Response]{Cooldowns: p.cooldowns, QuotaCooldown: DefaultQuotaCooldown,
		LastResort: true, Discard: discard, Conversation: conversationOfCall}
	for _, t := range rt.targets {
		policy := rt.policy
		policy.Budget, policy.Observer = t.up.budget, p.observer
		ch.Targets = append(ch.Targets, fallback.Target[request, *http.Response]{
			Name: t.up.name, Policy: policy, Pool: t.pool(), Headroom: t.up.headroom,
			Affinity: t.affinity, Ready: func(r request) bool { return p.ready(t, r.c) },
			Key: func(r request) string { return p.models.key(t.up.name, t.modelFor(r.c)) },
			Run: func(ctx context.Context, r request, policy rebound.Policy) (*http.Response, error) {
				return p.send(ctx, r, t, policy)
			},
		})
	}
	return ch
}

// conversationOfCall names the conversation of r for its route's pools,
// from its body as sent as JSON (conversationOf); "" for none. The chain
// asks it only of a request to a pool that keeps conversations.
func conversationOfCall(r request) string {
	if !r.c.jsonBody {
		return ""
	}
	return conversationOf(r.c.body.b)
}

// send makes the attempts of r on target t, through rebound.Transport
// under policy; ctx names the call, and so its breaker.
func (p *Proxy) send(ctx context.Context, r request, t target, policy rebound.Policy) (*http.Response, error) {
	c := r.c
	model := t.modelFor(c)
	req := p.upstreamRequest(ctx, r.out, c, t)
	policy.Breaker = p.breakers.get(rebound.TargetFrom(ctx))
	row := p.board.row(rebound.TargetFrom(ctx))
	policy.Observer = c.observe(policy.Observer, row)
	c.upstream, c.tried = t.up.name, c.tried+1
	base := t.up.send
	if c.slotWaited {
		base = t.up.sendNow
	}
	s := &sending{tr: rebound.Transport{Base: base, Policy: policy}}
	tr := &s.tr
	if c.createsAt(req) {
		tr.SideEffects = hasSideEffects
	}
	if row != nil {
		row.inFlight.Add(1)
	}
	resp, err := tr.RoundTrip(req)
	switch {
	case row == nil:
	case err != nil:
		row.inFlight.Add(-1)
	default:
		s.inFlight = inFlightBody{ReadCloser: resp.Body, row: row}
		resp.Body = &s.inFlight
	}
	switch {
	case errors.Is(err, ratelimit.ErrNoSlot):
		c.slotWaited = true
	case err == nil && resp.StatusCode < http.StatusBadRequest:
		if resp.StatusCode < http.StatusMultipleChoices {
			p.models.learn(model)
		}
		c.stream = sse.IsStream(resp.Header) || geminiStream(r.out.URL.Path)
		c.target = rebound.TargetFrom(ctx)
		cost.WatchUsage(resp, c.tokens) // the access log's tokens, as the client reads
	}
	return resp, err
}

// modelFor returns the model to ask t for on c's behalf.
func (t target) modelFor(c *call) string {
	if t.model != "" {
		return t.model
	}
	return c.model
}

// createsAt reports whether req, c's request as sent to an upstream, may
// create something there (rebound.ProviderSideEffects), unless its path
// is one of the route's safe paths: the operator's word.
func (c *call) createsAt(req *http.Request) bool {
	return !c.rt.safe[c.path] && rebound.ProviderSideEffects(req)
}

// discard lets go of a failed response the client does not get.
func discard(resp *http.Response) {
	if resp != nil {
		resp.Body.Close()
	}
}

// upstreamRequest is out pointed at target t, asking for its model, under
// ctx. Only what differs from one target to the next is copied: the
// header (as upstreamHeader has it), the URL (new, its query cleaned) and
// the body (attached); the rest of out, the client's request, is shared,
// and never changed. The connection to the upstream is kept for the next
// request, whatever the client's own does (Connection: close). The path
// keeps its escapes ("%2F" stays one segment). The client's own key goes
// only to the route's first upstream, the one it was meant for (with
// pass_client_key). The client's Accept-Encoding does not go: the
// transport then asks for gzip and decodes it, so that every answer is
// read in plain (classified, scrubbed, its tokens counted), whatever the
// client accepts (br and zstd the engine could not read).
func (p *Proxy) upstreamRequest(ctx context.Context, out *http.Request, c *call, t target) *http.Request {
	req := out.WithContext(ctx)
	req.Header = upstreamHeader(out.Header)
	req.Close = false
	u := *t.up.base
	path, rawPath := out.URL.Path, out.URL.EscapedPath()
	if t.model != "" {
		path = provider.RenameGeminiModel(path, t.model)
		rawPath = provider.RenameGeminiModel(rawPath, url.PathEscape(t.model))
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = strings.TrimSuffix(t.up.base.EscapedPath(), "/") + rawPath
	u.RawQuery = cleanQuery(out.URL.RawQuery)
	req.URL = &u
	req.Host = ""
	c.body.attach(req, t.model)
	req.Header.Del("Accept-Encoding")
	if t.up.key != "" || !p.passClientKey || t.up != c.rt.targets[0].up {
		frontdoor.DropKeys(req.Header, &u)
	}
	if t.up.key != "" {
		dialect := t.up.dialect
		if dialect == "" {
			dialect = dialectOfPath(path)
		}
		switch dialect {
		case DialectAnthropic:
			req.Header.Set("X-Api-Key", t.up.key)
		case DialectGemini:
			req.Header.Set("X-Goog-Api-Key", t.up.key)
		default:
			req.Header.Set("Authorization", "Bearer "+t.up.key)
		}
	}
	return req
}

// hasSideEffects is the SideEffects of the Transport of a request judged
// to have them.
func hasSideEffects(*http.Request) bool { return true }

// callKey is the context key of a request's *call.
type callKey struct{}
