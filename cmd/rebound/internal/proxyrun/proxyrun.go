// Package proxyrun runs "rebound proxy": rebound's proxy, with the
// metrics, breakers and logs of the command, its limits and breakers
// shared on Redis if asked, served until the command is told to stop.
package proxyrun

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cmd/rebound/internal/metrics"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/front"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/proxy"
	"github.com/rebound-go/rebound/ratelimit"
	reboundredis "github.com/rebound-go/rebound/redis"
)

// Config is a run of "rebound proxy", as its flags ask for it.
type Config struct {
	// Addr is where to listen, host:port.
	Addr string
	// Options are the proxy's, from the flags; Run adds the logger, the
	// metrics, the breakers and, with Redis, the shared limits.
	Options proxy.Options
	// Redis, if set, is the URL of a Redis that the replicas share their
	// limits, breakers, cool-downs, tenants' caps and routes' cached
	// answers on.
	Redis string
	// RedisPrefix starts every key the proxy keeps on Redis. Empty means
	// reboundredis.DefaultPrefix; deployments that share a Redis but not
	// their state use prefixes of their own.
	RedisPrefix string
	// Replicas is how many proxy processes share Redis: while Redis is
	// away each may spend a 1/Replicas share of what is left of a
	// tenant's cap. Zero means 1.
	Replicas int
	// RedisTimeout bounds each decision's round trip to Redis; past it
	// the replica decides locally. Zero means reboundredis.DefaultTimeout
	// (5 ms), right for a Redis in the same zone.
	RedisTimeout time.Duration
	// Drain is how long requests in flight may finish after SIGTERM, and
	// the calls of an MCP server a reload removes or changes.
	Drain time.Duration
	// ConfigFile is the config file the proxy was made from, which it
	// re-reads at each SIGHUP; empty for none (SIGHUP is then logged and
	// ignored).
	ConfigFile string
	// AdminOff says that /ui and /metrics answer only requests from this
	// machine, though the proxy listens beyond it: there is no admin
	// token. Run says so at start.
	AdminOff bool
	// MCPServer makes the handler of an MCP server of the config
	// (proxy.Options.MCPServer), given the proxy's logger and an observer
	// of its metrics and status page;
	// the command sets it to rebound mcp's. Nil refuses a config with MCP
	// servers.
	MCPServer func(name string, spec proxy.MCPServerConfig, logger *slog.Logger, obs rebound.Observer) (http.Handler, error)
}

// Run serves the proxy of c until ctx is done, its logs on stderr as JSON,
// and returns the command's exit code: 0 after a clean stop, 1 if it
// could not serve, 2 if c is bad usage (a reason in one line on stderr).
func Run(ctx context.Context, c Config, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	opts := c.Options
	opts.Logger = logger

	// Metrics: rebound's OpenTelemetry observer, read by Prometheus.
	m, err := metrics.New()
	if err != nil {
		fmt.Fprintf(stderr, "rebound proxy: metrics: %v\n", err)
		return 1
	}
	defer m.Close()
	obs := m.Observer
	opts.Observer = obs
	opts.Metrics = m.Handler
	breakerCfg := proxy.RecommendedBreaker()
	breakerCfg.OnStateChange = func(c breaker.Change) {
		obs.BreakerStateChange(c)
		logger.Warn("breaker", "target", c.Name, "from", c.From.String(), "to", c.To.String(), "reason", c.Reason)
	}
	opts.Breaker = func(key string) rebound.Breaker { return breaker.New(key, breakerCfg) }
	if c.Redis != "" {
		closeRedis, err := shareOnRedis(ctx, c, &opts, breakerCfg)
		if err != nil {
			fmt.Fprintf(stderr, "rebound proxy: --redis: %v\n", err)
			return 2
		}
		defer closeRedis()
	}
	opts.MCPServer = c.MCPServer
	p, err := proxy.New(opts)
	if err != nil {
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 2
	}
	if v := p.ConfigVersion(); v != "" {
		logger.Info("config loaded", "version", v)
	}
	if c.AdminOff {
		logger.Warn("/ui and /metrics are off beyond this machine: they answer only requests from it, over loopback; give --admin-token-env to open them to others")
	}
	live := &liveProxy{}
	live.Store(p)
	// The tenants' and caches' series, read from the live Proxy's figures.
	if err := m.Figures(proxy.ProxySeries, func(yield func(proxy.Figure) bool) { live.Load().Figures(yield) }); err != nil {
		fmt.Fprintf(stderr, "rebound proxy: metrics: %v\n", err)
		return 1
	}
	return serveProxy(ctx, c, live, logger, stdout, stderr)
}

