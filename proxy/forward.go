package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

// forwarder is the ReverseProxy's transport: it sends a request to its
// route's upstream through rebound.Transport, and on to the fallbacks
// while the one before is down, overloaded, out of quota or out of
// retries.
type forwarder struct{ p *Proxy }

func (f forwarder) RoundTrip(out *http.Request) (*http.Response, error) {
	p := f.p
	ctx := out.Context()
	c := ctx.Value(callKey{}).(*call)
	var lastResp *http.Response
	var lastErr error
	for i, t := range c.rt.targets {
		model := c.model
		if t.model != "" {
			model = t.model
		}
		key := p.models.key(t.up.name, model)
		last := i == len(c.rt.targets)-1
		if !last && p.cooldowns.Cooling(ctx, key, time.Now()) {
			c.skipped = append(c.skipped, t.up.name)
			continue
		}
		if lastResp != nil {
			lastResp.Body.Close()
			lastResp = nil
		}
		req := p.upstreamRequest(out, c, t, model)
		policy := c.rt.policy
		if len(c.rt.targets) > 1 && !last {
			// Within a chain an overloaded upstream is left at once.
			policy.PerKind = withOverride(policy.PerKind, rebound.KindOverloaded, rebound.Override{MaxAttempts: 1})
		}
		policy.Breaker = p.breakers.get(key)
		policy.Budget = t.up.budget
		tctx := rebound.WithTarget(ctx, key)
		policy.Observer = c.observer(tctx, p.observer)
		c.upstream, c.tried = t.up.name, c.tried+1
		c.mu.Lock()
		c.giveUp = nil // the verdict is the latest upstream's
		c.mu.Unlock()
		// Judged once per upstream (a Responses body is read for it), by
		// the one rule; the route's safe paths are the operator's word.
		creates := !c.rt.safe[c.path] && rebound.ProviderSideEffects(req)
		tr := &rebound.Transport{Base: t.up.send, Policy: policy}
		if creates {
			tr.SideEffects = hasSideEffects
		}
		resp, err := tr.RoundTrip(req.WithContext(tctx))
		lastResp, lastErr = resp, err
		if err == nil && resp.StatusCode < http.StatusBadRequest {
			if resp.StatusCode < http.StatusMultipleChoices {
				p.models.learn(model)
			}
			cost.WatchUsage(resp, c.tokens) // the access log's tokens, as the client reads
			break
		}
		if last || ctx.Err() != nil {
			break
		}
		verdict, reason, attempts, known := c.lastGiveUp(err)
		switch {
		case !known:
			return resp, err
		case reason == rebound.StopSideEffects, creates && attempts > 0 && req.Header.Get("Idempotency-Key") != "":
			// The upstream may have carried it out: not again elsewhere,
			// where the client's key means nothing.
			return resp, err
		case reason == rebound.StopBreakerOpen:
		case verdict.Kind == rebound.KindQuotaExhausted:
			p.cooldowns.Start(ctx, key, time.Now(), DefaultQuotaCooldown)
		case verdict.Kind == rebound.KindOverloaded, verdict.Kind == rebound.KindTransient, verdict.Kind == rebound.KindRateLimited:
		default:
			return resp, err // permanent: the same on every upstream
		}
	}
	return lastResp, lastErr
}

// upstreamRequest is out pointed at target t, asking for model. The path
// keeps its escapes ("%2F" stays one segment). The client's own key goes
// only to the route's first upstream, the one it was meant for (with
// pass_client_key). The client's Accept-Encoding does not go: the
// transport then asks for gzip and decodes it, so that every answer is
// read in plain (classified, scrubbed, its tokens counted), whatever the
// client accepts (br and zstd the engine could not read).
func (p *Proxy) upstreamRequest(out *http.Request, c *call, t target, model string) *http.Request {
	req := out.Clone(out.Context())
	u := *t.up.base
	path, rawPath := out.URL.Path, out.URL.EscapedPath()
	if t.model != "" {
		path = renamePathModel(path, t.model)
		rawPath = renamePathModel(rawPath, url.PathEscape(t.model))
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = strings.TrimSuffix(t.up.base.EscapedPath(), "/") + rawPath
	u.RawQuery = out.URL.RawQuery
	req.URL = &u
	req.Host = ""
	c.body.attach(req, t.model)
	req.Header.Del("Accept-Encoding")
	if t.up.key != "" || !p.passClientKey || t.up != c.rt.targets[0].up {
		for _, h := range clientKeyHeaders {
			req.Header.Del(h)
		}
		if q := u.Query(); q.Has("key") {
			q.Del("key")
			u.RawQuery = q.Encode()
		}
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

// withOverride returns per with k's override set, leaving per unchanged.
func withOverride(per map[rebound.Kind]rebound.Override, k rebound.Kind, o rebound.Override) map[rebound.Kind]rebound.Override {
	m := make(map[rebound.Kind]rebound.Override, len(per)+1)
	for kind, v := range per {
		m[kind] = v
	}
	if have, ok := m[k]; ok && have.MaxAttempts != 0 {
		o.MaxAttempts = min(o.MaxAttempts, have.MaxAttempts)
	}
	m[k] = o
	return m
}

// lastGiveUp returns the verdict, reason and attempts of the give-up that
// ended the latest upstream's call, from err or from the events; known is
// false when there was none.
func (c *call) lastGiveUp(err error) (v rebound.Verdict, reason rebound.StopReason, attempts int, known bool) {
	var g *rebound.GiveUpError
	if errors.As(err, &g) {
		return g.Verdict, g.Reason, g.Attempts, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.giveUp == nil {
		return v, reason, 0, false
	}
	return c.giveUp.Verdict, c.giveUp.Reason, c.giveUp.Attempt, true
}

// callKey is the context key of a request's *call.
type callKey struct{}
