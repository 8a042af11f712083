package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cache"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/ratelimit"
)

// Defaults of a zero Options.
const (
	DefaultMaxBody       = 32 << 20
	DefaultMaxAttempts   = fallback.GatewayMaxAttempts
	DefaultQuotaCooldown = fallback.DefaultQuotaCooldown
	DefaultBodyTimeout   = frontdoor.BodyTimeout
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
	// Retry-After. It bounds the wait for the upstream's (or key's) pace
	// too: a request its rate limits, as the headers announced them, would
	// hold longer goes at once to the next key or upstream, else gets a
	// 429 with Retry-After, never sent. Zero or less means DefaultMaxQueueWait (30 s): a
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
	// Limiter makes an upstream's pacer, named as the upstream is
	// ("UPSTREAM", or "UPSTREAM/KEYVAR" for each key of a pool). Nil
	// means ratelimit.New. A pacer with a Headroom method
	// (ratelimit.Limiter's, reboundredis.Limiter's) orders a pool's keys.
	Limiter func(upstream string, cfg ratelimit.Config) ratelimit.Pacer
	// Cooldowns keeps the upstreams found out of quota, under the
	// breakers' keys. Nil means in-memory ones.
	Cooldowns fallback.Cooldowns
	// Observer hears every call's events (metrics); their Target is the
	// breaker's key, so a made-up model adds no series. One with a method
	// RecordUsage(ctx context.Context, target string, u cost.Usage), as
	// reboundotel.Observer has, is also told the tokens of each answer,
	// under the target of the attempt that gave it, since events carry
	// none. Nil means none.
	Observer rebound.Observer
	// TenantCap makes the spend cap of a tenant of the config: usd for
	// each period ("day" or "month", UTC), named by the tenant, as its
	// *cost.CapError says. Nil means one in memory, a cost.Limit for each
	// period; rebound proxy --redis makes a reboundredis.Cap, shared by
	// every replica. A cap with a method Spent(context.Context) (float64,
	// error), as reboundredis.Cap has, gives the status page the tenant's
	// spend in the period across replicas; /metrics' spend stays this
	// process's.
	TenantCap func(tenant string, usd float64, period string) cost.Cap
	// TenantLimiter makes the pacer of a tenant's requests_per_minute and
	// tokens_per_minute. Nil means ratelimit.New; rebound proxy --redis
	// makes a reboundredis.Limiter, shared by every replica.
	TenantLimiter func(tenant string, cfg ratelimit.Config) ratelimit.Pacer
	// Logger takes the access log (a line per request, see the package
	// doc) and errors. Nil means slog.Default.
	Logger *slog.Logger
	// Metrics, if set, serves /metrics. It, and the status page (/ui),
	// answer requests from this machine (on a loopback connection, for a
	// loopback host name) and those that carry AdminToken. The proxy's
	// own series (its tenants' and routes' caches') are for it to read
	// from Figures, as rebound proxy's OpenTelemetry meter does.
	Metrics http.Handler
	// AdminToken opens /metrics and the status page to requests from
	// beyond this machine, as "Authorization: Bearer TOKEN" or as the
	// password of HTTP Basic authentication (a browser prompts for it).
	// It is not a client token, and no client token opens them. Empty
	// means they answer only requests from this machine.
	AdminToken string
	// CacheStore keeps the answers of every route that has a cache
	// (RouteConfig.Cache), each route's apart: rebound proxy --redis
	// makes a reboundredis store, shared by every replica. Nil means a
	// cache.Memory for each route, bounded by its max_bytes.
	CacheStore cache.Store
	// MCPServer makes the handler of an MCP server of the config, served
	// at /mcp/NAME: streamable HTTP, its sessions bound to the caller the
	// request's context holds (MCPCallerFrom), its tools those the caller
	// may use. It gets the proxy's Logger, and the Observer the handler
	// reports to (reboundmcp.Options.Observer): Options.Observer, with the
	// status page told of the server's calls (observe.Operation), restarts
	// and respawn breaker. A handler that is an io.Closer is closed by
	// Close, or by CloseReplaced after a reload that removed or changed
	// its server (once its calls in flight are answered, if it has a
	// Shutdown method); a reload keeps the handler of a server whose
	// config is unchanged, and its figures. Nil means a config with MCP
	// servers is refused.
	MCPServer func(name string, c MCPServerConfig, logger *slog.Logger, obs rebound.Observer) (http.Handler, error)
	// Base sends each attempt. Nil means a transport of the proxy's own:
	// http.DefaultTransport's settings, but keeping up to 256 idle
	// connections to each upstream rather than 2, so that a busy proxy
	// does not dial (and close) a connection for most requests.
	Base http.RoundTripper
}