// shareOnRedis makes opts's breakers, limits, cool-downs, tenants' caps
// and limits, and routes' cached answers those shared on c's Redis, and
// returns what closes its client.
func shareOnRedis(ctx context.Context, c Config, opts *proxy.Options, breakerCfg breaker.Config) (func() error, error) {
	logger := opts.Logger
	cfg, err := reboundredis.Open(c.Redis)
	if err != nil {
		return nil, err
	}
	cfg.Prefix, cfg.Timeout = c.RedisPrefix, c.RedisTimeout
	cfg.OnChange = func(up bool, err error) {
		if !up {
			logger.Warn("redis away; deciding locally until it is back", "error", fmt.Sprint(err))
		} else {
			logger.Info("redis back")
		}
	}
	store, err := reboundredis.New(cfg)
	if err != nil {
		cfg.Client.Close()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := store.Warm(wctx); err != nil {
		logger.Warn("redis not answering; deciding locally until it does", "error", fmt.Sprint(err))
	}
	cancel()
	opts.Breaker = func(key string) rebound.Breaker { return reboundredis.NewBreaker(store, key, breakerCfg) }
	opts.Limiter = func(upstream string, cfg ratelimit.Config) ratelimit.Pacer {
		return reboundredis.NewLimiter(store, upstream, cfg)
	}
	opts.Cooldowns = reboundredis.NewCooldowns(store)
	// A tenant's keys are apart from an upstream's of the same name.
	opts.TenantCap = func(tenant string, usd float64, period string) cost.Cap {
		p := reboundredis.Day
		if period == proxy.PeriodMonth {
			p = reboundredis.Month
		}
		return store.Cap("tenant:"+tenant, reboundredis.CapConfig{USD: usd, Period: p, Replicas: c.Replicas})
	}
	opts.TenantLimiter = func(tenant string, cfg ratelimit.Config) ratelimit.Pacer {
		return reboundredis.NewLimiter(store, "tenant:"+tenant, cfg)
	}
	// One store for every route: a cache key holds its route and tenant.
	answers, err := reboundredis.NewCache(store, reboundredis.CacheConfig{})
	if err != nil {
		cfg.Client.Close()
		return nil, err
	}
	opts.CacheStore = answers
	return cfg.Client.Close, nil
}

// serveProxy serves p, or the Proxy of the config re-read at the latest
// SIGHUP, until ctx is done, then drains it.
func serveProxy(ctx context.Context, c Config, live *liveProxy, logger *slog.Logger, stdout, stderr io.Writer) int {
	err := front.Run(ctx, front.Config{
		Addr:     c.Addr,
		Handler:  live,
		ErrorLog: log.New(slogWriter{logger}, "", 0),
		Drain:    c.Drain,
		Stdout:   stdout,
		Hangup:   func() { live.reload(c.ConfigFile, c.Drain, logger) },
		Stopping: func() {
			// The MCP servers finish their calls in flight, then end
			// their sessions: a client's event stream would hold the
			// drain open to its end.
			live.Load().Drain(c.Drain)
			logger.Info("draining", "timeout", c.Drain.String())
		},
		Unfinished: func(error) { logger.Warn("drain timed out; closing open connections") },
	})
	// Every MCP server's sessions and processes end with the proxy; the
	// Proxies reloads made share them.
	live.Load().Close()
	if err != nil {
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}

// slogWriter takes the http.Server's own error lines into the log; they
// carry addresses and TLS errors, never a request's headers.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(b []byte) (int, error) {
	w.l.Warn("http", "error", scrub.Text(strings.TrimSpace(string(b))))
	return len(b), nil
}
