package proxyrun

// Usage is the help of "rebound proxy": what the proxy does, and its
// flags (which the command appends).
const Usage = `usage: rebound proxy --upstream URL [flags]
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
    first content, another answer until its first byte; a request that
    finds no slot within --max-queue-wait goes to the route's next
    upstream if it has a slot free at once, and otherwise gets a 503 with
    Retry-After, never sent; one the learnt limits would hold longer than
    --max-queue-wait goes to the next key or upstream at once, and
    otherwise gets a 429 with Retry-After, never sent);
  - streams passed through byte for byte as they come; one that breaks
    after its first content reaches the client broken, as it broke.

With --upstream and no config, the client's own key passes through
unchanged. A config file (JSON) names several upstreams, routes by path
prefix or model, fallbacks to upstreams of the same dialect (with the model
renamed), and a policy (rebound's Policy JSON) and body cap per route; the
upstreams' keys come from the environment variables it names. With
pass_client_key, the client's key goes only to the route's own upstream,
never to a fallback. An upstream's "keys_env": ["K1", "K2"] (in key_env's
place) is a pool of keys whose limits add up: each key has its own pace
learnt from its own rate-limit headers, its own quota cool-down and its own
breaker (keyed UPSTREAM/K1:MODEL; named by the variable, never the key); a
request goes to the key with the most headroom left, skips a key cooling
down after its quota ran out (on every replica with --redis), and moves to
the next key at once on a 429, waiting only on the last. The requests of
one conversation (named by the client's prompt_cache_key, user or
metadata.user_id, else by the start of its prompt) stay on one key, the
one holding the provider's prompt cache of it, while it can take them;
"affinity": "none" on the upstream sends each by headroom alone.

Tenants (the config's "tenants"): each has its client tokens ("tokens_env":
the variable holding them, comma-separated; --token-env's tokens are the
tenant "default"), and optionally "spend_cap_usd" with "period" ("day",
the default, or "month", UTC), "requests_per_minute", "tokens_per_minute"
and "models" (the models it may use; another gets a 403). The config's
"prices" ({"MODEL": {"input_per_million": 0.15, "output_per_million": 0.6}})
price the caps: a capped tenant lists its models, each priced. Every
attempt is held at the most it could cost and refused, never sent, if that
could pass its tenant's cap, then settled at the usage its answer reports;
a refusal is the dialect's own quota error (OpenAI's 429
insufficient_quota, Anthropic's 402 billing_error, Gemini's 429
RESOURCE_EXHAUSTED) with x-should-retry: false, naming the cap and when it
resets. A request over its tenant's rate limits waits up to 1 s, then gets
a 429 with Retry-After. With tenants every request needs a token. With
--redis the caps and limits are shared by every replica (--replicas N:
how many, so that each spends at most 1/N of what is left of a cap while
Redis is away). The access log carries "tenant" and "cost_usd", /metrics
the rebound_proxy_tenant_* series, and rebound analyze reads the log for
spend by tenant.

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
(503 while draining) are open to all. GET /ui is a live status page (it
polls /ui/status, JSON, every 2 s): per upstream and key the breaker, the
headroom learnt from headers, requests in flight, calls, attempts, retry
rate, failures by kind and p50/p99 latency over the last 5 minutes; per
tenant the spend against its cap, requests and refusals; the last 20
failed attempts (time, route, kind, status: never a header, body or key).
It and /metrics (Prometheus) answer requests from this machine (a
loopback connection, for a loopback host name, through no server in
front); others need the admin token from --admin-token-env, as
"Authorization: Bearer TOKEN" or as the password a browser asks for. A
client token does not open them, and the admin token is no client token.
Bound beyond loopback without it, the proxy says at start that they are
off to others, and answers them a 403.

SIGHUP reads the --config file again: a good config takes over for new
requests while those in flight finish on the one they started with, and
keeps the state of every upstream, key and tenant it keeps unchanged
(learnt limits, breakers, quota cool-downs, retry budgets, a tenant's
spend and limits; a tenant's changed cap starts from its spend so far);
a bad one is refused in one log line ("config refused") and the old one
stays. The log ("config loaded") and /ui say which config version is
live: the first 12 hex digits of the SHA-256 of the file. Flags and
tokens are read at start only. Without --config, SIGHUP is ignored.

On SIGTERM or SIGINT the proxy
stops accepting, lets requests in flight (streams included) finish for up
to --drain-timeout, and exits 0.

flags:
`
