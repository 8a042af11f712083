package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/ratelimit"
)

// Defaults of a zero Options.
const (
	DefaultMaxBody       = 32 << 20
	DefaultMaxAttempts   = fallback.GatewayMaxAttempts
	DefaultQuotaCooldown = fallback.DefaultQuotaCooldown
	DefaultBodyTimeout   = 60 * time.Second
	DefaultMaxQueueWait  = 30 * time.Second
	maxBreakers          = 1024
	maxIdlePerUpstream   = 256
	// noQueueWait is the least bound on a wait for a slot that
	// ratelimit.Transport takes (zero is none): a slot free at once, or
	// none.
	noQueueWait = time.Nanosecond
)

// RecommendedPolicy is the retry policy of a route that names none,
// fallback.GatewayPolicy: rebound's defaults with one attempt more (4),
// since a proxy's clients have turned their own retries off; an
// overloaded upstream still gets rebound's 2 attempts, not more load.
func RecommendedPolicy() rebound.Policy { return fallback.GatewayPolicy() }

// RecommendedBreaker is the breaker of each upstream and model: it opens
// when 80% of at least 20 attempts in 30 s failed, or after 20 failures
// in a row, and probes again after 30 s. A flaky upstream (a third of its
// attempts failing) is far from it; a dead one gets there in a few
// seconds of traffic.
func RecommendedBreaker() breaker.Config {
	return breaker.Config{FailureRate: 0.8, Window: 30 * time.Second, MinCalls: 20, ConsecutiveFailures: 20}
}

// Options configure a Proxy. The zero value of each field documents its
// default; Upstream or Config is required.
type Options struct {
	// Upstream is the base URL every request is forwarded to, when there
	// is no Config.
	Upstream string
	// UpstreamKey, with Upstream, replaces the client's own key (in the
	// header of the request's dialect). Empty passes the client's key
	// through unchanged.
	UpstreamKey string
	// Config is a parsed config file: several upstreams and routes.
	Config *FileConfig
	// Getenv reads the upstreams' key variables. Nil means os.Getenv.
	Getenv func(string) string
	// Tokens are the client tokens; a request must carry one of them
	// where a client sends its key: Authorization: Bearer (any case),
	// x-api-key, x-goog-api-key, api-key or the "key" query parameter.
	// None means no check.
	Tokens []string
	// AllowHosts are the Host names (or addresses), besides the loopback
	// ones, that a proxy without Tokens answers: localhost, 127.0.0.0/8
	// and ::1 always, with any port; any other Host gets a 403, so that
	// a web page that rebinds its own name to 127.0.0.1 cannot use the
	// upstream's key. Give the names a server in front of the proxy
	// sends. With Tokens the Host is not checked.
	AllowHosts []string
	// AllowOrigins are the web origins ("https://app.example.com") whose
	// pages may call the proxy from a browser: they get CORS headers and
	// answers to their pre-flights. A request from any other page (an
	// Origin header not listed, or a Sec-Fetch-Site that is not
	// same-origin) gets a 403, tokens or not; "*" allows every origin,
	// and only with Tokens. None means no page may. An upstream's own
	// CORS headers never reach the client.
	AllowOrigins []string
	// MaxBody caps a request body. Zero means DefaultMaxBody (32 MiB).
	MaxBody int64
	// MaxBodyMemory bounds the memory of all request bodies in flight
	// together, reserved as their bytes arrive and given back when the
	// upstream has answered; a request that finds it spent waits up to
	// BodyMemoryWait, then gets a 503 with Retry-After. It must be at
	// least twice the largest body cap (a body's reading may hold twice
	// its size for a moment). Zero means DefaultMaxBodyMemory (1 GiB);
	// the command's default is a quarter of the machine's memory, at most
	// 1 GiB.
	MaxBodyMemory int64
	// BodyTimeout bounds the reading of a request body; a body that takes
	// longer, or sends nothing for BodyStall, gets a 408. Zero means
	// DefaultBodyTimeout (60 s).
	BodyTimeout time.Duration
	// MaxQueueWait bounds how long a request waits for a slot of its
	// upstream's adaptive limit on requests in flight (which a stream
	// holds until its first content, another answer until its first
	// byte, whatever the client's pace). One that waits longer is never
	// sent there: it goes on to the route's next upstream if that one
	// has a slot free at once (it waits no more), else gets a 503 with
	// Retry-After. Zero or less means DefaultMaxQueueWait (30 s): a
	// client hears why before the usual 60 s idle timeout of a load
	// balancer between cuts it off.
	MaxQueueWait time.Duration
	// Policy is the retry policy of routes that name none. Zero means
	// RecommendedPolicy.
	Policy *rebound.Policy
	// Breaker makes the breaker of an upstream and model label
	// ("name:model", or "name:other" for models neither configured nor
	// answered yet: see OtherModel). Nil means breaker.New with
	// RecommendedBreaker.
	Breaker func(key string) rebound.Breaker
	// Limiter makes an upstream's pacer. Nil means ratelimit.New.
	Limiter func(upstream string, cfg ratelimit.Config) ratelimit.Pacer
	// Cooldowns keeps the upstreams found out of quota, under the
	// breakers' keys. Nil means in-memory ones.
	Cooldowns fallback.Cooldowns
	// Observer hears every call's events (metrics); their Target is the
	// breaker's key, so a made-up model adds no series. Nil means none.
	Observer rebound.Observer
	// Logger takes the access log and errors. Nil means slog.Default.
	Logger *slog.Logger
	// Metrics, if set, serves /metrics.
	Metrics http.Handler
	// Base sends each attempt. Nil means a transport of the proxy's own:
	// http.DefaultTransport's settings, but keeping up to 256 idle
	// connections to each upstream rather than 2, so that a busy proxy
	// does not dial (and close) a connection for most requests.
	Base http.RoundTripper
}

