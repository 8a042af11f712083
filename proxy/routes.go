package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/ratelimit"
)

// upstream is one provider endpoint and its shared state.
type upstream struct {
	name     string
	base     *url.URL
	dialect  string // "" for one not configured: by the request's path
	key      string
	send     http.RoundTripper // the pacing transport under rebound.Transport
	sendNow  http.RoundTripper // send, for a request that waited for a slot in vain already: a slot free at once, or none
	budget   *rebound.RetryBudget
	pacer    ratelimit.Pacer     // send's, which says the key's headroom
	adaptive *ratelimit.Adaptive // send's limit on requests in flight
	limits   ratelimit.Config

	// pool is the configured upstream's name for a key of its pool
	// (keys.go), "" for an upstream of one key; keyVar is the variable
	// holding the key.
	pool, keyVar string
	coolingUntil atomic.Int64 // Unix ns: the end of the latest quota cool-down started here
}

// route is where matching requests go.
type route struct {
	name       string
	pathPrefix string
	model      string
	targets    []target // the upstream, then the fallbacks
	chain      *fallback.Chain[request, *http.Response]
	policy     rebound.Policy
	maxBody    int64
	safe       map[string]bool // paths without side effects, besides the model calls
	cache      *cache.Cache    // nil: none
}

// target is an upstream, and the model to ask it for ("": the request's).
type target struct {
	up    *upstream
	model string
	// affinity is how the key is known to its pool's conversation
	// affinity (affinityName); "" for none.
	affinity string
}

// upstreamMaker makes the upstreams of a Proxy.
type upstreamMaker struct {
	send         http.RoundTripper // what sends their requests
	limiter      func(upstream string, cfg ratelimit.Config) ratelimit.Pacer
	maxQueueWait time.Duration
}

// make returns the upstream name at rawURL: its pace (limits, as the
// Proxy's Limiter makes it), its adaptive limit on requests in flight and
// its retry budget, shared by every request to it.
func (m upstreamMaker) make(name, rawURL, dialect, key string, limits ratelimit.Config) (*upstream, error) {
	if err := checkURL(rawURL); err != nil {
		return nil, err
	}
	base, _ := url.Parse(rawURL)
	var pacer ratelimit.Pacer
	if m.limiter != nil {
		pacer = m.limiter(name, limits)
	} else {
		pacer = ratelimit.New(limits)
	}
	adaptive := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{})
	return &upstream{
		name: name, base: base, dialect: dialect, key: key, pacer: pacer, adaptive: adaptive, limits: limits,
		send:    &ratelimit.Transport{Base: m.send, Limiter: pacer, Adaptive: adaptive, MaxWait: m.maxQueueWait, MaxPaceWait: m.maxQueueWait},
		sendNow: &ratelimit.Transport{Base: m.send, Limiter: pacer, Adaptive: adaptive, MaxWait: noQueueWait, MaxPaceWait: noQueueWait},
		budget:  &rebound.RetryBudget{},
	}, nil
}

// setRoutes sets p's routes from o, with policy where they name none, and
// returns the upstreams' keys.
func (p *Proxy) setRoutes(o Options, policy rebound.Policy, ups upstreamMaker, getenv func(string) string) ([]string, error) {
	switch {
	case o.Config == nil && o.Upstream == "":
		return nil, errors.New("no upstream: give --upstream URL or --config FILE")
	case o.Config != nil && o.Upstream != "":
		return nil, errors.New("--upstream and --config both given: the config names the upstreams")
	case o.Config == nil:
		up, err := ups.make("upstream", o.Upstream, "", o.UpstreamKey, ratelimit.Config{})
		if err != nil {
			return nil, fmt.Errorf("--upstream: %v", err)
		}
		if p.door.HasTokens() && o.UpstreamKey == "" {
			return nil, errors.New("client tokens need the upstream's key (--key-env): the token takes the header the client's key would pass in")
		}
		p.passClientKey = !p.door.HasTokens()
		p.routes = []*route{{name: "default", targets: []target{{up: up}}, policy: policy, maxBody: p.maxBody}}
		return []string{o.UpstreamKey}, nil
	}
	return p.configRoutes(o.Config, policy, ups, getenv)
}