// Proxy is the http.Handler of rebound proxy.
type Proxy struct {
	routes        []*route
	routed        bool            // routes come from a config that has some: an unknown one is a 404
	door          *frontdoor.Door // who may call: hosts, origins, tokens
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
	adminToken    frontdoor.AdminToken
	board         *statusBoard // the status page's figures
	configVersion string       // the version of the config that is live, shown by the status page; "" for none
	tenants       *tenants     // nil: the config has neither tenants nor prices
	draining      atomic.Bool
	mcp           *mcpServers // the MCP servers' handlers, shared with the Proxies reloads make

	// What Reload makes another Proxy from, and shares with it.
	made         Options            // what p was made from
	base         http.RoundTripper  // what sends every upstream's attempts
	ownCooldowns fallback.Cooldowns // the cool-downs under p.cooldowns' noticing
}

// New returns a Proxy for o, or a one-line error.
func New(o Options) (*Proxy, error) { return build(o, nil) }

// build returns a Proxy for o that, if prev is not nil, carries on prev's
// state (see Reload).
func build(o Options, prev *Proxy) (*Proxy, error) {
	p := &Proxy{
		made:        o,
		cooldowns:   o.Cooldowns,
		observer:    o.Observer,
		log:         o.Logger,
		metrics:     o.Metrics,
		maxBody:     o.MaxBody,
		bodyTimeout: o.BodyTimeout,
		adminToken:  frontdoor.NewAdminToken(o.AdminToken),
		board:       newStatusBoard(),
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
	hosts, origins := o.AllowHosts, o.AllowOrigins
	if o.Config != nil {
		hosts = append(hosts[:len(hosts):len(hosts)], o.Config.AllowHosts...)
		origins = append(origins[:len(origins):len(origins)], o.Config.AllowOrigins...)
	}
	tenants, tokens, err := newTenants(o, getenv)
	if err != nil {
		return nil, err
	}
	p.tenants = tenants
	door, err := frontdoor.New(frontdoor.Options{Tokens: tokens, AllowHosts: hosts, AllowOrigins: origins})
	if err != nil {
		return nil, err
	}
	p.door = door
	// Every client token, a tenant's too: a tenant holding the admin
	// token could read every other tenant's figures.
	for i, t := range tokens {
		if p.adminToken.Set() && frontdoor.NewAdminToken(t) == p.adminToken {
			whose := ""
			if tn := tenants.of(i); tn != nil {
				whose = fmt.Sprintf(" (tenant %q's)", tn.name)
			}
			return nil, errors.New("the admin token (--admin-token-env) is also a client token" + whose + ": a client could open /metrics and the status page")
		}
	}
	ups := upstreamMaker{send: send, limiter: o.Limiter, maxQueueWait: maxQueueWait}
	keys, err := p.setRoutes(o, policy, ups, getenv)
	if err != nil {
		return nil, err
	}
	if prev != nil {
		prev.handOver(p)
	}
	p.base, p.ownCooldowns = send, p.cooldowns
	p.configVersion = versionOf(o.Config)
	p.models = newModelLabels(p.routes)
	p.cooldowns = noticing(p.cooldowns, p.routes)
	for _, r := range p.routes {
		r.chain = p.newChain(r)
	}
	p.secrets = secretsOf(append(append(keys, tokens...), o.AdminToken))
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
	var prevMCP *mcpServers
	if prev != nil {
		prevMCP = prev.mcp
	}
	// Last: nothing after it may fail, or its servers would be left open.
	var makeMCP func(string, MCPServerConfig, *mcpStatus) (http.Handler, error)
	if o.MCPServer != nil {
		makeMCP = func(name string, c MCPServerConfig, s *mcpStatus) (http.Handler, error) {
			return o.MCPServer(name, c, p.log, s.observer(p.observer))
		}
	}
	if p.mcp, err = newMCPServers(o.Config, makeMCP, prevMCP); err != nil {
		return nil, err
	}
	if prev != nil {
		prev.handOverTallies(p)
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

// Close closes the MCP servers' handlers (Options.MCPServer) that are
// io.Closers, ending their sessions and servers, those of servers the
// reload that made p replaced too: call it once p serves no more.
func (p *Proxy) Close() error {
	if p.mcp == nil {
		return nil
	}
	return p.mcp.Close()
}

// CloseReplaced ends the handlers of the MCP servers that the Reload which
// made p removed or changed: call it once p serves in its predecessor's
// place. Each refuses new sessions at once and lets the calls in flight
// finish for up to grace (a handler with a Shutdown(context.Context)
// method; another is closed at once); then its sessions end, and their
// clients, told by a 404 that the session is gone, open one with the
// server p has. It returns at once; Close ends what is still finishing.
// The servers p keeps go on, their sessions with them.
func (p *Proxy) CloseReplaced(grace time.Duration) {
	if p.mcp != nil {
		p.mcp.closeReplaced(grace)
	}
}

// Drain makes /readyz answer 503, so that a load balancer sends no new
// requests while those in flight finish, and ends every MCP server's
// handler as CloseReplaced ends a replaced one: no new session, the calls
// in flight finished for up to grace, then the sessions (their event
// streams too, which would hold a drain open) ended. It returns at once;
// Close cuts the grace short.
func (p *Proxy) Drain(grace time.Duration) {
	p.draining.Store(true)
	if p.mcp != nil {
		p.mcp.retireAll(grace)
	}
}
