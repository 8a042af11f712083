package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/proxyrun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/proxy"
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
    first content; a request that finds no slot within --max-queue-wait
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

// proxyFlags are the flags of "rebound proxy" that are not the proxy's
// own configuration: where its keys, tokens and config file come from.
type proxyFlags struct {
	keyEnv, configFile, tokenEnv, tokensFile, redisEnv string
	attemptTimeout                                     time.Duration
}

// runProxy implements "rebound proxy".
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var c proxyrun.Config
	var f proxyFlags
	o := &c.Options
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen on `host:port` (port 0 picks a free port); a non-loopback address needs client tokens")
	fs.StringVar(&o.Upstream, "upstream", "", "forward every request to this base `URL`")
	fs.StringVar(&f.keyEnv, "key-env", "", "with --upstream: the environment `variable` holding the upstream's key, which replaces the client's")
	fs.StringVar(&f.configFile, "config", "", "JSON config `file`: upstreams, routes, fallbacks, policies")
	fs.StringVar(&f.tokenEnv, "token-env", "", "environment `variable` holding the client tokens, comma-separated")
	fs.StringVar(&f.tokensFile, "tokens-file", "", "`file` of client tokens, one a line")
	fs.Int64Var(&o.MaxBody, "max-body", proxy.DefaultMaxBody, "largest request body in `bytes`; a larger one gets a 413")
	fs.Int64Var(&o.MaxBodyMemory, "max-body-memory", 0, "bound on the memory of all request bodies in flight together, in `bytes`, at least twice the largest body cap (0: a quarter of the machine's memory, at most 1 GiB)")
	fs.Var((*listFlag)(&o.AllowHosts), "allow-host", "without client tokens, answer requests for this host `name` too, besides loopback names (repeatable, or comma-separated)")
	fs.Var((*listFlag)(&o.AllowOrigins), "allow-origin", "let web pages of this `origin` (https://app.example.com) call the proxy, with CORS headers (repeatable, or comma-separated; * only with client tokens)")
	fs.DurationVar(&c.Drain, "drain-timeout", 30*time.Second, "how long requests in flight may finish after SIGTERM")
	fs.StringVar(&c.Redis, "redis", "", "share limits, breakers and cool-downs with other replicas on this Redis `URL` (one with a password: --redis-env)")
	fs.StringVar(&f.redisEnv, "redis-env", "", "as --redis, with the URL (and its password) in this environment `variable`, out of ps's sight")
	fs.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "bound each attempt, its body read included (0: none but the client's)")
	fs.DurationVar(&o.MaxQueueWait, "max-queue-wait", proxy.DefaultMaxQueueWait, "how long a request may wait for a slot of its upstream's limit on requests in flight; then a 503")
	if code, done := parseFlags(fs, args, proxyUsage, withStdout(stderr, stdout)); done {
		return code
	}
	if err := f.complete(&c); err != nil {
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 2
	}
	return proxyrun.Run(ctx, c, stdout, stderr)
}

// complete checks c's flags and fills in from f what they leave to the
// environment and to files: the keys, the tokens, the config.
func (f *proxyFlags) complete(c *proxyrun.Config) error {
	o := &c.Options
	switch {
	case o.Upstream == "" && f.configFile == "":
		return errors.New("give --upstream URL or --config FILE")
	case o.Upstream != "" && f.configFile != "":
		return errors.New("--upstream and --config both given: the config names the upstreams")
	case f.keyEnv != "" && o.Upstream == "":
		return errors.New("--key-env goes with --upstream (a config names its keys' variables)")
	case o.MaxBody <= 0:
		return fmt.Errorf("--max-body %d: want a positive number of bytes", o.MaxBody)
	case o.MaxBodyMemory < 0:
		return fmt.Errorf("--max-body-memory %d: want a positive number of bytes (0: the default)", o.MaxBodyMemory)
	case o.MaxBodyMemory > 0 && o.MaxBodyMemory/2 < o.MaxBody:
		return fmt.Errorf("--max-body-memory %d: want at least twice --max-body (%d)", o.MaxBodyMemory, o.MaxBody)
	case c.Drain < 0:
		return fmt.Errorf("--drain-timeout %v is negative", c.Drain)
	case f.attemptTimeout < 0:
		return fmt.Errorf("--attempt-timeout %v is negative", f.attemptTimeout)
	case o.MaxQueueWait <= 0:
		return fmt.Errorf("--max-queue-wait %v: want a positive duration", o.MaxQueueWait)
	case c.Redis != "" && f.redisEnv != "":
		return errors.New("--redis and --redis-env both given")
	}
	if f.redisEnv != "" {
		if c.Redis = os.Getenv(f.redisEnv); c.Redis == "" {
			return fmt.Errorf("--redis-env: environment variable %s is not set", f.redisEnv)
		}
	}
	host, err := serve.CheckAddr(c.Addr)
	if err != nil {
		return err
	}
	if o.Tokens, err = readTokens(f.tokenEnv, f.tokensFile); err != nil {
		return err
	}
	if !isLoopback(host) && len(o.Tokens) == 0 {
		return fmt.Errorf("--addr %s is not a loopback address: give client tokens (--token-env or --tokens-file)", c.Addr)
	}
	return f.fill(o)
}

// fill fills in o what the flags take from the environment and from
// files: the upstream's key, the config; and the defaults they leave.
func (f *proxyFlags) fill(o *proxy.Options) error {
	o.Getenv = os.Getenv
	if o.MaxBodyMemory == 0 {
		o.MaxBodyMemory = proxyrun.DefaultBodyMemory()
	}
	if f.keyEnv != "" {
		if o.UpstreamKey = os.Getenv(f.keyEnv); o.UpstreamKey == "" {
			return fmt.Errorf("--key-env: environment variable %s is not set", f.keyEnv)
		}
	}
	if f.configFile != "" {
		data, err := os.ReadFile(f.configFile)
		if err != nil {
			return fmt.Errorf("--config: %v", err)
		}
		if o.Config, err = proxy.ParseConfig(data, os.Getenv); err != nil {
			return err
		}
	}
	if f.attemptTimeout > 0 {
		p := proxy.RecommendedPolicy()
		p.AttemptTimeout = f.attemptTimeout
		o.Policy = &p
	}
	return nil
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

// isLoopback reports whether host names a loopback address only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
