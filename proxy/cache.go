package proxy

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cache"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/sse"
)

// CacheConfig is a route's response cache (package cache): answers kept
// by tenant, route, the client's own key where it passes through, and
// what the request asks, to be served when the route's upstreams fail or,
// with "always", at once.
type CacheConfig struct {
	// Serve is "on_failure" (a stored answer stands in for the upstreams'
	// failure: a 5xx, a 429 after its retries, a refused or reset
	// connection, a timeout, an open breaker, no slot) or "always" (an
	// answer younger than TTL is served without asking an upstream, and
	// on_failure holds beyond it). Required.
	Serve string `json:"serve"`
	// TTL, under "always", is how long an answer is served without
	// asking an upstream, as a Go duration ("10m"). Empty means 5m.
	TTL string `json:"ttl"`
	// MaxStale is the age past which an answer is never served, and
	// after which it is let go, as a Go duration. Empty means 24h.
	MaxStale string `json:"max_stale"`
	// MaxBytes bounds the route's cache in memory (its answers, headers
	// and keys); one answer over a quarter of it is not kept. Zero means
	// 64 MiB. With Options.CacheStore the store bounds itself, and
	// MaxBytes bounds only the answer kept.
	MaxBytes int64 `json:"max_bytes"`
}

// config returns cc as a cache.Config, or a one-line error naming the
// field at fault under where ("routes[0].cache").
func (cc *CacheConfig) config(where string) (cache.Config, error) {
	var cfg cache.Config
	if cc.Serve == "" {
		return cfg, configErr(where+".serve", `missing (want "on_failure" or "always")`)
	}
	if err := cfg.Serve.UnmarshalText([]byte(cc.Serve)); err != nil {
		return cfg, configErr(where+".serve", "%q is neither \"on_failure\" nor \"always\"", cc.Serve)
	}
	for _, d := range []struct {
		name string
		text string
		to   *time.Duration
	}{{"ttl", cc.TTL, &cfg.TTL}, {"max_stale", cc.MaxStale, &cfg.MaxStale}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		switch {
		case err != nil:
			return cfg, configErr(where+"."+d.name, "%q is not a duration (want e.g. \"10m\")", d.text)
		case v <= 0:
			return cfg, configErr(where+"."+d.name, "%q is not positive", d.text)
		}
		*d.to = v
	}
	if cc.MaxBytes < 0 {
		return cfg, configErr(where+".max_bytes", "negative")
	}
	cfg.MaxBytes = cc.MaxBytes
	if err := cfg.Validate(); err != nil {
		return cfg, configErr(where, "%s", strings.TrimPrefix(err.Error(), "cache: "))
	}
	return cfg, nil
}

// newCache returns the cache of a route configured with cc: in
// Options.CacheStore, or in a cache.Memory of its own.
func (p *Proxy) newCache(where string, cc *CacheConfig) (*cache.Cache, error) {
	cfg, err := cc.config(where)
	if err != nil {
		return nil, err
	}
	return cache.New(cfg, p.made.CacheStore)
}

// handOverCaches gives each of q's routes the cache of p's route of the
// same name when their configs are the same: its answers and figures go
// on.
func (p *Proxy) handOverCaches(q *Proxy) {
	old := map[string]*cache.Cache{}
	for _, r := range p.routes {
		if r.cache != nil {
			old[r.name] = r.cache
		}
	}
	for _, r := range q.routes {
		if o := old[r.name]; o != nil && r.cache != nil && o.Config() == r.cache.Config() {
			r.cache = o
		}
	}
}

// answer is the answer to out, c's request: its route's chain's
// (fetch), or its cache's. A route with a cache sends a request through
// (*cache.Cache).Exchange once the tenant has admitted it, so that a
// tenant's refusals are never hidden by a stored answer and a served one
// counts to its rate limits; never a request with side effects: the
// cache's own rule (rebound.ProviderSideEffects on the same path and
// body, an Idempotency-Key, a method but POST) finds every one createsAt
// would, and the route's safe paths too, so it is not asked twice. The answer it keeps is the one the client gets, its
// header scrubbed by fetch; its failures, the proxy's own for the
// upstreams (breaker open, no slot) among them, reach the cache as
// errors, which it takes as the upstreams' failure (cache.Failed); a
// spend cap's refusal is not one.
func (p *Proxy) answer(out *http.Request, c *call) (*http.Response, error) {
	rc := c.rt.cache
	if rc == nil {
		return p.fetch(out, c)
	}
	scope := cache.Scope{Route: c.rt.name}
	if c.tenant != nil {
		scope.Tenant = c.tenant.name
	}
	if p.passClientKey && c.rt.targets[0].up.key == "" {
		scope.ClientKey = frontdoor.ClientKey(out)
	}
	req := out.WithContext(cache.With(out.Context(), scope, c.noteCache))
	res, err := rc.Exchange(req, c.body.b, func(req *http.Request) (*http.Response, error) {
		res, err := p.fetch(req, c)
		if err != nil {
			c.err = err // told in the access line, even when an answer stands in
		}
		return res, err
	})
	if err != nil || !c.servedFromCache() {
		return res, err
	}
	// A stored answer: its header was scrubbed before it was kept, and
	// is again, since another process sharing the store may have kept
	// it.
	if err := p.scrubResponse(res); err != nil {
		res.Body.Close()
		return nil, err
	}
	c.stream = sse.IsStream(res.Header) || geminiStream(out.URL.Path)
	cost.WatchUsage(res, c.savedTokens)
	return res, nil
}

// fetch is the answer of c's route's chain to out (forward), readied for
// the client: an upstream's switch of protocol, never asked for, is an
// error; hop-by-hop headers are dropped and the rest scrubbed
// (scrubResponse).
func (p *Proxy) fetch(out *http.Request, c *call) (*http.Response, error) {
	res, err := p.forward(out, c)
	if err != nil {
		return nil, err
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Nothing asked for it: an upgrade is refused before it is sent.
		res.Body.Close()
		return nil, errUnaskedSwitch
	}
	dropHopByHop(res.Header)
	if err := p.scrubResponse(res); err != nil {
		res.Body.Close()
		return nil, err
	}
	return res, nil
}

// noteCache notes what c's route's cache did with c's request.
func (c *call) noteCache(o cache.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cached = o + 1
}

// servedFromCache reports whether c's answer came from its route's cache.
func (c *call) servedFromCache() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cached-1 == cache.Hit || c.cached-1 == cache.Stale
}

// savedTokens notes the usage a stored answer served to c reports: what
// it would have cost.
func (c *call) savedTokens(u cost.Usage, _ bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u != (cost.Usage{}) {
		c.saved = u
	}
}

// cacheAttrs adds the access line's cache fields of c: "cache" (hit,
// stale, miss or stored; none when the route has no cache or the request
// went by it) and, for an answer served from the cache, "saved_usd",
// what it would have cost by the config's prices for the model the
// client named. c.mu is held.
func (p *Proxy) cacheAttrs(c *call, attrs []slog.Attr) []slog.Attr {
	if c.cached == 0 || c.cached-1 == cache.Bypass {
		return attrs
	}
	o := c.cached - 1
	attrs = append(attrs, slog.String("cache", o.String()))
	if (o == cache.Hit || o == cache.Stale) && c.saved != (cost.Usage{}) && p.tenants != nil {
		if price, ok := p.tenants.prices[c.model]; ok {
			attrs = append(attrs, slog.Float64("saved_usd", max(price.Of(c.saved), 0)))
		}
	}
	return attrs
}
