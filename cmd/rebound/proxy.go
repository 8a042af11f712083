package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/internal/scrub"
	reboundotel "github.com/rebound-go/rebound/otel"
	"github.com/rebound-go/rebound/proxy"
	"github.com/rebound-go/rebound/ratelimit"
	reboundredis "github.com/rebound-go/rebound/redis"
)

const proxyUsage = `usage: rebound proxy --upstream URL [flags]
       rebound proxy --config FILE [flags]

Serve a reverse proxy that speaks each provider's own API: a client changes
only its base URL. Every request goes to the upstream with the same path,
query and body (OpenAI chat completions and responses, Anthropic messages,
Gemini generateContent, and their streaming forms), through rebound's
Transport with the recommended setup:

  - failures classified, and retried: 429, 503, 529, broken connections and
    event streams that fail before their first content, up to 4 attempts
    (rebound's backoff, server waits obeyed up to 60 s); an exhausted quota,
    a 400 or a 401 never;
  - a request that may create something at the provider (any but a model
    call, a GET, or a path in the route's safe_paths: a file, a batch, a
    job, a thread's run) is not sent again once it may have reached the
    upstream, unless it carries an Idempotency-Key; after a refused
    connection, a 429, 503 or 529 it still is;
  - a retry budget per upstream (retries near a tenth of the calls under a
    full outage);
  - a breaker per upstream and model (models neither in the config nor
    among the first 100 answered share one, "other", as they share their
    metrics) that opens when 80% of at least 20 attempts in 30 s failed,
    or after 20 failures in a row; rate limits that carry a server wait
    do not count. A flaky upstream is retried, not refused; a dead one
    is refused at once (503) until it recovers;
  - limits learnt from the rate-limit headers, and an adaptive limit on
    the requests in flight to each upstream (a stream counts until its
    first content, another answer until its first byte; a request that finds no slot within --max-queue-wait
    gets a 503 with Retry-After, never sent);
  - streams passed through byte for byte as they come; one that breaks
    after its first content reaches the client broken, as it broke.

With --upstream and no config, the client's own key passes through
unchanged. A config file (JSON) names several upstreams, routes by path
prefix or model, fallbacks to upstreams of the same dialect (with the model
renamed), and a policy (rebound's Policy JSON) and body cap per route; the
upstreams' keys come from the environment variables it names. With
pass_client_key, the client's key goes only to the route's own upstream,
never to a fallback.

Bound to a loopback address the proxy asks no token of its clients; bound
to any other, it refuses to start without client tokens (--token-env or
--tokens-file), which clients send where their SDK sends its key
("Authorization: Bearer TOKEN", x-api-key, x-goog-api-key, api-key or
?key=TOKEN). Without tokens it answers only requests for a loopback host
name (localhost, 127.0.0.0/8, [::1], any port; others with --allow-host),
so that a web page that rebinds its own name to 127.0.0.1 cannot use the
key. Tokens or not, a request from a web page (an Origin header, or a
Sec-Fetch-Site other than same-origin) is refused unless its origin is
given with --allow-origin; only those get CORS headers, an upstream's own
never reach the client, and pre-flight OPTIONS are answered by the proxy,
never forwarded. Refused: a 403 in the request's dialect.

The proxy refuses, in the dialect of the request: a body sent as JSON that
is not strict JSON (RFC 8259: UTF-8 throughout, no NaN or Infinity,
nothing after the value), or whose top-level model key is not written
"model" exactly once (a "Model", an escaped or NUL-cut second one: parsers
disagree), or whose model is not a string or over 256 bytes (400); a path
with "." or ".." segments (400); a protocol upgrade (501: websockets, and
so OpenAI's Realtime API, are not proxied); and a body that sends nothing
for 10 s or takes over 60 s (408). A body that is not JSON (a file upload's
form, a compressed body) goes as it came, but names no model: only a route
without one takes it. The request bodies in flight together hold at most
--max-body-memory, taken as their bytes arrive; past it a request waits up
to 2 s, then gets a 503 with Retry-After. It asks the upstreams for gzip
itself, whatever the client accepts, and answers uncompressed: it reads
every answer. Keys and
tokens it knows are scrubbed from the response headers and error bodies an
upstream might echo them in.

The first line on stdout is "listening on http://HOST:PORT". Logs, an
access log line per request among them, go to stderr as JSON (slog), and
never carry a header, a body, a key or a prompt. GET /healthz and /readyz
(503 while draining), /metrics (Prometheus). On SIGTERM or SIGINT the proxy
stops accepting, lets requests in flight (streams included) finish for up
to --drain-timeout, and exits 0.

flags:
`