// configRoutes sets p's routes from the config c, with policy where it
// names none, and returns the upstreams' keys.
func (p *Proxy) configRoutes(c *FileConfig, policy rebound.Policy, ups upstreamMaker, getenv func(string) string) (keys []string, err error) {
	if c.PassClientKey && p.door.HasTokens() {
		return nil, errors.New("config: pass_client_key with client tokens: the token takes the header the client's key would pass in")
	}
	p.passClientKey = c.PassClientKey
	def, err := parsePolicy("policy", c.Policy, policy)
	if err != nil {
		return nil, err
	}
	byName := map[string][]*upstream{} // an upstream's keys: one, or its pool
	for name, u := range c.Upstreams {
		limits := ratelimit.Config{RequestsPerMinute: u.RequestsPerMinute, TokensPerMinute: u.TokensPerMinute}
		pool, err := poolKeys("upstreams."+name, u, getenv)
		if err != nil {
			return nil, err
		}
		if pool != nil {
			if byName[name], err = ups.makePool(name, u.URL, dialectOr(u.Dialect), pool, limits); err != nil {
				return nil, configErr("upstreams."+name+".url", "%v", err)
			}
			for _, k := range pool {
				keys = append(keys, k.value)
			}
			continue
		}
		key := ""
		if u.KeyEnv != "" {
			if key = getenv(u.KeyEnv); key == "" {
				return nil, configErr("upstreams."+name+".key_env", "environment variable %s is not set", u.KeyEnv)
			}
		}
		up, err := ups.make(name, u.URL, dialectOr(u.Dialect), key, limits)
		if err != nil {
			return nil, configErr("upstreams."+name+".url", "%v", err)
		}
		up.keyVar = u.KeyEnv
		byName[name] = []*upstream{up}
		keys = append(keys, key)
	}
	routes := c.Routes
	if len(routes) == 0 {
		name := "default"
		if _, ok := byName[name]; !ok {
			for n := range byName { // the only one, as ParseConfig checked
				name = n
			}
		}
		routes = []RouteConfig{{Name: "default", Upstream: name}}
	} else {
		p.routed = true
	}
	for i, rc := range routes {
		r := &route{name: rc.Name, pathPrefix: rc.PathPrefix, model: rc.Model, maxBody: rc.MaxBodyBytes, safe: safePaths(rc.SafePaths)}
		if r.name == "" {
			r.name = fmt.Sprint(i)
		}
		if r.maxBody == 0 {
			r.maxBody = p.maxBody
		}
		p.maxBody = max(p.maxBody, r.maxBody)
		if r.policy, err = parsePolicy(fmt.Sprintf("routes[%d].policy", i), rc.Policy, def); err != nil {
			return nil, err
		}
		if rc.Cache != nil {
			if r.cache, err = p.newCache(fmt.Sprintf("routes[%d].cache", i), rc.Cache); err != nil {
				return nil, err
			}
		}
		up, ok := byName[rc.Upstream]
		if !ok {
			return nil, configErr(fmt.Sprintf("routes[%d].upstream", i), "unknown upstream %q", rc.Upstream)
		}
		for _, k := range up {
			r.targets = append(r.targets, target{up: k, affinity: affinityName(c.Upstreams[rc.Upstream], k)})
		}
		for j, f := range rc.Fallbacks {
			fu, ok := byName[f.Upstream]
			if !ok {
				return nil, configErr(fmt.Sprintf("routes[%d].fallbacks[%d].upstream", i, j), "unknown upstream %q", f.Upstream)
			}
			for _, k := range fu {
				r.targets = append(r.targets, target{up: k, model: f.Model, affinity: affinityName(c.Upstreams[f.Upstream], k)})
			}
		}
		p.routes = append(p.routes, r)
	}
	return keys, nil
}

// match returns the first route for path and model, or nil.
func (p *Proxy) match(path, model string) *route {
	for _, r := range p.routes {
		if strings.HasPrefix(path, r.pathPrefix) && (r.model == "" || r.model == model) {
			return r
		}
	}
	return nil
}