// Proxy is the http.Handler of rebound proxy.
type Proxy struct {
	routes        []*route
	routed        bool // routes come from a config that has some: an unknown one is a 404
	tokens        tokens
	browsers      browsers
	passClientKey bool
	maxBody       int64 // the largest cap of any route: what is read before routing
	memory        *bodyMemory
	bodyTimeout   time.Duration
	breakers      *breakers
	models        *modelLabels // the model part of every per-model key
	cooldowns     fallback.Cooldowns
	observer      rebound.Observer
	log           *slog.Logger
	metrics       http.Handler
	secrets       scrub.Secrets // tokens and upstream keys
	reverse       *httputil.ReverseProxy
	draining      atomic.Bool
}

// upstream is one provider endpoint and its shared state.
type upstream struct {
	name    string
	base    *url.URL
	dialect string // "" for one not configured: by the request's path
	key     string
	send    http.RoundTripper // the pacing transport under rebound.Transport
	sendNow http.RoundTripper // send, for a request that waited for a slot in vain already: a slot free at once, or none
	budget  *rebound.RetryBudget
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
}

// target is an upstream, and the model to ask it for ("": the request's).
type target struct {
	up    *upstream
	model string
}

// New returns a Proxy for o, or a one-line error.
func New(o Options) (*Proxy, error) {
	p := &Proxy{
		tokens:      newTokens(o.Tokens),
		cooldowns:   o.Cooldowns,
		observer:    o.Observer,
		log:         o.Logger,
		metrics:     o.Metrics,
		maxBody:     o.MaxBody,
		bodyTimeout: o.BodyTimeout,
	}
	if p.bodyTimeout <= 0 {
		p.bodyTimeout = DefaultBodyTimeout
	}
	maxQueueWait := o.MaxQueueWait
	if maxQueueWait <= 0 {
		maxQueueWait = DefaultMaxQueueWait
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	send := o.Base
	if send == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = maxIdlePerUpstream
		send = t
	}
	if p.cooldowns == nil {
		p.cooldowns = &fallback.MemoryCooldowns{}
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBody
	}
	makeBreaker := o.Breaker
	if makeBreaker == nil {
		cfg := RecommendedBreaker()
		makeBreaker = func(key string) rebound.Breaker { return breaker.New(key, cfg) }
	}
	p.breakers = newBreakers(makeBreaker, maxBreakers)
	policy := RecommendedPolicy()
	if o.Policy != nil {
		policy = *o.Policy
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	newUpstream := func(name, rawURL, dialect, key string, limits ratelimit.Config) (*upstream, error) {
		if err := checkURL(rawURL); err != nil {
			return nil, err
		}
		base, _ := url.Parse(rawURL)
		var pacer ratelimit.Pacer
		if o.Limiter != nil {
			pacer = o.Limiter(name, limits)
		} else {
			pacer = ratelimit.New(limits)
		}
		adaptive := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{})
		return &upstream{
			name: name, base: base, dialect: dialect, key: key,
			send:    &ratelimit.Transport{Base: send, Limiter: pacer, Adaptive: adaptive, MaxWait: maxQueueWait},
			sendNow: &ratelimit.Transport{Base: send, Limiter: pacer, Adaptive: adaptive, MaxWait: noQueueWait},
			budget:  &rebound.RetryBudget{},
		}, nil
	}
	var keys []string
	switch {
	case o.Config == nil && o.Upstream == "":
		return nil, errors.New("no upstream: give --upstream URL or --config FILE")
	case o.Config != nil && o.Upstream != "":
		return nil, errors.New("--upstream and --config both given: the config names the upstreams")
	case o.Config == nil:
		up, err := newUpstream("upstream", o.Upstream, "", o.UpstreamKey, ratelimit.Config{})
		if err != nil {
			return nil, fmt.Errorf("--upstream: %v", err)
		}
		if len(p.tokens) > 0 && o.UpstreamKey == "" {
			return nil, errors.New("client tokens need the upstream's key (--key-env): the token takes the header the client's key would pass in")
		}
		keys = append(keys, o.UpstreamKey)
		p.passClientKey = len(p.tokens) == 0
		p.routes = []*route{{name: "default", targets: []target{{up: up}}, policy: policy, maxBody: p.maxBody}}
	default:
		c := o.Config
		if c.PassClientKey && len(p.tokens) > 0 {
			return nil, errors.New("config: pass_client_key with client tokens: the token takes the header the client's key would pass in")
		}
		p.passClientKey = c.PassClientKey
		def, err := parsePolicy("policy", c.Policy, policy)
		if err != nil {
			return nil, err
		}
		ups := map[string]*upstream{}
		for name, u := range c.Upstreams {
			key := ""
			if u.KeyEnv != "" {
				if key = getenv(u.KeyEnv); key == "" {
					return nil, configErr("upstreams."+name+".key_env", "environment variable %s is not set", u.KeyEnv)
				}
			}
			if ups[name], err = newUpstream(name, u.URL, dialectOr(u.Dialect), key, ratelimit.Config{RequestsPerMinute: u.RequestsPerMinute, TokensPerMinute: u.TokensPerMinute}); err != nil {
				return nil, configErr("upstreams."+name+".url", "%v", err)
			}
			keys = append(keys, key)
		}
		routes := c.Routes
		if len(routes) == 0 {
			name := "default"
			if _, ok := ups[name]; !ok {
				for n := range ups { // the only one, as ParseConfig checked
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
			up, ok := ups[rc.Upstream]
			if !ok {
				return nil, configErr(fmt.Sprintf("routes[%d].upstream", i), "unknown upstream %q", rc.Upstream)
			}
			r.targets = append(r.targets, target{up: up})
			for j, f := range rc.Fallbacks {
				fu, ok := ups[f.Upstream]
				if !ok {
					return nil, configErr(fmt.Sprintf("routes[%d].fallbacks[%d].upstream", i, j), "unknown upstream %q", f.Upstream)
				}
				r.targets = append(r.targets, target{up: fu, model: f.Model})
			}
			p.routes = append(p.routes, r)
		}
	}
	p.models = newModelLabels(p.routes)
	for _, r := range p.routes {
		r.chain = p.newChain(r)
	}
	p.secrets = secretsOf(append(keys, o.Tokens...))
	hosts, origins := o.AllowHosts, o.AllowOrigins
	if o.Config != nil {
		hosts = append(hosts[:len(hosts):len(hosts)], o.Config.AllowHosts...)
		origins = append(origins[:len(origins):len(origins)], o.Config.AllowOrigins...)
	}
	var err error
	if p.browsers, err = newBrowsers(hosts, origins, len(p.tokens) > 0); err != nil {
		return nil, err
	}
	memory := o.MaxBodyMemory
	switch {
	case memory < 0:
		return nil, fmt.Errorf("body memory (--max-body-memory) %d is negative", memory)
	case memory == 0:
		memory = DefaultMaxBodyMemory
	}
	if memory/2 < p.maxBody {
		return nil, fmt.Errorf("body memory (--max-body-memory) %d bytes is under twice the largest body cap (%d bytes): a body that large could not be read", memory, p.maxBody)
	}
	p.memory = newBodyMemory(memory)
	p.reverse = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.scrubResponse,
		Transport:      releasing{forwarder{p}},
		// No FlushInterval: a stream, or an answer of unknown length, is
		// flushed at each write all the same (ReverseProxy's own rule),
		// and an answer of known length goes out in one piece, without a
		// flushing timer and its goroutine on every request.
		ErrorHandler: p.gatewayError,
		ErrorLog:     log.New(logWriter{p}, "", 0),
		BufferPool:   copyBuffers{},
	}
	return p, nil
}

// secretsOf returns Secrets that know values (tokens and keys).
func secretsOf(values []string) scrub.Secrets {
	h := http.Header{}
	for _, v := range values {
		if v != "" {
			h.Add("Authorization", v)
		}
	}
	return scrub.Of(&http.Request{Header: h})
}

// Drain makes /readyz answer 503, so that a load balancer sends no new
// requests while those in flight finish.
func (p *Proxy) Drain() { p.draining.Store(true) }

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if why := p.browsers.refusal(r); why != "" {
		writeError(w, dialectOfPath(r.URL.Path), http.StatusForbidden, why)
		p.logCall(&call{start: time.Now(), method: r.Method, path: r.URL.Path, outcome: "forbidden"}, http.StatusForbidden)
		return
	}
	if r.Method == http.MethodOptions {
		p.browsers.options(w, r)
		return
	}
	p.browsers.allowOrigin(w.Header(), r)
	switch r.URL.Path {
	case "/healthz":
		writeJSON(w, http.StatusOK, `{"status":"ok"}`)
		return
	case "/readyz":
		if p.draining.Load() {
			writeJSON(w, http.StatusServiceUnavailable, `{"status":"draining"}`)
			return
		}
		writeJSON(w, http.StatusOK, `{"status":"ready"}`)
		return
	case "/metrics":
		if p.metrics != nil {
			if !p.tokens.admit(r) {
				writeJSON(w, http.StatusUnauthorized, unauthorizedBody)
				return
			}
			p.metrics.ServeHTTP(w, r)
			return
		}
	}
	c := &call{start: time.Now(), secrets: scrub.Of(r), method: r.Method, path: r.URL.Path}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			c.aborted = true
			p.logCall(c, sw.status)
			panic(v) // http.ErrAbortHandler: the client's stream breaks as the upstream's did
		}
		p.logCall(c, sw.status)
	}()
	if !p.tokens.admit(r) {
		writeJSON(sw, http.StatusUnauthorized, unauthorizedBody)
		c.outcome = "unauthorized"
		return
	}
	dialect := dialectOfPath(r.URL.Path)
	if hasDotSegment(r.URL.Path) {
		// The upstream (or a server before it) would resolve them, out
		// of its base path, with the operator's key.
		writeError(sw, dialect, http.StatusBadRequest, `the path has "." or ".." segments`)
		c.outcome = "client_error"
		return
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
		r.Header.Del("Upgrade") // curl --http2 asks, and goes on in HTTP/1.1 when refused
	}
	if r.Header.Get("Upgrade") != "" {
		// A websocket (OpenAI's Realtime API) would have the engine
		// retry, pace and classify what it cannot read.
		writeError(sw, dialect, http.StatusNotImplemented, "protocol upgrades (websockets, the Realtime API) are not proxied")
		c.outcome = "upgrade"
		return
	}
	body, err := readBody(r, http.NewResponseController(w), p.memory, p.maxBody, p.bodyTimeout)
	switch {
	case errors.Is(err, errBodyMemory):
		sw.Header().Set("Retry-After", "1")
		writeError(sw, dialect, http.StatusServiceUnavailable, "the proxy holds as many request bodies as its memory allows; try again")
		c.outcome = "body_memory"
		return
	case errors.Is(err, errTooLarge):
		writeError(sw, dialect, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", p.maxBody))
		c.outcome = "too_large"
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.outcome = "client_error"
		c.err = err
		writeError(sw, dialect, http.StatusRequestTimeout, "the request body did not come in time")
		return
	case err != nil:
		c.outcome = "client_error"
		c.err = err
		writeError(sw, dialect, http.StatusBadRequest, "could not read the request body")
		return
	}
	defer body.release()
	if c.model, err = modelOf(r.URL.Path, r.Header, body); err != nil {
		c.outcome = "client_error"
		writeError(sw, dialect, http.StatusBadRequest, err.Error())
		return
	}
	rt := p.match(r.URL.Path, c.model)
	if rt == nil {
		writeJSON(sw, http.StatusNotFound, `{"error":{"message":"no route for this path and model","type":"not_found","code":404}}`)
		c.outcome = "no_route"
		return
	}
	c.route = rt.name
	if d := rt.targets[0].up.dialect; d != "" {
		dialect = d
	}
	c.dialect = dialect
	if int64(len(body.b)) > rt.maxBody {
		writeError(sw, dialect, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", rt.maxBody))
		c.outcome = "too_large"
		return
	}
	c.rt, c.body = rt, body
	out := r.WithContext(context.WithValue(r.Context(), callKey{}, c))
	out.Body, out.ContentLength = http.NoBody, 0 // the forwarder sends c.body
	p.reverse.ServeHTTP(sw, out)
}

// releasing is the ReverseProxy's transport: the forwarder, after which
// the request body is no longer needed (a stream goes on without it), and
// its memory goes back at once rather than when the answer ends.
type releasing struct{ f forwarder }

func (r releasing) RoundTrip(out *http.Request) (*http.Response, error) {
	defer out.Context().Value(callKey{}).(*call).body.release()
	return r.f.RoundTrip(out)
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

// hasDotSegment reports whether path has a "." or ".." segment (escaped
// or not: path is decoded).
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// rewrite is the ReverseProxy's: it keeps the request as it came, the
// forwarder points it at each upstream in turn. An allowed page's Origin
// stays with the proxy, which has judged it: the upstream's own browser
// rules (Anthropic's refuses a page without a header of its own) are for
// pages that call it directly.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.Host = ""
	pr.Out.Header.Del("Origin")
}

// gatewayError answers a request no upstream answered, in its dialect.
func (p *Proxy) gatewayError(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(callKey{}).(*call)
	c.err = err
	if r.Context().Err() != nil {
		c.outcome = "client_gone"
		return
	}
	status, msg := http.StatusBadGateway, "upstream unreachable"
	var g *rebound.GiveUpError
	switch {
	case errors.Is(err, ratelimit.ErrNoSlot), errors.Is(err, ratelimit.ErrQueueFull):
		// Never sent: the upstream's limit on requests in flight is
		// taken. Slots free as the requests ahead get their first
		// content, within seconds of a healthy upstream.
		status, msg = http.StatusServiceUnavailable, "too many requests in flight to the upstream: none came free in time"
		c.outcome = "no_slot"
		w.Header().Set("Retry-After", "1")
	case !errors.As(err, &g):
	case g.Reason == rebound.StopBreakerOpen:
		status, msg = http.StatusServiceUnavailable, "upstream circuit open"
	case g.Reason == rebound.StopSideEffects:
		msg = "the upstream failed after it had the request, which may have been carried out: not sent again (an Idempotency-Key lets it be retried)"
	}
	writeError(w, c.dialect, status, msg)
}

// logWriter takes the ReverseProxy's own error lines into the log.
type logWriter struct{ p *Proxy }

func (l logWriter) Write(b []byte) (int, error) {
	l.p.log.Warn("proxy", "error", l.p.secrets.String(strings.TrimSpace(string(b))))
	return len(b), nil
}

// statusWriter notes the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush through.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// copyBuffers lends the buffers a response is copied through: without
// them each request would allocate its own 32 KiB.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