// runProxy implements "rebound proxy".
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen on `host:port` (port 0 picks a free port); a non-loopback address needs client tokens")
	upstream := fs.String("upstream", "", "forward every request to this base `URL`")
	keyEnv := fs.String("key-env", "", "with --upstream: the environment `variable` holding the upstream's key, which replaces the client's")
	configFile := fs.String("config", "", "JSON config `file`: upstreams, routes, fallbacks, policies")
	tokenEnv := fs.String("token-env", "", "environment `variable` holding the client tokens, comma-separated")
	tokensFile := fs.String("tokens-file", "", "`file` of client tokens, one a line")
	maxBody := fs.Int64("max-body", proxy.DefaultMaxBody, "largest request body in `bytes`; a larger one gets a 413")
	maxBodyMemory := fs.Int64("max-body-memory", 0, "bound on the memory of all request bodies in flight together, in `bytes`, at least twice the largest body cap (0: a quarter of the machine's memory, at most 1 GiB)")
	var allowHosts, allowOrigins listFlag
	fs.Var(&allowHosts, "allow-host", "without client tokens, answer requests for this host `name` too, besides loopback names (repeatable, or comma-separated)")
	fs.Var(&allowOrigins, "allow-origin", "let web pages of this `origin` (https://app.example.com) call the proxy, with CORS headers (repeatable, or comma-separated; * only with client tokens)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long requests in flight may finish after SIGTERM")
	redisURL := fs.String("redis", "", "share limits, breakers and cool-downs with other replicas on this Redis `URL` (one with a password: --redis-env)")
	redisEnv := fs.String("redis-env", "", "as --redis, with the URL (and its password) in this environment `variable`, out of ps's sight")
	attemptTimeout := fs.Duration("attempt-timeout", 0, "bound each attempt, its body read included (0: none but the client's)")
	maxQueueWait := fs.Duration("max-queue-wait", proxy.DefaultMaxQueueWait, "how long a request may wait for a slot of its upstream's limit on requests in flight; then a 503")

	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rebound proxy: "+format+"\n", a...)
		return 2
	}
	if code, done := parseFlags(fs, args, proxyUsage, withStdout(stderr, stdout)); done {
		return code
	}
	switch {
	case *upstream == "" && *configFile == "":
		return usageErr("give --upstream URL or --config FILE")
	case *upstream != "" && *configFile != "":
		return usageErr("--upstream and --config both given: the config names the upstreams")
	case *keyEnv != "" && *upstream == "":
		return usageErr("--key-env goes with --upstream (a config names its keys' variables)")
	case *maxBody <= 0:
		return usageErr("--max-body %d: want a positive number of bytes", *maxBody)
	case *maxBodyMemory < 0:
		return usageErr("--max-body-memory %d: want a positive number of bytes (0: the default)", *maxBodyMemory)
	case *maxBodyMemory > 0 && *maxBodyMemory/2 < *maxBody:
		return usageErr("--max-body-memory %d: want at least twice --max-body (%d)", *maxBodyMemory, *maxBody)
	case *drain < 0:
		return usageErr("--drain-timeout %v is negative", *drain)
	case *attemptTimeout < 0:
		return usageErr("--attempt-timeout %v is negative", *attemptTimeout)
	case *maxQueueWait <= 0:
		return usageErr("--max-queue-wait %v: want a positive duration", *maxQueueWait)
	case *redisURL != "" && *redisEnv != "":
		return usageErr("--redis and --redis-env both given")
	}
	if *redisEnv != "" {
		if *redisURL = os.Getenv(*redisEnv); *redisURL == "" {
			return usageErr("--redis-env: environment variable %s is not set", *redisEnv)
		}
	}
	host, port, err := net.SplitHostPort(*addr)
	if err != nil {
		return usageErr("--addr %q: %v (want host:port, e.g. 127.0.0.1:0)", *addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return usageErr("--addr %q: port %q is not a number from 0 to 65535", *addr, port)
	}
	tokens, err := readTokens(*tokenEnv, *tokensFile)
	if err != nil {
		return usageErr("%v", err)
	}
	if !isLoopback(host) && len(tokens) == 0 {
		return usageErr("--addr %s is not a loopback address: give client tokens (--token-env or --tokens-file)", *addr)
	}
	opts := proxy.Options{Upstream: *upstream, Tokens: tokens, MaxBody: *maxBody, MaxQueueWait: *maxQueueWait, Getenv: os.Getenv,
		AllowHosts: allowHosts, AllowOrigins: allowOrigins, MaxBodyMemory: *maxBodyMemory}
	if opts.MaxBodyMemory == 0 {
		opts.MaxBodyMemory = defaultBodyMemory()
	}
	if *keyEnv != "" {
		if opts.UpstreamKey = os.Getenv(*keyEnv); opts.UpstreamKey == "" {
			return usageErr("--key-env: environment variable %s is not set", *keyEnv)
		}
	}
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			return usageErr("--config: %v", err)
		}
		if opts.Config, err = proxy.ParseConfig(data, os.Getenv); err != nil {
			return usageErr("%v", err)
		}
	}
	if *attemptTimeout > 0 {
		p := proxy.RecommendedPolicy()
		p.AttemptTimeout = *attemptTimeout
		opts.Policy = &p
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	opts.Logger = logger

	// Metrics: rebound's OpenTelemetry observer, read by Prometheus.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		fmt.Fprintf(stderr, "rebound proxy: metrics: %v\n", err)
		return 1
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer provider.Shutdown(context.Background())
	obs := reboundotel.New(reboundotel.Config{MeterProvider: provider})
	opts.Observer = obs
	opts.Metrics = promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	breakerCfg := proxy.RecommendedBreaker()
	breakerCfg.OnStateChange = func(c breaker.Change) {
		obs.BreakerStateChange(c)
		logger.Warn("breaker", "target", c.Name, "from", c.From.String(), "to", c.To.String(), "reason", c.Reason)
	}
	opts.Breaker = func(key string) rebound.Breaker { return breaker.New(key, breakerCfg) }

	if *redisURL != "" {
		cfg, err := reboundredis.Open(*redisURL)
		if err != nil {
			return usageErr("--redis: %v", err)
		}
		cfg.OnChange = func(up bool, err error) {
			if !up {
				logger.Warn("redis away; deciding locally until it is back", "error", fmt.Sprint(err))
			} else {
				logger.Info("redis back")
			}
		}
		defer cfg.Client.Close()
		store, err := reboundredis.New(cfg)
		if err != nil {
			return usageErr("--redis: %v", err)
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
	}

	p, err := proxy.New(opts)
	if err != nil {
		return usageErr("%v", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())

	hs := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(slogWriter{logger}, "", 0),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	p.Drain()
	logger.Info("draining", "timeout", drain.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		logger.Warn("drain timed out; closing open connections")
		hs.Close()
	}
	<-served // http.ErrServerClosed
	logger.Info("stopped")
	return 0
}

// readTokens reads the client tokens from the environment variable env (a
// comma-separated list) and the file (one a line), never from the command
// line, where ps would show them.
func readTokens(env, file string) ([]string, error) {
	var tokens []string
	if env != "" {
		v := os.Getenv(env)
		if v == "" {
			return nil, fmt.Errorf("--token-env: environment variable %s is not set", env)
		}
		tokens = append(tokens, strings.Split(v, ",")...)
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens-file: %v", err)
		}
		tokens = append(tokens, strings.Split(string(data), "\n")...)
	}
	var kept []string
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			kept = append(kept, t)
		}
	}
	if (env != "" || file != "") && len(kept) == 0 {
		return nil, errors.New("no client token in --token-env or --tokens-file")
	}
	return kept, nil
}

// listFlag is a flag that may be given several times, each a value or a
// comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// defaultBodyMemory is --max-body-memory's default: a quarter of the
// memory the process may use (the machine's, or its cgroup's limit if
// lower), at most 1 GiB; 1 GiB when neither can be read.
func defaultBodyMemory() int64 {
	limit := int64(proxy.DefaultMaxBodyMemory)
	if m := memoryLimit(); m > 0 {
		limit = min(limit, m/4)
	}
	return limit
}

// memoryLimit returns the memory the process may use, in bytes: the
// machine's (/proc/meminfo's MemTotal) or, when lower, its cgroup's
// limit (v2's memory.max, v1's memory.limit_in_bytes); 0 when none can be
// read.
func memoryLimit() int64 {
	var total int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err == nil && kb > 0 {
					total = kb << 10
				}
				break
			}
		}
	}
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "max", or v1's near-2^63 "no limit", leave the machine's.
		if n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}

// isLoopback reports whether host names a loopback address only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// slogWriter takes the http.Server's own error lines into the log; they
// carry addresses and TLS errors, never a request's headers.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(b []byte) (int, error) {
	w.l.Warn("http", "error", scrub.Text(strings.TrimSpace(string(b))))
	return len(b), nil
}
